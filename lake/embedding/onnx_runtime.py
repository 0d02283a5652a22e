"""The ONNX Runtime embedder: a cached exported graph plus the model's own fast tokenizer.

Most of what one PyTorch/sentence-transformers query costs is per-call framework overhead, not
arithmetic; ONNX Runtime runs the same weights with a fraction of it, and loading it imports
neither torch nor transformers (torch is only needed once, to export the graph; see
:mod:`lake.embedding.onnx_export`). Texts are tokenized with ``tokenizers`` from the model's
``tokenizer.json``, truncated to the model's ``max_seq_length`` as sentence-transformers does,
sorted by length and padded per batch so that short texts do not pay for long ones.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lake.embedding.base import DEFAULT_BATCH_SIZE, check_batch_size, check_texts, check_vectors
from lake.embedding.onnx_export import ModelSource, ensure_graph
from lake.embedding.passages import (
    DEFAULT_MAX_PASSAGES,
    PassageSplitter,
    encode_long,
    load_tokenizer,
)
from lake.errors import EmbeddingError

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def tokenizer_for(path: Path, max_length: int) -> Tokenizer:
    """The fast tokenizer of a model folder, truncating to ``max_length`` and never padding
    (batches are padded here, to their own longest text)."""
    tokenizer = load_tokenizer(path)
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.no_padding()
    return tokenizer


def open_session(graph: Path, *, threads: int | None) -> Any:
    """An ONNX Runtime CPU session on ``graph`` with ``threads`` intra-op threads (None = one
    per core, ONNX Runtime's default). Inter-op parallelism is off: the graph is one chain."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EmbeddingError("the onnx embedding runtime needs onnxruntime: "
                             "pip install onnxruntime") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initializers would reach the CLI
    if threads == 1:
        # No pool to keep warm; spinning would only steal a busy machine's cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise EmbeddingError(f"ONNX Runtime could not open {graph}: "
                             f"{type(exc).__name__}: {exc}") from exc


def padded_feeds(batch: Sequence[Any], inputs: Sequence[str]) -> dict[str, np.ndarray]:
    """The graph's int64 inputs for tokenizer encodings, zero-padded to the batch's longest."""
    width = max(len(e.ids) for e in batch)
    feeds = {name: np.zeros((len(batch), width), dtype=np.int64) for name in inputs}
    for row, item in enumerate(batch):
        n = len(item.ids)
        feeds["input_ids"][row, :n] = item.ids
        feeds["attention_mask"][row, :n] = item.attention_mask
        if "token_type_ids" in feeds:
            feeds["token_type_ids"][row, :n] = item.type_ids
    return feeds


class OnnxEmbedder:
    """Embed texts with ONNX Runtime from the exported graph of a local model folder.

    ``name`` is the embedding identity recorded with every row (decided by the factory: the
    fp32 graph shares the torch runtime's identity because they agree to cosine 0.9999).
    Nothing is exported or loaded until the first ``encode``/``dim``; every failure surfaces
    from those as :class:`EmbeddingError`. A text longer than the model reads is embedded as
    passages (lake.embedding.passages), as the torch runtime does; ``passages=False``
    truncates it.
    """

    def __init__(self, source: ModelSource, *, name: str, precision: str = "fp32",
                 threads: int | None = None, passages: bool = True,
                 max_passages: int = DEFAULT_MAX_PASSAGES) -> None:
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise EmbeddingError(f"threads must be a positive int or None, got {threads!r}")
        self._source = source
        self._name = name
        self._precision = precision
        self._threads = threads
        self._session: Any = None
        self._tokenizer: Tokenizer | None = None
        self._inputs: tuple[str, ...] = ()
        self._dim: int | None = None
        self._passages = passages
        self._max_passages = max_passages
        self._splitter: PassageSplitter | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The embedding identity recorded with rows and in index manifests."""
        return self._name

    @property
    def runtime(self) -> str:
        """``onnx``: which runtime computes the vectors (shown by CLI and bench)."""
        return "onnx"

    @property
    def precision(self) -> str:
        """``fp32`` or ``int8``."""
        return self._precision

    @property
    def threads(self) -> int | None:
        """Intra-op threads of the session (None = one per core)."""
        return self._threads

    @property
    def loaded(self) -> bool:
        """Whether the session is open yet."""
        return self._session is not None

    @property
    def passage_splitter(self) -> PassageSplitter | None:
        """How texts longer than the model reads are cut (loads the model on first use);
        None when they are truncated (``passages=False``, no ``tokenizer.json``)."""
        self._load()
        return self._splitter

    @property
    def dim(self) -> int:
        """Width of the vectors (opens the session on first use)."""
        self._load()
        assert self._dim is not None
        return self._dim

    def encode(self, texts: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        """Return ``(len(texts), dim)`` float32 rows of unit length."""
        check_batch_size(batch_size)
        items = check_texts(texts)
        session, tokenizer = self._load()
        assert self._dim is not None
        dim = self._dim
        if not items:
            return np.zeros((0, dim), dtype=np.float32)

        def plain(chunk: list[str]) -> np.ndarray:
            out = np.zeros((len(chunk), dim), dtype=np.float32)
            encoded = tokenizer.encode_batch(chunk)
            # Longest first: similar lengths share a batch, so little compute goes to padding.
            order = sorted(range(len(chunk)), key=lambda i: -len(encoded[i].ids))
            for start in range(0, len(order), batch_size):
                chosen = order[start : start + batch_size]
                out[chosen] = self._run(session, [encoded[i] for i in chosen])
            return out

        try:
            out = encode_long(plain, items, self._splitter)
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"ONNX model {self.name!r} failed to encode {len(items)} texts: "
                                 f"{type(exc).__name__}: {exc}") from exc
        return check_vectors(out, rows=len(items), dim=self._dim, provider=self.name)

    def _run(self, session: Any, batch: list[Any]) -> np.ndarray:
        return np.asarray(session.run(None, padded_feeds(batch, self._inputs))[0],
                          dtype=np.float32)

    def _load(self) -> tuple[Any, Tokenizer]:
        with self._lock:
            if self._session is None or self._tokenizer is None:
                graph = ensure_graph(self._source, self._precision)
                session = open_session(graph, threads=self._threads)
                self._inputs = tuple(i.name for i in session.get_inputs())
                dim = session.get_outputs()[0].shape[-1]
                if not isinstance(dim, int) or dim < 1:
                    raise EmbeddingError(f"ONNX graph {graph} has no fixed output width: {dim!r}")
                self._tokenizer = tokenizer_for(self._source.path, self._source.max_length)
                if self._passages:
                    self._splitter = PassageSplitter.for_model(
                        self._source.path, self._source.max_length,
                        max_passages=self._max_passages)
                self._dim, self._session = dim, session
            return self._session, self._tokenizer
