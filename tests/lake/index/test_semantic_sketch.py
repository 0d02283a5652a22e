"""Wide exact searches through the in-memory 8-bit sketch give the plain exact answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import lake.index.semantic as semantic_module
from lake.index.semantic import SemanticIndex, as_stored

DIM = 48


def _unit(rows: int, seed: int, dim: int = DIM) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


@pytest.fixture
def wide_from(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Treat scopes of 200+ rows as wide, and sketch from the first such search."""
    monkeypatch.setattr(semantic_module, "SKETCH_MIN_ROWS", 200)
    monkeypatch.setattr(semantic_module, "SKETCH_AFTER", 1)
    monkeypatch.setattr(semantic_module, "_SKETCH_FIRST_K", 16)  # exercise the widening loop
    yield


def _plain(vectors: np.ndarray, query: np.ndarray, limit: int,
           allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The exact answer, from an index that never sketches."""
    index = SemanticIndex.build(vectors)
    index._sketch = None  # keep this reference off the sketch
    index._wide_searches = -(10**9)
    return index.search(query, allowed=allowed, limit=limit)


def _same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [d for d, _ in got] == [d for d, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-6)


def index_rows(vectors: np.ndarray) -> np.ndarray:
    """The rows as the index stores them: re-normalized, rounded to float16."""
    return as_stored(vectors)


def _float64_top(vectors: np.ndarray, query: np.ndarray, limit: int,
                 allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
    """Exact ranking in float64, equal rows tied, ties by doc id (float32 BLAS may split
    equal rows by a rounding step, so the plain path cannot referee exact ties)."""
    ids = np.arange(len(vectors)) if allowed is None else allowed
    q = query.astype(np.float32)
    unit = (q / np.linalg.norm(q)).astype(np.float64)  # the index's own query normalization
    scores = (vectors[ids].astype(np.float64) @ unit).astype(np.float32)
    order = np.lexsort((ids, -scores))[:limit]
    return [(int(ids[i]), float(scores[i])) for i in order]


@pytest.mark.parametrize("limit", [1, 10, 100])
def test_sketched_search_equals_exact(wide_from: None, limit: int) -> None:
    vectors = _unit(4000, seed=3)
    vectors[::7] = 0.0  # missing embeddings: never in the sketch, never returned
    index = SemanticIndex.build(vectors)
    rng = np.random.default_rng(4)
    scopes = [None, np.sort(rng.choice(4000, 3000, replace=False)), np.arange(0, 4000, 3)]
    for i, query in enumerate(_unit(12, seed=5)):
        allowed = scopes[i % len(scopes)]
        got = index.search(query, allowed=allowed, limit=limit)
        _same(got, _plain(vectors, query, limit, allowed))
        assert all(d % 7 for d, _ in got)
    assert index._sketch is not None  # the path under test was taken


def test_sketch_keeps_ties_and_near_ties_exact(wide_from: None) -> None:
    # a tight cluster (rows a hair apart, 40 of them equal) among spread rows: the cluster is
    # the top, only the exact re-scoring can order it, and equal rows break ties by doc id
    vectors = _unit(3000, seed=6)
    centre = vectors[0].copy()
    vectors[1000:1300] = centre + _unit(300, seed=7) * 0.01
    vectors[1100:1140] = vectors[1100]
    index = SemanticIndex.build(vectors)
    rows = index_rows(vectors)
    for query in [centre, vectors[1100], centre + 0.05 * _unit(1, seed=8)[0]]:
        got = index.search(query, limit=120)
        _same(got, _float64_top(rows, query, 120))
        np.testing.assert_allclose([s for _, s in got],
                                   [s for _, s in _plain(vectors, query, 120)], atol=1e-6)
    assert index._sketch is not None


def test_crowded_cut_falls_back_to_one_exact_pass(wide_from: None) -> None:
    # identical rows everywhere: every row is near the cut, so the plain exact pass answers
    vectors = np.tile(_unit(1, seed=9), (1000, 1))
    vectors[500] = _unit(1, seed=10)[0]
    index = SemanticIndex.build(vectors)
    query = _unit(1, seed=11)[0]
    assert index.search(query, limit=5) == _plain(vectors, query, 5)


def test_scope_smaller_than_limit(wide_from: None) -> None:
    vectors = _unit(1000, seed=12)
    index = SemanticIndex.build(vectors)
    scope = np.arange(0, 1000, 4)
    for query in _unit(3, seed=13):
        got = index.search(query, allowed=scope, limit=300)
        assert len(got) == 250
        _same(got, _float64_top(index_rows(vectors), query, 300, scope))
        _same(got, _plain(vectors, query, 300, scope))


def test_an_old_index_sketches_only_after_repeated_wide_searches(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # an index saved without codes (format 1, as the code before compact codes wrote it)
    # still opens, and builds its sketch in memory once wide searches repeat
    monkeypatch.setattr(semantic_module, "SKETCH_MIN_ROWS", 200)
    monkeypatch.setattr(semantic_module, "SKETCH_AFTER", 3)
    vectors = _unit(1000, seed=14)
    old = SemanticIndex.build(vectors)
    old._sketch = None
    old.save(tmp_path / "idx")
    assert json.loads((tmp_path / "idx" / "semantic.json").read_text())["format"] == 1
    index = SemanticIndex.load(tmp_path / "idx")  # memory-mapped vectors
    queries = _unit(4, seed=15)
    index.search(queries[0], allowed=np.arange(100), limit=5)  # narrow: does not count
    for query in queries[:3]:
        assert index._sketch is None
        _same(index.search(query, limit=10), _plain(vectors, query, 10))
    assert index._sketch is not None  # built by the third wide search, which used it
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == [
        "docs.npy", "semantic.json", "valid.npy", "vectors.npy"]  # that sketch is not saved


def test_a_flat_index_saves_its_codes_and_uses_them_from_the_first_wide_search(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(semantic_module, "SKETCH_MIN_ROWS", 200)
    vectors = _unit(1000, seed=16)
    SemanticIndex.build(vectors).save(tmp_path / "idx")
    meta = json.loads((tmp_path / "idx" / "semantic.json").read_text())
    assert meta["format"] == 3 and meta["codes"] == "sq8" and 0 < meta["code_error"] < 0.05
    assert (tmp_path / "idx" / "codes.faiss").stat().st_size < vectors.nbytes / 3
    index = SemanticIndex.load(tmp_path / "idx")
    assert index._sketch is not None  # read with the index, not built by searches
    for query in _unit(3, seed=17):
        _same(index.search(query, limit=10), _plain(vectors, query, 10))
