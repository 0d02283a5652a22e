"""``turnlake embed --backfill``: embed every content row still ``pending`` or ``failed``
(with ``--reembed`` also every row embedded by another identity than the configured one);
``turnlake embed --long-texts``: re-embed, as passages, rows longer than the model reads.

The driver takes the writer lock, plans (which partitions, at which ``content_rows`` version)
and commits each partition's embedded rows. *Where* a partition's rows are read and embedded
is pluggable (a :class:`PartitionEmbedder`): in this process (the default) or one Ray task each
(``pipeline.ray_jobs.EmbedOnRay``); either way the writes stay in the process holding the lock.
Vectors the tenant's rows already carry for the same text and identity are reused, not
recomputed (:mod:`lake.embedding.reuse`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lake.embedding.base import Embedder
from lake.embedding.passages import splitter_of
from lake.embedding.reuse import VectorReuse
from lake.embedding.rows import DONE, FAILED, PENDING, EmbedOutcome, embed_rows
from lake.errors import TurnlakeError
from lake.locks import writer_lock
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table

_TO_EMBED = ds.field("embedding_status").isin([PENDING, FAILED])


def to_embed(reembed: str | None = None) -> ds.Expression:
    """Rows a backfill embeds: pending or failed ones; with ``reembed`` (an identity) also the
    ``done`` rows whose ``embedding_model`` is any other identity."""
    if reembed is None:
        return _TO_EMBED
    model = ds.field("embedding_model")
    other = (ds.field("embedding_status") == DONE) & (model.is_null() | (model != reembed))
    return _TO_EMBED | other


@dataclass
class BackfillReport:
    """What a backfill did."""

    embedded: int = 0
    failed: int = 0
    reused: int = 0
    # --long-texts: rows longer than the model reads, of which ``embedded`` got a new vector
    long_rows: int = 0
    partitions: set[tuple[str, str]] = field(default_factory=set)
    error: str | None = None


@dataclass(frozen=True)
class EmbeddedPartition:
    """One partition's rows to embed, after embedding (committed by the caller)."""

    tenant: str
    month: str
    rows: pa.Table
    outcome: EmbedOutcome


class PartitionEmbedder(Protocol):
    """Embeds the rows to embed (see :func:`to_embed`; ``reembed`` as there) of partitions as of
    one ``content_rows`` version, yielding each partition as it finishes (in any order).
    ``on_rows(n)`` may report rows embedded so far in the partition being embedded (in-process
    work only). Closing the generator stops the rest.
    """

    def __call__(self, store: LakeStore, version: int, partitions: Sequence[tuple[str, str]],
                 *, reembed: str | None = None, on_rows: Callable[[int], None] | None = None,
                 ) -> Generator[EmbeddedPartition, None, None]: ...


def rows_to_embed(store: LakeStore, version: int, tenant: str, month: str, *,
                  reembed: str | None = None) -> pa.Table:
    """The partition's content rows to embed at ``version`` (see :func:`to_embed`)."""
    return store.read(Table.CONTENT_ROWS, version=version,
                      filter=(ds.field("tenant") == tenant) & (ds.field("month") == month)
                      & to_embed(reembed))


def embed_partition(store: LakeStore, version: int, tenant: str, month: str,
                    embedder: Embedder, *, batch_size: int, reembed: str | None = None,
                    reuse: VectorReuse | None = None,
                    on_progress: Callable[[int], None] | None = None) -> EmbeddedPartition:
    """Read and embed one partition's rows to embed (``batch_size`` texts a call), reusing
    the vectors ``reuse`` knows."""
    rows, outcome = embed_rows(rows_to_embed(store, version, tenant, month, reembed=reembed),
                               embedder, batch_size=batch_size, on_progress=on_progress,
                               reuse=reuse)
    return EmbeddedPartition(tenant, month, rows, outcome)


@dataclass(frozen=True)
class EmbedInProcess:
    """The default :class:`PartitionEmbedder`: each partition in turn, in this process."""

    embedder: Embedder
    batch_size: int
    reuse_after: int = Settings.embed_reuse_min_texts

    def __call__(self, store: LakeStore, version: int, partitions: Sequence[tuple[str, str]],
                 *, reembed: str | None = None, on_rows: Callable[[int], None] | None = None,
                 ) -> Generator[EmbeddedPartition, None, None]:
        """Embed the partitions one after another, reusing vectors across all of them."""
        reuse = VectorReuse(store, self.embedder.name, version=version,
                            load_after=self.reuse_after)
        for tenant, month in partitions:
            yield embed_partition(store, version, tenant, month, self.embedder,
                                  batch_size=self.batch_size, reembed=reembed, reuse=reuse,
                                  on_progress=on_rows)


def backfill(settings: Settings, embedder: Embedder, *, reembed: bool = False,
             on_progress: Callable[[int, int], None] | None = None,
             on_partition: Callable[[str, int, int], None] | None = None,
             runner: PartitionEmbedder | None = None) -> BackfillReport:
    """Embed rows whose status is pending or failed, partition by partition (one commit each).

    ``on_progress(done, total)`` reports rows embedded so far, ``on_partition(name, done,
    total)`` each finished partition. ``runner`` decides where partitions are embedded
    (default: in this process with ``embedder``); commits always happen here, under the lock.
    ``reembed`` also re-embeds rows whose vectors came from another identity than
    ``embedder.name`` (a model, runtime family or precision change).
    """
    report = BackfillReport()
    keep = embedder.name if reembed else None
    with _planned(settings, to_embed(keep)) as plan:
        if plan is None:
            return report
        store, version, counts = plan
        total, done = sum(counts.values()), 0

        def progress(n: int) -> None:
            if on_progress is not None:
                on_progress(done + n, total)

        embed = runner or EmbedInProcess(embedder, settings.embed_batch_size,
                                           settings.embed_reuse_min_texts)
        results = embed(store, version, sorted(counts), reembed=keep, on_rows=progress)
        # closing(): stop partitions still being embedded elsewhere when this loop ends early.
        with closing(results):
            for i, part in enumerate(results, start=1):
                _commit(store, part, report)
                done += counts[(part.tenant, part.month)]
                progress(0)
                if on_partition is not None:
                    on_partition(f"{part.tenant}/{part.month}", i, len(counts))
                if part.outcome.error:
                    break  # the provider is down: later partitions would fail the same way
    return report


def long_texts(identity: str, window: int) -> ds.Expression:
    """Rows embedded by ``identity`` without passage vectors whose text may be longer than
    ``window`` word pieces: more UTF-8 bytes than that, the bound
    lake.embedding.passages.PassageSplitter.split reads too."""
    return (ds.field("embedding_status") == DONE) & (ds.field("embedding_model") == identity) \
        & ds.field("passage_embeddings").is_null() \
        & (pc.binary_length(ds.field("text")) > window)


def refresh_long_texts(settings: Settings, embedder: Embedder, *,
                       on_progress: Callable[[int, int], None] | None = None,
                       on_partition: Callable[[str, int, int], None] | None = None
                       ) -> BackfillReport:
    """Re-embed the rows of ``embedder``'s identity that are longer than its model reads and
    carry no passage vectors, as passages (lake.embedding.passages): rows embedded before
    passages existed carry their opening's vector, and rows embedded before passage vectors
    were kept lack those. Each partition is one commit; no stored vector is reused, since the
    stale ones are exactly those. Raises TurnlakeError when the embedder cuts no passages."""
    splitter = splitter_of(embedder)
    if splitter is None:
        raise TurnlakeError(f"embedder {embedder.name!r} cuts no passages (it has no "
                            "tokenizer.json to count word pieces with): long texts are "
                            "truncated, so there is nothing to refresh")
    report = BackfillReport()
    select = long_texts(embedder.name, splitter.window)
    with _planned(settings, select) as plan:
        if plan is None:
            return report
        store, version, counts = plan
        total, done = sum(counts.values()), 0
        for i, (tenant, month) in enumerate(sorted(counts), start=1):
            rows = store.read(Table.CONTENT_ROWS, version=version, filter=select & (
                ds.field("tenant") == tenant) & (ds.field("month") == month))
            long = [len(p) > 1 for p in splitter.split(
                [t or "" for t in rows.column("text").to_pylist()])]
            rows = rows.filter(pa.array(long, pa.bool_()))
            report.long_rows += rows.num_rows
            fresh, outcome = embed_rows(rows, embedder, batch_size=settings.embed_batch_size)
            _commit(store, EmbeddedPartition(tenant, month, fresh, outcome), report)
            done += counts[(tenant, month)]
            if on_progress is not None:
                on_progress(done, total)
            if on_partition is not None:
                on_partition(f"{tenant}/{month}", i, len(counts))
            if outcome.error:
                break
    return report


@contextmanager
def _planned(settings: Settings, select: ds.Expression
             ) -> Iterator[tuple[LakeStore, int, dict[tuple[str, str], int]] | None]:
    """Under the writer lock: the store, the ``content_rows`` version the job reads, and how
    many rows ``select`` picks per partition; None when the lake has no content rows or
    ``select`` picks none."""
    store = LakeStore(settings.lake)
    if not store.exists(Table.CONTENT_ROWS):
        yield None
        return
    with writer_lock(store.root, timeout_s=settings.lock_timeout_s, job="turnlake embed"):
        version = store.version(Table.CONTENT_ROWS)
        assert version is not None
        counts = _rows_per_partition(store, version, select)
        yield (store, version, counts) if counts else None


def _rows_per_partition(store: LakeStore, version: int,
                        select: ds.Expression) -> dict[tuple[str, str], int]:
    parts = store.read(Table.CONTENT_ROWS, version=version, columns=["tenant", "month"],
                       filter=select)
    grouped = parts.group_by(["tenant", "month"]).aggregate([([], "count_all")])
    return {(t, m): n for t, m, n in zip(grouped["tenant"].to_pylist(),
                                         grouped["month"].to_pylist(),
                                         grouped["count_all"].to_pylist(), strict=True)}


def _commit(store: LakeStore, part: EmbeddedPartition, report: BackfillReport) -> None:
    outcome = part.outcome
    if outcome.embedded:
        ids = ", ".join(repr(r) for r in part.rows.column("row_id").to_pylist())
        store.replace_where(Table.CONTENT_ROWS, part.rows,
                            f"tenant = '{part.tenant}' AND month = '{part.month}' "
                            f"AND row_id IN ({ids})")
        report.partitions.add((part.tenant, part.month))
    report.embedded += outcome.embedded
    report.failed += outcome.failed
    report.reused += outcome.reused
    report.error = outcome.error or report.error
