"""An embedding cache for benchmarks, so re-runs do not re-encode the same texts."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lake.embedding.base import Embedder
from lake.embedding.passages import PassageSplitter, splitter_of

CACHE_DIR = Path(__file__).parent / ".cache"


class CachedEmbedder:
    """Wraps an embedder; vectors are kept per text hash in memory and in an .npz file."""

    def __init__(self, inner: Embedder, *, path: Path | None = None) -> None:
        self.inner = inner
        self.path = path or CACHE_DIR / f"emb-{inner.name}.npz"
        self._vectors: dict[str, np.ndarray] = {}
        if self.path.exists():
            data = np.load(self.path)
            self._vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        self.misses = 0

    @property
    def name(self) -> str:
        """The inner model's name (vectors are identical)."""
        return self.inner.name

    @property
    def dim(self) -> int:
        """The inner model's width."""
        return self.inner.dim

    @property
    def passage_splitter(self) -> PassageSplitter | None:
        """The inner model's passage splitter (lake.embedding.passages.splitter_of)."""
        return splitter_of(self.inner)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Vectors for texts, encoding only the ones not seen before."""
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True)
                       if k not in self._vectors}.items())
        if todo:
            self.misses += len(todo)
            fresh = self.inner.encode([t for _, t in todo], batch_size=batch_size)
            for (k, _), v in zip(todo, fresh, strict=True):
                self._vectors[k] = v
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        """Persist the cache."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._vectors))
        vectors = np.stack(list(self._vectors.values())) if self._vectors else np.zeros((0, 1))
        np.savez(self.path, keys=keys, vectors=vectors)
