"""Embedding content rows: fill the embedding column, or mark the rows failed (best effort).

Only distinct texts are sent to the provider: identical texts of one tenant within the rows are
embedded once, and texts whose vector the tenant's rows already carry (same identity) are
reused through :class:`lake.embedding.reuse.VectorReuse`. Duplicates are never matched across
tenants, even within one batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lake.embedding.base import Embedder, encode_batches
from lake.embedding.passages import encode_passages, passage_column, splitter_of
from lake.embedding.reuse import Embedded, VectorReuse, text_digest
from lake.errors import EmbeddingError

DONE, PENDING, FAILED = "done", "pending", "failed"


@dataclass(frozen=True)
class EmbedOutcome:
    """How embedding a set of rows went: ``embedded`` rows got a vector, ``reused`` of them
    without computing it (a duplicate in the rows, or a vector already in the lake)."""

    embedded: int
    failed: int
    error: str | None
    reused: int = 0


def embed_rows(rows: pa.Table, embedder: Embedder, *, batch_size: int = 64,
               on_progress: Callable[[int], None] | None = None,
               reuse: VectorReuse | None = None) -> tuple[pa.Table, EmbedOutcome]:
    """Embed the ``text`` of content rows; on provider failure keep the rows, status ``failed``.

    Returns the rows with ``embedding``, ``embedding_model``, ``embedding_status`` and
    ``embedding_sampled`` replaced, and ``passage_embeddings``: a text longer than the model
    reads is cut into passages by the embedder's splitter (lake.embedding.passages), its
    vector pooled from theirs, which are kept beside it; one longer than
    ``embed_max_passages`` passages is embedded by a sample of them, and says so
    (``embedding_sampled``). Rows stay findable lexically and by trigram whatever happens here.
    ``reuse`` (for ``embedder.name`` only) supplies vectors the lake already holds and learns
    the new ones; ``on_progress`` counts rows, reused ones included.
    """
    n = rows.num_rows
    if n == 0:
        return rows, EmbedOutcome(0, 0, None)
    if reuse is not None and reuse.identity != embedder.name:
        raise EmbeddingError(f"vector reuse for {reuse.identity!r} offered to embedder "
                             f"{embedder.name!r}")
    texts = rows.column("text").to_pylist()
    tenants = rows.column("tenant").to_pylist()
    keys = [(tenant, text_digest(text or "")) for tenant, text in zip(tenants, texts,
                                                                       strict=True)]
    known: dict[tuple[str, bytes], Embedded] = {}
    if reuse is not None:
        for tenant in set(tenants):
            found = reuse.lookup(tenant, {d for t, d in keys if t == tenant})
            known.update(((tenant, d), v) for d, v in found.items())
    todo: dict[tuple[str, bytes], int] = {}  # distinct keys to compute -> position in batch
    for key in keys:
        if key not in known and key not in todo:
            todo[key] = len(todo)
    order = list(todo)
    first = {key: i for i, key in reversed(list(enumerate(keys)))}

    def encode(items: list[str]) -> np.ndarray:
        # progress counts rows: the passages sent stand for the rows still to compute
        return encode_batches(embedder, items, batch_size=batch_size,
                              on_progress=None if on_progress is None else
                              (lambda done: on_progress(round(done * n / max(len(items), 1)))))

    try:
        # the splitter only when something is computed: it loads a lazy model
        computed, passages = encode_passages(
            encode, [texts[first[key]] or "" for key in order],
            splitter_of(embedder) if order else None)
    except EmbeddingError as exc:
        return with_embeddings(rows, None, None, FAILED), EmbedOutcome(0, n, str(exc))
    splitter = splitter_of(embedder)
    for key, vector, parts in zip(order, computed, passages, strict=True):
        known[key] = Embedded(vector, parts)
        if reuse is not None:
            reuse.remember(key[0], key[1], vector, parts)
    dim = computed.shape[1] if order else len(next(iter(known.values())).vector)
    vectors = np.empty((n, dim), dtype=np.float32)
    for i, key in enumerate(keys):
        vectors[i] = known[key].vector
    if on_progress is not None and not order:
        on_progress(n)
    return (with_embeddings(rows, vectors, embedder.name, DONE,
                            passages=[known[key].passages for key in keys],
                            sampled=[splitter is not None and splitter.sampled(text or "")
                                     for text in texts]),
            EmbedOutcome(n, 0, None, reused=n - len(order)))


def with_embeddings(rows: pa.Table, vectors: np.ndarray | None, model: str | None,
                    status: str, *, passages: Sequence[np.ndarray | None] | None = None,
                    sampled: Sequence[bool] | None = None) -> pa.Table:
    """Replace the embedding columns of every row: ``passages`` gives each row's passage
    vectors (None, or omitted for all rows: a text that fits, or no vector), ``sampled``
    whether each row's vector stands for a sample of its text (``embedding_sampled``; null
    for rows without a vector, false for the others when omitted). Rows read from a lake
    written before ``embedding_sampled`` existed get the column."""
    n = rows.num_rows
    if vectors is None:
        column: pa.Array = pa.nulls(n, type=pa.list_(pa.float32()))
    else:
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        offsets = pa.array(np.arange(0, (n + 1) * vectors.shape[1], vectors.shape[1],
                                     dtype=np.int32))
        column = pa.ListArray.from_arrays(offsets, flat)
    flags = (pa.nulls(n, pa.bool_()) if vectors is None else
             pa.array(list(sampled) if sampled is not None else [False] * n, pa.bool_()))
    for name, value in (("embedding", column),
                        ("passage_embeddings", passage_column(passages, n)),
                        ("embedding_model", pa.array([model] * n, type=pa.string())),
                        ("embedding_status", pa.array([status] * n, type=pa.string())),
                        ("embedding_sampled", flags)):
        at = rows.schema.get_field_index(name)
        rows = rows.append_column(name, value) if at < 0 else rows.set_column(at, name, value)
    return rows
