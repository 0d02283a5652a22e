"""Choosing the embedding provider from settings."""

from __future__ import annotations

import re

from lake.embedding.base import Embedder
from lake.embedding.hashing import HashingEmbedder
from lake.embedding.sentence import SentenceTransformerEmbedder

_HASHING = re.compile(r"^hashing-(\d{1,5})$")


def embedder_for(model: str | None) -> Embedder:
    """The provider for a configured model: None = packaged all-MiniLM-L6-v2; ``hashing-N`` =
    the dependency-free feature-hashing embedder of width N; anything else = a local
    sentence-transformers model folder. Nothing is loaded until the first encode."""
    if model is not None and (match := _HASHING.match(model)):
        return HashingEmbedder(dim=int(match.group(1)))
    return SentenceTransformerEmbedder(model)
