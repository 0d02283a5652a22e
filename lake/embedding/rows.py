"""Embedding content rows: fill the embedding column, or mark the rows failed (best effort)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lake.embedding.base import Embedder, encode_batches
from lake.errors import EmbeddingError

DONE, PENDING, FAILED = "done", "pending", "failed"


@dataclass(frozen=True)
class EmbedOutcome:
    """How embedding a set of rows went."""

    embedded: int
    failed: int
    error: str | None


def embed_rows(rows: pa.Table, embedder: Embedder, *, batch_size: int = 64,
               on_progress: Callable[[int], None] | None = None) -> tuple[pa.Table, EmbedOutcome]:
    """Embed the ``text`` of content rows; on provider failure keep the rows, status ``failed``.

    Returns the rows with ``embedding``, ``embedding_model`` and ``embedding_status`` replaced.
    Rows stay findable lexically and by trigram whatever happens here.
    """
    n = rows.num_rows
    if n == 0:
        return rows, EmbedOutcome(0, 0, None)
    texts = rows.column("text").to_pylist()
    try:
        vectors = encode_batches(embedder, texts, batch_size=batch_size, on_progress=on_progress)
    except EmbeddingError as exc:
        return with_embeddings(rows, None, None, FAILED), EmbedOutcome(0, n, str(exc))
    return with_embeddings(rows, vectors, embedder.name, DONE), EmbedOutcome(n, 0, None)


def with_embeddings(rows: pa.Table, vectors: np.ndarray | None, model: str | None,
                    status: str) -> pa.Table:
    """Replace the three embedding columns of every row."""
    n = rows.num_rows
    if vectors is None:
        column: pa.Array = pa.nulls(n, type=pa.list_(pa.float32()))
    else:
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        offsets = pa.array(np.arange(0, (n + 1) * vectors.shape[1], vectors.shape[1],
                                     dtype=np.int32))
        column = pa.ListArray.from_arrays(offsets, flat)
    for name, value in (("embedding", column),
                        ("embedding_model", pa.array([model] * n, type=pa.string())),
                        ("embedding_status", pa.array([status] * n, type=pa.string()))):
        rows = rows.set_column(rows.schema.get_field_index(name), name, value)
    return rows
