"""SemanticIndex: exact, IVF and HNSW search, scoping, missing embeddings and persistence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lake.errors import IndexUnavailable, QueryError
from lake.index.semantic import (
    SMALL_SCOPE_ROWS,
    SemanticIndex,
    as_stored,
    exact_cosines,
    recall_at_k,
    unit_query,
)

DIM = 48


def _unit(rows: int, seed: int, dim: int = DIM) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _clustered(rows: int, seed: int, dim: int = DIM) -> np.ndarray:
    """Rows near one of 60 shared centroids: neighbourhood structure, as text embeddings have."""
    centroids = np.random.default_rng(1234).standard_normal((60, dim))
    rng = np.random.default_rng(seed)
    x = (centroids[rng.integers(0, 60, rows)] + rng.standard_normal((rows, dim))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _wide_copy(index: SemanticIndex, tmp_path: Path) -> SemanticIndex:
    """A loaded copy (free to detune) that sends scopes over 100 rows to its approximate
    index, as scopes of thousands of rows go at scale."""
    index.save(tmp_path / "copy")
    copy = SemanticIndex.load(tmp_path / "copy")
    copy.small_scope_rows = 100
    return copy


def _numpy_top(
    vectors: np.ndarray, query: np.ndarray, k: int, ids: np.ndarray | None = None
) -> list[int]:
    """The exact top ``k`` over ``vectors`` as an index stores them (float16 unit rows)."""
    ids = np.arange(len(vectors)) if ids is None else ids
    scores = as_stored(vectors)[ids] @ query
    return [int(ids[i]) for i in np.argsort(-scores, kind="stable")[:k]]


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return _unit(5_000, seed=1)


@pytest.fixture(scope="module")
def hnsw(corpus: np.ndarray) -> SemanticIndex:
    return SemanticIndex.build(corpus, exact_max_rows=1_000, approximate="hnsw")


@pytest.fixture(scope="module")
def structured() -> np.ndarray:
    return _clustered(5_000, seed=2)


@pytest.fixture(scope="module")
def ivf(structured: np.ndarray) -> SemanticIndex:
    return SemanticIndex.build(structured, exact_max_rows=1_000)


@pytest.fixture(scope="module")
def flat(corpus: np.ndarray) -> SemanticIndex:
    return SemanticIndex.build(corpus)


def test_flat_matches_numpy_exactly(corpus: np.ndarray, flat: SemanticIndex) -> None:
    assert flat.kind == "flat"
    assert len(flat) == 5_000
    for query in _unit(20, seed=2):
        got = flat.search(query, limit=10)
        assert [d for d, _ in got] == _numpy_top(corpus, query, 10)
        np.testing.assert_allclose([s for _, s in got],
                                   np.sort(as_stored(corpus) @ query)[::-1][:10],
                                   rtol=1e-5, atol=1e-6)


def test_scores_are_cosine_for_unnormalized_inputs() -> None:
    vectors = np.array([[3.0, 0.0], [1.0, 1.0], [0.0, -2.0]], dtype=np.float32)
    got = SemanticIndex.build(vectors).search(np.array([5.0, 0.0]), limit=3)
    assert [d for d, _ in got] == [0, 1, 2]
    # rows are stored at float16 precision: a cosine within 2^-11 of the float one
    np.testing.assert_allclose([s for _, s in got], [1.0, np.sqrt(0.5), 0.0], atol=2.0**-11)


def test_ties_break_by_lower_doc_id() -> None:
    vectors = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (300, 1))
    vectors[::7] = [0.0, 1.0]
    index = SemanticIndex.build(vectors)
    got = index.search(np.array([1.0, 0.0]), limit=4)
    assert [d for d, _ in got] == [1, 2, 3, 4]
    scoped = index.search(np.array([1.0, 0.0]), allowed=np.arange(150, 300), limit=3)
    assert [d for d, _ in scoped] == [150, 151, 152]


def test_hnsw_chosen_above_threshold_with_good_recall(
    corpus: np.ndarray, hnsw: SemanticIndex, flat: SemanticIndex
) -> None:
    assert hnsw.kind == "hnsw"
    assert SemanticIndex.build(corpus[:1_000], exact_max_rows=1_000).kind == "flat"
    info = hnsw.describe()
    assert info["kind"] == "hnsw"
    assert info["calibrated_recall"] >= 0.95
    assert recall_at_k(hnsw, flat, _unit(200, seed=3), 10) >= 0.9


def test_unstructured_high_dim_data_falls_back_to_exact(tmp_path: Path) -> None:
    # Random 384-d vectors have no neighbourhood structure: an inverted file would have to
    # probe most of its lists, and a graph visit about as many rows as an exact scan, to find
    # the true top 10, so build keeps the index exact.
    vectors = _unit(5_000, seed=11, dim=384)
    index = SemanticIndex.build(vectors, exact_max_rows=100)
    assert index.kind == "flat"
    assert "ivf rejected" in index.describe()["note"]
    index.save(tmp_path / "sem")
    assert SemanticIndex.load(tmp_path / "sem").describe() == index.describe()
    graph = SemanticIndex.build(vectors, exact_max_rows=100, approximate="hnsw")
    assert graph.kind == "flat"
    assert "hnsw rejected" in graph.describe()["note"]
    forced = SemanticIndex.build(vectors[:1_000], exact_max_rows=100, ef_search=64)
    assert forced.kind == "hnsw"
    assert forced.ef_search == 64


def test_recall_at_k_detects_a_bad_index(
    tmp_path: Path, hnsw: SemanticIndex, flat: SemanticIndex
) -> None:
    hnsw.save(tmp_path / "weak")
    weak = SemanticIndex.load(tmp_path / "weak")  # an independent copy we may detune
    weak.ef_search = 1
    queries = _unit(50, seed=4)
    assert recall_at_k(flat, flat, queries, 10) == 1.0
    assert recall_at_k(weak, flat, queries, 10) < recall_at_k(hnsw, flat, queries, 10)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_small_scope_is_exact_and_respected(
    kind: str, corpus: np.ndarray, flat: SemanticIndex, hnsw: SemanticIndex
) -> None:
    index = flat if kind == "flat" else hnsw
    allowed = np.arange(7, 5_000, 50, dtype=np.int64)
    for query in _unit(10, seed=5):
        got = index.search(query, allowed=allowed, limit=15)
        assert [d for d, _ in got] == _numpy_top(corpus, query, 15, allowed)


def test_large_scope_goes_through_the_graph_and_stays_in_scope(
    tmp_path: Path, corpus: np.ndarray, hnsw: SemanticIndex
) -> None:
    index = _wide_copy(hnsw, tmp_path)
    allowed = np.arange(0, len(corpus), 2, dtype=np.int64)
    queries = _unit(30, seed=6)
    recalls = []
    for query in queries:
        got = [d for d, _ in index.search(query, allowed=allowed, limit=10)]
        assert len(got) == 10
        assert all(d % 2 == 0 for d in got)
        recalls.append(len(set(got) & set(_numpy_top(corpus, query, 10, allowed))) / 10)
    assert np.mean(recalls) >= 0.9
    # With a starved beam the graph path shows itself by missing some exact answers,
    # while results still never leave the scope.
    index.ef_search = 1
    starved = [index.search(q, allowed=allowed, limit=10) for q in queries]
    assert all(d % 2 == 0 for res in starved for d, _ in res)
    assert any([d for d, _ in res] != _numpy_top(corpus, q, 10, allowed)
               for res, q in zip(starved, queries, strict=True))
    # The same scope below the small-scope size is answered exactly.
    index.small_scope_rows = SMALL_SCOPE_ROWS
    for query in queries[:5]:
        exact = [d for d, _ in index.search(query, allowed=allowed, limit=10)]
        assert exact == _numpy_top(corpus, query, 10, allowed)


def test_unsorted_duplicate_scope_is_accepted(corpus: np.ndarray, flat: SemanticIndex) -> None:
    query = _unit(1, seed=7)[0]
    ids = np.array([40, 3, 40, 17, 3], dtype=np.int32)
    got = flat.search(query, allowed=ids, limit=10)
    assert sorted(d for d, _ in got) == [3, 17, 40]
    assert flat.search(query, allowed=np.array([], dtype=np.int64)) == []


@pytest.mark.parametrize("exact_max_rows", [10_000, 100])
def test_missing_embeddings_are_never_returned(exact_max_rows: int) -> None:
    vectors = _unit(600, seed=8)
    missing = np.arange(0, 600, 3)
    vectors[missing] = 0.0
    vectors[1] = np.nan
    index = SemanticIndex.build(vectors, exact_max_rows=exact_max_rows)
    invalid = {*missing.tolist(), 1}
    assert index.valid_rows == 600 - len(invalid)
    assert len(index) == 600
    for query in _unit(5, seed=9):
        everything = index.search(query, limit=1_000)
        assert len(everything) == index.valid_rows
        assert not invalid & {d for d, _ in everything}
        scoped = index.search(query, allowed=np.array(sorted(invalid)), limit=10)
        assert scoped == []
        mixed = index.search(query, allowed=np.arange(0, 10), limit=10)
        assert {d for d, _ in mixed} == {2, 4, 5, 7, 8}


def test_all_missing_and_empty_indexes_return_nothing() -> None:
    query = np.ones(DIM, dtype=np.float32)
    assert SemanticIndex.build(np.zeros((4, DIM), dtype=np.float32)).search(query) == []
    empty = SemanticIndex.build(np.zeros((0, DIM), dtype=np.float32))
    assert len(empty) == 0
    assert empty.search(query) == []


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_save_load_round_trip(
    kind: str, tmp_path: Path, flat: SemanticIndex, hnsw: SemanticIndex, ivf: SemanticIndex
) -> None:
    index = {"flat": flat, "hnsw": hnsw, "ivf": ivf}[kind]
    index.save(tmp_path / "sem")
    loaded = SemanticIndex.load(tmp_path / "sem")
    assert loaded.kind == kind
    assert loaded.describe() == index.describe()
    allowed = np.arange(0, 5_000, 7, dtype=np.int64)
    for query in _unit(5, seed=10):
        assert loaded.search(query, limit=10) == index.search(query, limit=10)
        assert loaded.search(query, allowed=allowed) == index.search(query, allowed=allowed)
    # Saving over an index of the other kind leaves no stale parts behind.
    other = ivf if kind == "flat" else flat
    other.save(tmp_path / "sem")
    assert SemanticIndex.load(tmp_path / "sem").kind == other.kind


def test_load_refuses_missing_or_damaged_index(tmp_path: Path, flat: SemanticIndex) -> None:
    with pytest.raises(IndexUnavailable, match=r"missing semantic\.json"):
        SemanticIndex.load(tmp_path / "nothing")
    flat.save(tmp_path / "sem")
    (tmp_path / "sem" / "valid.npy").unlink()
    with pytest.raises(IndexUnavailable, match="damaged"):
        SemanticIndex.load(tmp_path / "sem")
    flat.save(tmp_path / "sem2")
    np.save(tmp_path / "sem2" / "valid.npy", np.ones(3, dtype=bool))
    with pytest.raises(IndexUnavailable, match="inconsistent"):
        SemanticIndex.load(tmp_path / "sem2")


def test_bad_requests_raise_query_errors(flat: SemanticIndex) -> None:
    good = np.ones(DIM, dtype=np.float32)
    with pytest.raises(QueryError, match="shape"):
        flat.search(np.ones(DIM + 1, dtype=np.float32))
    with pytest.raises(QueryError, match="zero or not finite"):
        flat.search(np.zeros(DIM, dtype=np.float32))
    with pytest.raises(QueryError, match="limit"):
        flat.search(good, limit=0)
    with pytest.raises(QueryError, match="outside"):
        flat.search(good, allowed=np.array([5_000]))
    with pytest.raises(QueryError, match="integer"):
        flat.search(good, allowed=np.array([1.5]))


def test_bad_build_input_raises_index_errors() -> None:
    with pytest.raises(IndexUnavailable, match="2-D"):
        SemanticIndex.build(np.ones(DIM, dtype=np.float32))
    with pytest.raises(IndexUnavailable, match="exact_max_rows"):
        SemanticIndex.build(np.ones((2, DIM), dtype=np.float32), exact_max_rows=-1)


def test_only_embedded_rows_are_stored_and_doc_ids_survive_a_reload(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(5, DIM)).astype(np.float32)
    docs = np.array([2, 5, 6, 40, 99])
    index = SemanticIndex.build(vectors, doc_ids=docs, rows=100)
    index.save(tmp_path / "idx")
    loaded = SemanticIndex.load(tmp_path / "idx")
    assert np.load(tmp_path / "idx" / "vectors.npy").shape == (5, DIM)  # no zero rows
    assert (len(loaded), loaded.valid_rows) == (100, 5)
    query = vectors[3]
    assert loaded.search(query, limit=1)[0][0] == 40
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosine = dict(zip(docs.tolist(), (unit @ (query / np.linalg.norm(query))).tolist(),
                      strict=True))
    assert [d for d, _ in loaded.search(query, allowed=np.arange(0, 30), limit=10)] \
        == sorted([2, 5, 6], key=lambda d: -cosine[d])
    assert loaded.search(query, allowed=np.array([0, 1, 3]), limit=10) == []
    with pytest.raises(IndexUnavailable, match="ascending"):
        SemanticIndex.build(vectors, doc_ids=docs[::-1], rows=100)


def test_a_scope_of_every_row_searches_the_graph_as_no_scope(
    tmp_path: Path, hnsw: SemanticIndex
) -> None:
    # a tenant's whole partition: no filter to build, the same beam, the same answer
    index = _wide_copy(hnsw, tmp_path)
    everything = np.arange(len(index), dtype=np.int64)
    for query in _unit(20, seed=8):
        assert index.search(query, allowed=everything, limit=10) == index.search(query, limit=10)
    # all but one row still goes through the filtered graph and never returns that row
    query = _unit(1, seed=9)[0]
    best = index.search(query, limit=1)[0][0]
    rest = np.delete(everything, best)
    found = index.search(query, allowed=rest, limit=10)
    assert len(found) == 10 and best not in [d for d, _ in found]


def test_ivf_chosen_above_threshold_with_good_recall(
    structured: np.ndarray, ivf: SemanticIndex
) -> None:
    assert ivf.kind == "ivf"
    info = ivf.describe()
    assert info["calibrated_recall"] >= 0.95
    assert info["nprobe"] * 4 <= info["nlist"]  # cheaper than an exact scan, or not kept
    exact = SemanticIndex.build(structured)
    assert exact.kind == "flat"
    queries = _clustered(200, seed=3)
    assert recall_at_k(ivf, exact, queries, 10) >= 0.9
    # a deeper top probes more lists (here .824 at recall@100 without them, .898 with)
    assert recall_at_k(ivf, exact, queries, 100) >= 0.87


def test_ivf_scopes_stay_in_scope_and_small_ones_are_exact(
    tmp_path: Path, structured: np.ndarray, ivf: SemanticIndex
) -> None:
    index = _wide_copy(ivf, tmp_path)
    every = np.arange(len(index), dtype=np.int64)
    half = every[every % 2 == 0]
    recalls = []
    for query in _clustered(30, seed=6):
        assert index.search(query, allowed=every, limit=10) == index.search(query, limit=10)
        got = [d for d, _ in index.search(query, allowed=half, limit=10)]
        assert len(got) == 10 and all(d % 2 == 0 for d in got)
        recalls.append(len(set(got) & set(_numpy_top(structured, query, 10, half))) / 10)
    assert np.mean(recalls) >= 0.9
    # asked for every row of a scope, the probed lists fall short: answered exactly instead
    few = every[::16]
    assert few.size > 0.05 * len(index)  # not a small scope: it goes to the inverted file
    for query in _clustered(5, seed=7):
        got = [d for d, _ in index.search(query, allowed=few, limit=few.size)]
        assert got == _numpy_top(structured, query, few.size, few)


def test_scores_exactly_says_when_a_search_reads_every_row(corpus: np.ndarray,
                                                           hnsw: SemanticIndex,
                                                           flat: SemanticIndex,
                                                           tmp_path: Path) -> None:
    assert flat.scores_exactly(5_000)
    wide = _wide_copy(hnsw, tmp_path)  # scopes over 100 rows go to its graph
    assert wide.scores_exactly(100)
    assert not wide.scores_exactly(2_000)
    # a search it calls exact is: numpy's rows, and each score its stored vector's exact cosine
    query = _unit(1, seed=9)[0]
    allowed = np.arange(0, 200, 2)
    got = wide.search(query, allowed=allowed, limit=100)
    assert [d for d, _ in got] == _numpy_top(corpus, query, 100, allowed)
    docs, stored = wide.vectors(np.array(sorted(d for d, _ in got)))
    exact = dict(zip(docs.tolist(), exact_cosines(stored, unit_query(query, DIM)).tolist(),
                     strict=True))
    assert [s for _, s in got] == [exact[d] for d, _ in got]
