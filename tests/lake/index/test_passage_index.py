"""The passage index: each long row's best passage for a query, exactly, in one segment or
several, and how a semantic search's rows are raised by it."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lake.index.passage_index as passages_module
from lake.errors import IndexUnavailable
from lake.index.manifest import local_build
from lake.index.partition import PartitionIndex
from lake.index.passage_index import PassageIndex, raised_by_passages
from lake.index.semantic import as_stored
from lake.index.status import partition_statuses
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.index_build import Compaction, build_indexes
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, passage_hashing_embedder

DIM = 8


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=40),
       st.one_of(st.none(), st.sets(st.integers(0, 35), max_size=60)),
       st.integers(1, 50), st.booleans(), st.integers(0, 2**31))
def test_best_follows_its_definition_in_a_whole_scope_and_a_searched_one(
        rows: list[int], allowed: set[int] | None, limit: int, whole: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors, query = _unit(rng, len(rows)), _unit(rng, 1)[0]
    rows = sorted(rows)
    index = PassageIndex.build(vectors, np.array(rows, np.int64))
    scope = None if allowed is None else np.array(sorted(allowed), np.int64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(passages_module, "WHOLE_SCOPE_PASSAGES", 10**6 if whole else -1)
        found, best = index.best(query, scope, limit=limit)
    # the plain versions, over the scope's passages as stored (float16), nearest first
    stored = as_stored(vectors)
    passages = sorted(((float(v @ query), i) for i, (r, v) in enumerate(zip(rows, stored,
                                                                           strict=True))
                       if allowed is None or r in allowed), key=lambda p: (-p[0], p[1]))
    expected: dict[int, float] = {}
    if whole and allowed is not None:
        # every row of the scope by its best passage, the `limit` best of them
        for cosine, i in passages:
            expected[rows[i]] = max(expected.get(rows[i], -np.inf), cosine)
        expected = dict(sorted(expected.items(), key=lambda e: (-e[1], e[0]))[:limit])
    else:
        # the rows of the `limit` nearest passages, each by its best among them
        for cosine, i in passages[:limit]:
            expected[rows[i]] = max(expected.get(rows[i], -np.inf), cosine)
    assert found.tolist() == sorted(expected)
    np.testing.assert_allclose(best, [expected[d] for d in sorted(expected)], atol=1e-5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20), max_size=30), st.sets(st.integers(0, 25), max_size=30))
def test_of_rows_gives_each_rows_passages_in_order(rows: list[int], asked: set[int]) -> None:
    rows = sorted(rows)
    vectors = _unit(np.random.default_rng(len(rows)), len(rows))
    found = PassageIndex.build(vectors, np.array(rows, np.int64)).of_rows(
        np.array(sorted(asked), np.int64))
    expected = [(r, rows[:i].count(r), rows.count(r), i) for i, r in enumerate(rows)
                if r in asked]
    assert found.rows.tolist() == [r for r, _, _, _ in expected]
    assert found.places.tolist() == [p for _, p, _, _ in expected]
    assert found.counts.tolist() == [c for _, _, c, _ in expected]
    # re-normalized and rounded to float16 on build: within 2^-11 of each value
    np.testing.assert_array_equal(found.vectors, as_stored(vectors)[[i for *_, i in expected]]
                                  .reshape(-1, DIM))
    np.testing.assert_allclose(found.vectors, vectors[[i for *_, i in expected]]
                               .reshape(-1, DIM), rtol=2.0**-11, atol=2.0**-24)


def test_an_index_is_saved_and_loaded_and_a_damaged_one_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    index = PassageIndex.build(_unit(rng, 5), np.array([1, 1, 1, 4, 9]))
    index.save(tmp_path / "passages")
    loaded = PassageIndex.load(tmp_path / "passages")
    query = _unit(rng, 1)[0]
    assert [a.tolist() for a in loaded.best(query)] == [a.tolist() for a in index.best(query)]
    assert len(loaded) == 5 and loaded.kind == "flat"
    (tmp_path / "passages" / "passages.json").unlink()
    with pytest.raises(IndexUnavailable, match="missing or damaged"):
        PassageIndex.load(tmp_path / "passages")
    with pytest.raises(IndexUnavailable, match="ascending"):
        PassageIndex.build(_unit(rng, 2), np.array([3, 1]))
    with pytest.raises(IndexUnavailable, match="one doc id per passage"):
        PassageIndex.build(_unit(rng, 2), np.array([3]))


def test_a_wide_scope_over_many_passages_goes_through_an_inverted_file() -> None:
    # passages of clustered vectors, as text is: past exact_max_rows, an approximate index
    rng = np.random.default_rng(11)
    centres = _unit(rng, 40)
    vectors = centres[rng.integers(0, 40, 6000)] + rng.normal(scale=0.05, size=(6000, DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    rows = np.repeat(np.arange(2000, dtype=np.int64), 3)
    index = PassageIndex.build(vectors, rows, exact_max_rows=1000)
    assert index.kind == "ivf"
    query = centres[0]
    docs, _ = index.best(query, limit=10)
    exact = PassageIndex.build(vectors, rows).best(query, limit=10)
    assert len(set(docs.tolist()) & set(exact[0].tolist())) >= 0.8 * exact[0].size
    # a user's few rows are scored exactly, whatever the kind
    mine = np.arange(0, 2000, 97, dtype=np.int64)
    np.testing.assert_allclose(index.best(query, mine, limit=100)[1],
                               PassageIndex.build(vectors, rows).best(query, mine,
                                                                      limit=100)[1],
                               atol=1e-5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=30), st.data(), st.integers(1, 12))
def test_raised_rows_are_the_top_of_every_row_scored_by_its_better_cosine(
        own: list[float], data: st.DataObject, limit: int) -> None:
    # a semantic search hands over its top `limit` rows by their own vectors; the rows with
    # passages carry their best passage's cosine
    doc_ids = list(range(len(own)))
    with_passages = data.draw(st.lists(st.sampled_from(doc_ids), unique=True))
    passage = {d: data.draw(st.floats(-1, 1)) for d in sorted(with_passages)}
    found = sorted(zip(doc_ids, own, strict=True), key=lambda x: (-x[1], x[0]))[:limit]
    got = raised_by_passages(found, np.array(sorted(passage), np.int64),
                             np.array([passage[d] for d in sorted(passage)]), limit)
    every = {d: max(s, passage.get(d, -np.inf)) for d, s in zip(doc_ids, own, strict=True)}
    assert got == sorted(every.items(), key=lambda x: (-x[1], x[0]))[:limit]


LONG = ("The nightly export of the ledger finished late again. " * 3 +
        "Then the greenhouse tomatoes needed water and the basil was pruned.")


def _lake(root: Path, records: list[dict[str, object]]) -> None:
    embedder = passage_hashing_embedder(DIM * 8)
    settings_ = Settings(lake=root, embedding_model=embedder.name)
    report = run_ingest(settings_, records=[json.dumps(r) for r in records], embedder=embedder,
                        index=False)
    build_indexes(LakeStore(root), model=embedder.name, partitions=report.ingest.partitions,
                  compaction=Compaction(max_segments=1000, max_delta_ratio=1e9))


def _partition(root: Path) -> PartitionIndex:
    (status,) = partition_statuses(LakeStore(root)).values()
    assert status.manifest is not None
    return PartitionIndex(local_build(root, status.manifest), status.manifest)


def test_a_segmented_partition_holds_the_passages_a_full_build_does(tmp_path: Path) -> None:
    records = [make_record(i, answer=LONG if i % 2 else f"short answer {i}",
                           at=BASE_TIME + timedelta(minutes=i)) for i in range(6)]
    _lake(tmp_path / "seg", records[:3])
    _lake(tmp_path / "seg", records[3:])
    _lake(tmp_path / "full", records)
    segmented, full = _partition(tmp_path / "seg"), _partition(tmp_path / "full")
    assert len(segmented.manifest.live_segments) == 2
    assert len(full.manifest.live_segments) == 1
    query = passage_hashing_embedder(DIM * 8).encode(["greenhouse tomatoes basil"])[0]
    assert segmented.passages is not None and full.passages is not None
    for scope in (None, np.arange(1, full.manifest.row_count, 2, dtype=np.int64)):
        (a, b), (c, d) = segmented.passages.best(query, scope), full.passages.best(query, scope)
        assert a.tolist() == c.tolist() and a.size
        np.testing.assert_allclose(b, d, atol=1e-6)
    # each row's passages, in order, as the full build has them
    rows = np.arange(full.manifest.row_count, dtype=np.int64)
    got, want = segmented.passages.of_rows(rows), full.passages.of_rows(rows)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert set(want.places.tolist()) == set(range(int(want.counts.max())))
    # the long answers are the rows with passages
    texts = full.rows.column("text").to_pylist()
    assert {texts[d] for d in full.passages.best(query)[0].tolist()} == {LONG}


def test_a_partition_without_long_rows_has_no_passage_index(tmp_path: Path) -> None:
    _lake(tmp_path / "lake", [make_record(i, answer="ok") for i in range(3)])
    part = _partition(tmp_path / "lake")
    assert part.passages is None
    assert not (part.folder / "passages").exists()
