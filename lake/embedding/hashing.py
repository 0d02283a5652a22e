"""A deterministic, dependency-free embedder based on signed feature hashing.

It has no notion of meaning, only of shared words and spellings, which is exactly what unit tests
and offline tools need: the same text always gives the same vector on every machine and Python
version (CRC-32 is used instead of ``hash()``, which is salted per process), and texts that share
words or word fragments get a high cosine similarity.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from lake.embedding.base import DEFAULT_BATCH_SIZE, check_batch_size, check_texts
from lake.errors import EmbeddingError

_WORD = re.compile(r"\w+")
# Whole words carry more meaning than any one of their trigrams; trigrams mainly make
# misspellings and inflections land near each other.
_WORD_WEIGHT: float = 1.0
_TRIGRAM_WEIGHT: float = 0.5


class HashingEmbedder:
    """Feature-hashing embedder over lower-cased word unigrams and character trigrams.

    Each feature is hashed to one of ``dim`` buckets with a hash-derived sign (so collisions
    cancel on average instead of piling up), the counts are weighted and the row is L2-normalized.
    A text with no word characters has no features and encodes to an all-zero row, which the
    semantic index treats as a missing embedding.
    """

    def __init__(self, dim: int = 64) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise EmbeddingError(f"HashingEmbedder dim must be a positive int, got {dim!r}")
        self._dim = dim

    @property
    def name(self) -> str:
        """Identifier recorded in manifests; includes the width because it changes every vector."""
        return f"hashing-{self._dim}"

    @property
    def dim(self) -> int:
        """Width of the vectors."""
        return self._dim

    def encode(self, texts: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        """Return ``(len(texts), dim)`` float32 unit rows (all-zero for featureless texts).

        ``batch_size`` is validated for contract parity but does not change the result.
        """
        check_batch_size(batch_size)
        items = check_texts(texts)
        out = np.zeros((len(items), self._dim), dtype=np.float32)
        for row, text in enumerate(items):
            self._accumulate(text, out[row])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0.0)
        return out

    def _accumulate(self, text: str, row: np.ndarray) -> None:
        for word in _WORD.findall(text.lower()):
            self._add(b"w:" + word.encode("utf-8"), _WORD_WEIGHT, row)
            padded = f" {word} "
            for start in range(len(padded) - 2):
                self._add(b"t:" + padded[start : start + 3].encode("utf-8"), _TRIGRAM_WEIGHT, row)

    def _add(self, feature: bytes, weight: float, row: np.ndarray) -> None:
        digest = zlib.crc32(feature)
        # The low bits pick the bucket; an independent high bit picks the sign.
        sign = 1.0 if (digest >> 31) & 1 else -1.0
        row[digest % self._dim] += sign * weight
