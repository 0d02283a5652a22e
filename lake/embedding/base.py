"""The embedding-provider contract and the batching helper every caller goes through.

A provider turns texts into float32 rows of unit length. Callers never talk to a provider
directly for bulk work: :func:`encode_batches` validates what comes back, reports progress and
turns every provider failure into :class:`lake.errors.EmbeddingError`, so the indexing job can
catch one exception type and fall back to text-only search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from lake.errors import EmbeddingError

DEFAULT_BATCH_SIZE: int = 64
# Rows whose norm differs from 1 by more than this are reported as a provider fault.
_NORM_TOLERANCE: float = 1e-3


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to L2-normalized float32 vectors of a fixed width."""

    @property
    def name(self) -> str:
        """Model identifier recorded in index manifests (changes when vectors would change)."""
        ...

    @property
    def dim(self) -> int:
        """Width of every vector this provider returns."""
        ...

    def encode(self, texts: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        """Return a float32 array of shape ``(len(texts), dim)`` with L2-normalized rows."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list, raising :class:`EmbeddingError` on a non-string item."""
    if isinstance(texts, str):
        # A bare string is a sequence of characters; encoding each letter is never intended.
        raise EmbeddingError("texts must be a sequence of strings, got a single str")
    items = list(texts)
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise EmbeddingError(
                f"texts[{position}] is {type(item).__name__}, expected str"
            )
    return items


def check_batch_size(batch_size: int) -> None:
    """Raise :class:`EmbeddingError` unless ``batch_size`` is a positive int."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise EmbeddingError(f"batch_size must be a positive int, got {batch_size!r}")


def check_vectors(vectors: object, *, rows: int, dim: int, provider: str) -> np.ndarray:
    """Validate a provider's output and return it as a C-contiguous float32 array.

    All-zero rows are allowed (a text with no features has no direction); any other row must be
    finite and of unit length, because the semantic index scores by raw inner product.
    """
    if not isinstance(vectors, np.ndarray):
        raise EmbeddingError(
            f"embedder {provider!r} returned {type(vectors).__name__}, expected numpy.ndarray"
        )
    if vectors.shape != (rows, dim):
        raise EmbeddingError(
            f"embedder {provider!r} returned shape {vectors.shape}, expected {(rows, dim)}"
        )
    out = np.ascontiguousarray(vectors, dtype=np.float32)
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out).all(axis=1))[0])
        raise EmbeddingError(f"embedder {provider!r} returned a non-finite value in row {bad}")
    norms = np.linalg.norm(out, axis=1)
    off = (norms != 0.0) & (np.abs(norms - 1.0) > _NORM_TOLERANCE)
    if off.any():
        bad = int(np.flatnonzero(off)[0])
        raise EmbeddingError(
            f"embedder {provider!r} returned row {bad} with norm {norms[bad]:.4f}, expected 1"
        )
    return out


def encode_batches(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_progress: Callable[[int], None] | None = None,
    chunk_size: int | None = None,
) -> np.ndarray:
    """Encode ``texts`` in chunks, reporting progress, and return ``(len(texts), dim)`` float32.

    ``on_progress`` receives the cumulative number of texts encoded after each chunk.
    ``chunk_size`` is how many texts go to one ``encode`` call (default ``32 * batch_size``):
    larger chunks let a provider sort by length to cut padding, smaller ones report progress
    more often. Any failure inside the provider is re-raised as :class:`EmbeddingError` with
    the original exception chained as its cause; errors from ``on_progress`` propagate as-is.
    """
    check_batch_size(batch_size)
    items = check_texts(texts)
    step = 32 * batch_size if chunk_size is None else chunk_size
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise EmbeddingError(f"chunk_size must be a positive int, got {chunk_size!r}")
    provider = _provider_name(embedder)
    dim = _provider_dim(embedder, provider)
    out = np.empty((len(items), dim), dtype=np.float32)
    for start in range(0, len(items), step):
        chunk = items[start : start + step]
        try:
            raw = embedder.encode(chunk, batch_size=batch_size)
        except EmbeddingError:
            raise
        except Exception as exc:  # any provider fault must reach callers as EmbeddingError
            raise EmbeddingError(
                f"embedder {provider!r} failed on texts {start}..{start + len(chunk) - 1}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        out[start : start + len(chunk)] = check_vectors(
            raw, rows=len(chunk), dim=dim, provider=provider
        )
        if on_progress is not None:
            on_progress(start + len(chunk))
    return out


def _provider_name(embedder: Embedder) -> str:
    try:
        return str(embedder.name)
    except Exception as exc:
        raise EmbeddingError(f"embedder has no usable name: {exc}") from exc


def _provider_dim(embedder: Embedder, provider: str) -> int:
    try:
        dim = embedder.dim
    except EmbeddingError:
        raise
    except Exception as exc:  # a lazy provider may load its model to answer this
        raise EmbeddingError(
            f"embedder {provider!r} could not report its dimension: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise EmbeddingError(f"embedder {provider!r} reported invalid dim {dim!r}")
    return dim
