"""Choosing the embedding provider (model, runtime, precision, threads) from settings.

The *identity* of an embedder (its ``name``, stored with every row as ``embedding_model`` and in
every index manifest) names what decides the vectors: the model, and the runtime family and
precision. PyTorch and the fp32 ONNX graph are one family: their vectors agree to cosine 0.9999
(tests/lake/embedding/test_onnx.py holds them to it, and every export is checked against torch
before use), so they share the bare model name that lakes written before runtimes existed carry,
and switching the default runtime leaves those lakes fresh. The int8 graph computes different
vectors and is its own identity, ``<model>+onnx-int8``; it is built here for measurement (the
bench), but Settings do not offer it (its LoCoMo recall moved by more than 0.005).

Cutting long texts into passages (lake.embedding.passages) did not change the identity: texts
that fit keep their vectors, and a long row embedded before keeps a vector of the same space,
which ``turnlake embed --long-texts`` replaces; a new identity would have left every lake's
rows foreign to its queries until all of them were re-embedded.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lake.embedding.base import Embedder
from lake.embedding.hashing import HashingEmbedder
from lake.embedding.onnx_export import (
    PRECISIONS,
    NotExportable,
    check_exportable,
    folder_source,
    packaged_source,
)
from lake.embedding.onnx_runtime import OnnxEmbedder
from lake.embedding.passages import DEFAULT_MAX_PASSAGES
from lake.embedding.sentence import DEFAULT_MODEL_NAME, SentenceTransformerEmbedder
from lake.errors import EmbeddingError
from lake.settings import EMBEDDING_RUNTIMES, Settings

_HASHING = re.compile(r"^hashing-(\d{1,5})$")
Purpose = Literal["query", "bulk"]


class TorchFallbackWarning(UserWarning):
    """A user-named model cannot be exported to ONNX; it runs on PyTorch instead."""


@dataclass(frozen=True)
class EmbedderSpec:
    """Everything that decides which embedder to build; small and picklable (Ray tasks get it).

    ``threads`` is the intra-op thread count (None = one per core)."""

    model: str | None = None
    runtime: str = "onnx"
    precision: str = "fp32"
    threads: int | None = None
    max_passages: int = DEFAULT_MAX_PASSAGES

    def build(self) -> Embedder:
        """The (not yet loaded) embedder this spec describes."""
        return embedder_for(self.model, runtime=self.runtime, precision=self.precision,
                            threads=self.threads, max_passages=self.max_passages)


def spec_from(settings: Settings, purpose: Purpose = "bulk") -> EmbedderSpec:
    """The spec of the configured embedder: ``query`` ones use ``embed_query_threads`` (one by
    default: a long-running process serves queries side by side), ``bulk`` ones
    ``embed_bulk_threads`` (every core by default)."""
    threads = settings.embed_query_threads if purpose == "query" else settings.embed_bulk_threads
    return EmbedderSpec(settings.embedding_model, settings.embedding_runtime,
                        settings.embedding_precision, threads, settings.embed_max_passages)


def embedder_from(settings: Settings, purpose: Purpose = "bulk") -> Embedder:
    """The configured embedder for ``purpose`` (see :func:`spec_from`)."""
    return spec_from(settings, purpose).build()


def embedding_identity(settings: Settings) -> str:
    """The identity (``Embedder.name``) the configured embedder records, without loading it."""
    return embedder_from(settings).name


def embedder_for(model: str | None, *, runtime: str = "onnx", precision: str = "fp32",
                 threads: int | None = None,
                 max_passages: int = DEFAULT_MAX_PASSAGES) -> Embedder:
    """The provider for a configured model: None = packaged all-MiniLM-L6-v2; ``hashing-N`` =
    the dependency-free feature-hashing embedder of width N; anything else = a local
    sentence-transformers model folder. ``runtime`` is ``onnx`` (default) or ``torch``; a
    folder that is not a plain transformer + mean pooling model falls back to torch with a
    :class:`TorchFallbackWarning` (int8 then fails: it exists only as an ONNX graph).
    ``max_passages`` bounds the passages one long text is embedded by
    (lake.embedding.passages). Nothing is exported or loaded until the first encode."""
    if runtime not in EMBEDDING_RUNTIMES:
        raise EmbeddingError(f"embedding runtime must be one of {EMBEDDING_RUNTIMES}, "
                             f"got {runtime!r}")
    if precision not in PRECISIONS:
        raise EmbeddingError(f"embedding precision must be one of {PRECISIONS}, "
                             f"got {precision!r}")
    if model is not None and (match := _HASHING.match(model)):
        return HashingEmbedder(dim=int(match.group(1)))
    if runtime == "torch":
        if precision != "fp32":
            raise EmbeddingError("int8 embeddings need the onnx runtime")
        return SentenceTransformerEmbedder(model, threads=threads, max_passages=max_passages)
    if model is None:
        return OnnxEmbedder(packaged_source(), name=identity(DEFAULT_MODEL_NAME, precision),
                            precision=precision, threads=threads, max_passages=max_passages)
    path = Path(model)
    base = SentenceTransformerEmbedder(path).name
    if path.is_dir():
        try:
            check_exportable(path)
        except NotExportable as exc:
            if precision != "fp32":
                raise EmbeddingError(f"{exc}; int8 needs an ONNX graph") from exc
            warnings.warn(f"{exc}: embedding with the torch runtime instead",
                          TorchFallbackWarning, stacklevel=2)
            return SentenceTransformerEmbedder(path, threads=threads, max_passages=max_passages)
        return OnnxEmbedder(folder_source(path), name=identity(base, precision),
                            precision=precision, threads=threads, max_passages=max_passages)
    # A missing folder: the torch embedder reports it, lazily, as it always has.
    return SentenceTransformerEmbedder(path, threads=threads, max_passages=max_passages)


def identity(model_name: str, precision: str) -> str:
    """The embedding identity of ``model_name`` at ``precision`` (see the module docstring)."""
    return model_name if precision == "fp32" else f"{model_name}+onnx-{precision}"
