"""Segmented partition indexes: delta segments answer exactly as one full build of the rows."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lake.embedding.hashing import HashingEmbedder
from lake.index.manifest import local_build, read_current
from lake.index.partition import PartitionIndex
from lake.index.segments import ROWS_FILE
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.index_build import Compaction, build_indexes, compact_indexes
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record

AS_OF = BASE_TIME + timedelta(days=30)
WORDS = ["deploy", "ingress", "invoice", "forecast", "timezone", "pods", "budget", "vault",
         "reset", "staging", "refund", "sheet", "probe", "cluster", "zanzibar"]
USERS = ["u-ana", "u-ben", "u-cy"]
QUERIES = ["deploy ingress", "invoice refund", "forecast sheet timezone", "zanzibar",
           "pods probe staging", "vault"]
GENERATOR_SETS = [{"semantic": True, "lexical": False, "trigram": False},
                  {"semantic": False, "lexical": True, "trigram": False},
                  {"semantic": False, "lexical": False, "trigram": True},
                  {"semantic": True, "lexical": True, "trigram": True}]
NO_COMPACTION = Compaction(max_segments=1000, max_delta_ratio=1e9)


def _record(n: int, user: int, conv: int, words: list[int]) -> dict[str, object]:
    text = " ".join(WORDS[w] for w in words)
    return make_record(n, user=USERS[user], conversation=f"c-{user}-{conv}",
                       prompt=f"{text} question", answer=f"{WORDS[words[0]]} answer {n % 3}",
                       at=BASE_TIME + timedelta(minutes=7 * n))


def _ingest(settings_: Settings, records: list[dict[str, object]],
            compaction: Compaction | None = NO_COMPACTION) -> None:
    report = run_ingest(settings_, records=[json.dumps(r) for r in records], index=False)
    build_indexes(LakeStore(settings_.lake), model="hashing-64",
                  partitions=report.ingest.partitions, compaction=compaction)


def _service(lake: Path) -> SearchService:
    return SearchService(LakeStore(lake), embedder=HashingEmbedder(64))


def _hits(lake: Path, service: SearchService | None = None) -> list[object]:
    """Every query, generator set and scope; through ``service`` when given (a warm one that
    has seen earlier views of the lake), else through a fresh one."""
    service = service or _service(lake)
    out: list[object] = []
    for query in QUERIES:
        for enabled in GENERATOR_SETS:
            for principal, scope in ((Principal("acme", "u-ana"), "user"),
                                     (Principal("acme", analyst=True), "tenant")):
                result = service.search(SearchRequest(query, principal, scope=scope,  # type: ignore[arg-type]
                                                      as_of=AS_OF, enabled=enabled, k=20))
                out.append([(h.row_id, h.conversation_id, h.turn_id,
                             {g: (r.rank, round(r.score, 6)) if r else None
                              for g, r in h.ranks.items()}, round(h.score, 6))
                            for h in result.hits])
    return out


@contextmanager
def _rebuilt_copy(lake: Path, tmp: Path) -> Iterator[Path]:
    """The same lake, copied, with every partition rebuilt in one piece."""
    copy = tmp / "rebuilt"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(lake, copy)
    build_indexes(LakeStore(copy), model="hashing-64", full=True)
    yield copy
    shutil.rmtree(copy, ignore_errors=True)


def _segments(lake: Path) -> list[int]:
    current = read_current(lake, "acme", "2026-03")
    assert current is not None
    return current[1].segment_rows


def test_append_adds_a_delta_segment_that_searches_like_a_rebuild(
        hashing_settings: Settings, tmp_path: Path) -> None:
    _ingest(hashing_settings, [_record(i, i % 3, i % 2, [i % 15, (i * 7) % 15]) for i in range(12)])
    _ingest(hashing_settings, [_record(20 + i, i % 2, 5, [i, 3]) for i in range(3)])
    lake = Path(hashing_settings.lake)
    assert len(_segments(lake)) == 2
    (status,) = partition_statuses(LakeStore(lake)).values()
    assert status.freshness == "fresh"
    assert status.manifest is not None and status.manifest.row_count == 30
    with _rebuilt_copy(lake, tmp_path) as copy:
        assert len(_segments(copy)) == 1
        assert _hits(lake) == _hits(copy)
        # the segmented dense index hands out each row's vector as the rebuilt one does
        views = [_partition(root) for root in (lake, copy)]
        rows = np.arange(30, dtype=np.int64)
        (found, vectors), (found_rebuilt, vectors_rebuilt) = (
            view.semantic.vectors(rows) for view in views if view.semantic is not None)
        assert found.tolist() == found_rebuilt.tolist() == rows.tolist()
        assert np.array_equal(vectors, vectors_rebuilt)
        # and the same running text sizes, which tell search a long turn (doc order)
        assert views[0].text_bytes_before.tolist() == views[1].text_bytes_before.tolist()


def _partition(lake: Path) -> PartitionIndex:
    (status,) = partition_statuses(LakeStore(lake)).values()
    assert status.manifest is not None
    return PartitionIndex(local_build(lake, status.manifest), status.manifest)


def test_compaction_merges_segments_into_one_base(hashing_settings: Settings) -> None:
    _ingest(hashing_settings, [_record(i, i % 3, 0, [i % 15]) for i in range(6)])
    for k in range(3):
        _ingest(hashing_settings, [_record(10 + k, 1, 1, [k, 4])])
    lake = Path(hashing_settings.lake)
    before = _hits(lake)
    assert len(_segments(lake)) == 4
    report = compact_indexes(LakeStore(lake), model="hashing-64")
    assert report.compacted == ["acme/2026-03"]
    assert _segments(lake) == [18]
    assert _hits(lake) == before
    # only the live segment's folder is left
    folders = [p for p in (lake / "indexes" / "acme" / "2026-03").iterdir() if p.is_dir()]
    assert len(folders) == 1


def test_too_many_segments_merge_the_deltas_and_large_deltas_make_a_new_base(
        hashing_settings: Settings, tmp_path: Path) -> None:
    _ingest(hashing_settings, [_record(i, i % 3, 0, [i % 15]) for i in range(10)])
    lake = Path(hashing_settings.lake)
    policy = Compaction(max_segments=2, max_delta_ratio=0.5)
    _ingest(hashing_settings, [_record(30, 0, 1, [1])], compaction=policy)
    assert _segments(lake) == [20, 2]
    _ingest(hashing_settings, [_record(31, 0, 1, [2])], compaction=policy)  # a third segment
    assert _segments(lake) == [20, 4], "the two deltas merged into one, the base kept"
    with _rebuilt_copy(lake, tmp_path) as copy:
        assert _hits(lake) == _hits(copy)
    _ingest(hashing_settings, [_record(40 + i, 1, 2, [i]) for i in range(4)], compaction=policy)
    assert _segments(lake) == [32], "deltas above half the base: a new base"


def test_a_replaced_turn_is_never_served_from_an_older_segment(
        hashing_settings: Settings, tmp_path: Path) -> None:
    _ingest(hashing_settings, [_record(i, 0, 0, [i % 15]) for i in range(5)])
    _ingest(hashing_settings, [_record(9, 0, 1, [14, 14])])  # "zanzibar zanzibar"
    lake = Path(hashing_settings.lake)
    assert len(_segments(lake)) == 2
    # remove the appended turn's rows the way retention and erasure do: files are rewritten
    store = LakeStore(lake)
    store.delete(Table.CONTENT_ROWS, "conversation_id = 'c-0-1'")
    store.delete(Table.TURN_LOGS, "conversation_id = 'c-0-1'")
    build_indexes(store, model="hashing-64", compaction=NO_COMPACTION)
    assert len(_segments(lake)) == 1  # not an append: rebuilt whole
    service = SearchService(store, embedder=HashingEmbedder(64))
    result = service.search(SearchRequest("zanzibar", Principal("acme", "u-ana"), as_of=AS_OF))
    assert all(h.conversation_id != "c-0-1" for h in result.hits)


batch = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2),
                           st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=4)),
                 min_size=1, max_size=4)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch, min_size=2, max_size=4))
def test_random_appends_search_like_a_full_rebuild(tmp_path: Path,
                                                   batches: list[list[tuple[int, int, list[int]]]],
                                                   ) -> None:
    root = tmp_path / f"lake-{uuid.uuid4().hex[:8]}"
    lake_settings = Settings(lake=root, embedding_model="hashing-64")
    n = 0
    warm: SearchService | None = None
    for records in batches:
        rows = []
        for user, conv, words in records:
            rows.append(_record(n, user, conv, words))
            n += 1
        _ingest(lake_settings, rows)
        # a warm service opens every view on the way, so later views extend earlier ones
        warm = warm or _service(root)
        warm.search(SearchRequest("deploy", Principal("acme", analyst=True), scope="tenant",
                                  as_of=AS_OF))
    assert len(_segments(root)) == len(batches)
    with _rebuilt_copy(root, tmp_path) as copy:
        rebuilt = _hits(copy)
        for segmented in (_hits(root), _hits(root, warm)):
            for i, (a, b) in enumerate(zip(segmented, rebuilt, strict=True)):
                assert a == b, (i, a, b)


@pytest.mark.parametrize("model", ["hashing-32"])
def test_a_model_change_makes_the_partition_stale_and_rebuilds_it(
        hashing_settings: Settings, model: str) -> None:
    _ingest(hashing_settings, [_record(i, 0, 0, [i]) for i in range(4)])
    store = LakeStore(hashing_settings.lake)
    report = build_indexes(store, model=model)
    (built,) = report.built
    assert built.embedded_rows == 0 and built.foreign_vectors == 8
    assert report.foreign_vectors == [built]
    (status,) = partition_statuses(store, model="hashing-64").values()
    assert status.freshness == "stale"
    again = build_indexes(store, model="hashing-64")
    assert again.built[0].embedded_rows == 8 and again.built[0].foreign_vectors == 0


def test_a_rebased_view_reuses_what_the_earlier_view_opened_and_answers_as_a_fresh_one(
        hashing_settings: Settings) -> None:
    _ingest(hashing_settings, [_record(i, i % 3, i % 2, [i % 15, (i * 7) % 15]) for i in range(9)])
    lake = Path(hashing_settings.lake)
    earlier = _partition(lake)
    opened_earlier = earlier.columns, earlier.trigram  # what a search of it opens
    _ingest(hashing_settings, [_record(30 + i, i % 2, 4, [i, 5]) for i in range(2)])
    assert len(_segments(lake)) == 2
    (status,) = partition_statuses(LakeStore(lake)).values()
    assert status.manifest is not None
    folder = local_build(lake, status.manifest)
    rebased = earlier.rebased(folder, status.manifest)
    fresh = PartitionIndex(folder, status.manifest)
    b, fresh_rows = fresh.columns, fresh.rows
    # the extension is built when the view is opened: nothing of the new segment's rows is
    # read after that, whatever the new view is asked first
    (folder / ROWS_FILE).rename(folder / "moved-rows")
    assert rebased.trigram is opened_earlier[1]
    # the base segment's artifacts are the earlier view's objects, not loaded again
    assert rebased.segments.trigram_parts[0] is opened_earlier[1]
    assert fresh.segments.trigram_parts[0] is not opened_earlier[1]
    # the columns are the earlier ones extended by the new segment (codes are labels, and an
    # extension numbers a new conversation last): every value equals a fresh decode's
    a = rebased.columns
    assert [a.conversations[c] for c in a.conversation_codes] == \
        [b.conversations[c] for c in b.conversation_codes]
    assert [a.users[c] for c in a.user_codes] == [b.users[c] for c in b.user_codes]
    assert not np.array_equal(a.conversation_codes, b.conversation_codes)  # extended, not decoded
    for name in ("turn_at_us", "expires_us"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert earlier.columns is opened_earlier[0]  # the earlier view is left as it was
    assert rebased.rows.column("row_id").to_pylist() == fresh_rows.column("row_id").to_pylist()
    with pytest.raises(ValueError, match="cannot be rebased"):
        earlier.rebased(folder, status.manifest.__class__(**{
            **status.manifest.__dict__, "month": "2026-04"}))


def test_threads_that_open_one_view_at_once_share_one_load(hashing_settings: Settings) -> None:
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    _ingest(hashing_settings, [_record(i, i % 3, i % 2, [i % 15]) for i in range(9)])
    view = _partition(Path(hashing_settings.lake))
    start = Barrier(4)

    def opened(_: int) -> tuple[object, ...]:
        start.wait(timeout=30)
        return view.columns, view.lexical, view.trigram, view.rows

    with ThreadPoolExecutor(4) as pool:
        seen = list(pool.map(opened, range(4)))
    for one in zip(*seen, strict=True):
        assert all(value is one[0] for value in one)
