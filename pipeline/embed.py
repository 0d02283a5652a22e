"""``turnlake embed --backfill``: embed every content row still ``pending`` or ``failed``.

The driver takes the writer lock, plans (which partitions, at which ``content_rows`` version)
and commits each partition's embedded rows. *Where* a partition's rows are read and embedded
is pluggable (a :class:`PartitionEmbedder`): in this process (the default) or one Ray task each
(``pipeline.ray_jobs.EmbedOnRay``); either way the writes stay in the process holding the lock.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.dataset as ds

from lake.embedding.base import Embedder
from lake.embedding.rows import FAILED, PENDING, EmbedOutcome, embed_rows
from lake.locks import writer_lock
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table

_TO_EMBED = ds.field("embedding_status").isin([PENDING, FAILED])


@dataclass
class BackfillReport:
    """What a backfill did."""

    embedded: int = 0
    failed: int = 0
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
    """Embeds the pending rows of partitions as of one ``content_rows`` version, yielding each
    partition as it finishes (in any order). ``on_rows(n)`` may report rows embedded so far in
    the partition being embedded (in-process work only). Closing the generator stops the rest.
    """

    def __call__(self, store: LakeStore, version: int, partitions: Sequence[tuple[str, str]],
                 *, on_rows: Callable[[int], None] | None = None,
                 ) -> Generator[EmbeddedPartition, None, None]: ...


def rows_to_embed(store: LakeStore, version: int, tenant: str, month: str) -> pa.Table:
    """The partition's content rows whose embedding is pending or failed, at ``version``."""
    return store.read(Table.CONTENT_ROWS, version=version,
                      filter=(ds.field("tenant") == tenant) & (ds.field("month") == month)
                      & _TO_EMBED)


def embed_partition(store: LakeStore, version: int, tenant: str, month: str,
                    embedder: Embedder, *, batch_size: int,
                    on_progress: Callable[[int], None] | None = None) -> EmbeddedPartition:
    """Read and embed one partition's pending and failed rows (``batch_size`` texts a call)."""
    rows, outcome = embed_rows(rows_to_embed(store, version, tenant, month), embedder,
                               batch_size=batch_size, on_progress=on_progress)
    return EmbeddedPartition(tenant, month, rows, outcome)


@dataclass(frozen=True)
class EmbedInProcess:
    """The default :class:`PartitionEmbedder`: each partition in turn, in this process."""

    embedder: Embedder
    batch_size: int

    def __call__(self, store: LakeStore, version: int, partitions: Sequence[tuple[str, str]],
                 *, on_rows: Callable[[int], None] | None = None,
                 ) -> Generator[EmbeddedPartition, None, None]:
        """Embed the partitions one after another."""
        for tenant, month in partitions:
            yield embed_partition(store, version, tenant, month, self.embedder,
                                  batch_size=self.batch_size, on_progress=on_rows)


def backfill(settings: Settings, embedder: Embedder, *,
             on_progress: Callable[[int, int], None] | None = None,
             on_partition: Callable[[str, int, int], None] | None = None,
             runner: PartitionEmbedder | None = None) -> BackfillReport:
    """Embed rows whose status is pending or failed, partition by partition (one commit each).

    ``on_progress(done, total)`` reports rows embedded so far, ``on_partition(name, done,
    total)`` each finished partition. ``runner`` decides where partitions are embedded
    (default: in this process with ``embedder``); commits always happen here, under the lock.
    """
    store = LakeStore(settings.lake)
    report = BackfillReport()
    if not store.exists(Table.CONTENT_ROWS):
        return report
    with writer_lock(store.root, timeout_s=settings.lock_timeout_s, job="turnlake embed"):
        version = store.version(Table.CONTENT_ROWS)
        assert version is not None
        counts = _rows_per_partition(store, version)
        total, done = sum(counts.values()), 0
        if total == 0:
            return report

        def progress(n: int) -> None:
            if on_progress is not None:
                on_progress(done + n, total)

        embed = runner or EmbedInProcess(embedder, settings.embed_batch_size)
        results = embed(store, version, sorted(counts), on_rows=progress)
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


def _rows_per_partition(store: LakeStore, version: int) -> dict[tuple[str, str], int]:
    parts = store.read(Table.CONTENT_ROWS, version=version, columns=["tenant", "month"],
                       filter=_TO_EMBED)
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
    report.error = outcome.error or report.error
