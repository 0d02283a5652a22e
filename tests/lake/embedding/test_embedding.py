"""Embedding providers: the hashing fake, the batching helper and the real local model."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from lake.embedding.base import Embedder, encode_batches
from lake.embedding.hashing import HashingEmbedder
from lake.embedding.sentence import SentenceTransformerEmbedder, default_embedder
from lake.errors import EmbeddingError

REPO = Path(__file__).resolve().parents[3]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


# --- HashingEmbedder --------------------------------------------------------------------------


def test_hashing_shape_dtype_norm_and_name() -> None:
    emb = HashingEmbedder(dim=32)
    out = emb.encode(["Hello world", "another text here"])
    assert emb.name == "hashing-32"
    assert emb.dim == 32
    assert out.shape == (2, 32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert isinstance(emb, Embedder)


def test_hashing_is_deterministic_across_instances_and_processes() -> None:
    texts = ["openpyxl chart broke", "Deploy failed with timeout"]
    first = HashingEmbedder().encode(texts)
    np.testing.assert_array_equal(first, HashingEmbedder().encode(texts))
    # A different hash seed in a fresh interpreter must not change anything.
    code = (
        "import sys, numpy as np\n"
        "from lake.embedding.hashing import HashingEmbedder\n"
        "v = HashingEmbedder().encode(['openpyxl chart broke', 'Deploy failed with timeout'])\n"
        "sys.stdout.write(v.tobytes().hex())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
        check=True,
    )
    assert bytes.fromhex(result.stdout) == first.tobytes()


def test_hashing_similar_texts_are_closer_than_unrelated() -> None:
    emb = HashingEmbedder(dim=256)
    base, near, typo, far = emb.encode([
        "the spreadsheet export with openpyxl is broken",
        "openpyxl spreadsheet export broken again",
        "the spredsheet exprot with opnpyxl is brokn",
        "we booked a vacation rental near the beach",
    ])
    assert _cos(base, near) > _cos(base, far) + 0.3
    assert _cos(base, typo) > _cos(base, far) + 0.2


def test_hashing_featureless_text_is_a_zero_row() -> None:
    out = HashingEmbedder().encode(["", "  ...  ", "word"])
    assert not out[0].any()
    assert not out[1].any()
    assert np.linalg.norm(out[2]) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("dim", [0, -3, True, 2.5])
def test_hashing_rejects_bad_dim(dim: object) -> None:
    with pytest.raises(EmbeddingError, match="dim"):
        HashingEmbedder(dim=dim)  # type: ignore[arg-type]


def test_hashing_rejects_non_string_items() -> None:
    with pytest.raises(EmbeddingError, match=r"texts\[1\] is int"):
        HashingEmbedder().encode(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(EmbeddingError, match="single str"):
        HashingEmbedder().encode("just a string")


# --- encode_batches -----------------------------------------------------------------------------


class _Recording:
    """Wraps an embedder and records the size of each encode call."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls: list[int] = []
        self.name = inner.name
        self.dim = inner.dim

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        self.calls.append(len(texts))
        return self.inner.encode(texts, batch_size=batch_size)


class _Broken:
    name = "broken"
    dim = 8

    def __init__(self, result: object = None) -> None:
        self.result = result

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        if self.result is None:
            raise RuntimeError("model exploded")
        return self.result  # type: ignore[return-value]


def test_encode_batches_matches_direct_encode_and_reports_progress() -> None:
    texts = [f"message number {i} about topic {i % 7}" for i in range(23)]
    rec = _Recording(HashingEmbedder(dim=16))
    seen: list[int] = []
    out = encode_batches(rec, texts, batch_size=5, chunk_size=10, on_progress=seen.append)
    np.testing.assert_array_equal(out, HashingEmbedder(dim=16).encode(texts))
    assert rec.calls == [10, 10, 3]
    assert seen == [10, 20, 23]


def test_encode_batches_default_chunk_and_empty_input() -> None:
    rec = _Recording(HashingEmbedder(dim=16))
    encode_batches(rec, ["a"] * 80, batch_size=2)
    assert rec.calls == [64, 16]  # chunks of 32 batches
    empty = encode_batches(HashingEmbedder(dim=16), [], batch_size=4)
    assert empty.shape == (0, 16)
    assert empty.dtype == np.float32


def test_encode_batches_wraps_provider_failure_with_cause() -> None:
    with pytest.raises(EmbeddingError, match=r"broken.*model exploded") as info:
        encode_batches(_Broken(), ["x", "y"], batch_size=4)
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (np.ones((1, 8), dtype=np.float32), "shape"),
        (np.full((2, 8), 3.0, dtype=np.float32), "norm"),
        (np.full((2, 8), np.nan, dtype=np.float32), "non-finite"),
        ([[0.0] * 8] * 2, "list"),
    ],
)
def test_encode_batches_rejects_bad_provider_output(result: object, message: str) -> None:
    with pytest.raises(EmbeddingError, match=message):
        encode_batches(_Broken(result), ["x", "y"], batch_size=4)


def test_encode_batches_rejects_bad_batch_size() -> None:
    with pytest.raises(EmbeddingError, match="batch_size"):
        encode_batches(HashingEmbedder(), ["x"], batch_size=0)


# --- SentenceTransformerEmbedder ------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    emb = default_embedder()
    assert not emb.loaded  # construction must not touch the weights
    return emb


def test_real_model_encodes_offline(minilm: SentenceTransformerEmbedder) -> None:
    out = minilm.encode([
        "How do I fix the openpyxl error when saving my spreadsheet?",
        "Saving an Excel workbook with openpyxl throws an exception.",
        "My cat likes to sleep in the sun all afternoon.",
    ])
    assert minilm.loaded
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert minilm.name == "all-MiniLM-L6-v2"
    assert minilm.dim == 384
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-4)
    assert _cos(out[0], out[1]) > _cos(out[0], out[2]) + 0.3
    again = encode_batches(minilm, ["My cat likes to sleep in the sun all afternoon."])
    np.testing.assert_allclose(again[0], out[2], atol=1e-5)


def test_real_model_missing_path_is_an_embedding_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    emb = SentenceTransformerEmbedder(missing)
    assert emb.name == "no-such-model"
    with pytest.raises(EmbeddingError, match="no-such-model"):
        emb.encode(["hello"])
    with pytest.raises(EmbeddingError, match="no-such-model"):
        encode_batches(emb, ["hello"])


def test_real_model_unloadable_directory_is_an_embedding_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus-model"
    bogus.mkdir()
    (bogus / "config.json").write_text("{not json")
    with pytest.raises(EmbeddingError, match="bogus-model"):
        SentenceTransformerEmbedder(bogus).encode(["hello"])
