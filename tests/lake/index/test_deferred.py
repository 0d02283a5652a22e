"""Deferred rows (lake.index.deferred): a large appended file is left out of a delta segment,
listed in the manifest (the partition stays stale), indexed beside the live writer and
published with what came after it; the result equals a full rebuild."""

from __future__ import annotations

import json
import random
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from lake.embedding.hashing import HashingEmbedder
from lake.faults import Faults
from lake.index.deferred import publish_deferred, write_deferred
from lake.index.delta import append_partition
from lake.index.manifest import PartitionManifest, partition_dir, read_current
from lake.index.rebase import HIDDEN_PREFIX
from lake.index.status import partition_statuses
from lake.locks import index_lock
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.index_build import Compaction, build_indexes
from pipeline.jobs import run_ingest
from pipeline.live import LiveWriter
from tests.factories import BASE_TIME, make_record, rebuilt_copy

MODEL = "hashing-64"
AS_OF = BASE_TIME + timedelta(days=30)
NO_COMPACTION = Compaction(max_segments=1000, max_delta_ratio=1e9)
DEFER_BYTES = 10_000
PART = ("acme", "2026-03")


def _long_answer(seed: int) -> str:
    rng = random.Random(seed)
    words = [f"{rng.choice(['ledger', 'cache', 'quota'])}{rng.randrange(10_000)}"
             for _ in range(6_000)]
    return f"longmark{seed} " + " ".join(words)


def _record(n: int, answer: str | None = None) -> dict[str, object]:
    return make_record(n, user="u-ana", conversation=f"c-{n % 3}",
                       prompt=f"shortmark{n} deploy question",
                       answer=answer or f"shortmark{n} deploy answer",
                       at=BASE_TIME + timedelta(minutes=7 * n))


def _commit(settings: Settings, records: list[dict[str, object]]) -> None:
    run_ingest(settings, records=[json.dumps(r) for r in records], index=False)


def _versions(store: LakeStore) -> tuple[int, int]:
    content, logs = store.version(Table.CONTENT_ROWS), store.version(Table.TURN_LOGS)
    assert content is not None and logs is not None
    return content, logs


def _append(settings: Settings, defer_bytes: int | None) -> PartitionManifest | None:
    store = LakeStore(settings.lake)
    content, logs = _versions(store)
    with index_lock(settings.lake):
        return append_partition(store, _live(Path(str(settings.lake))), content_version=content,
                                logs_version=logs, model=MODEL, defer_bytes=defer_bytes)


def _live(lake: Path) -> PartitionManifest:
    current = read_current(lake, *PART)
    assert current is not None
    return current[1]


def _found(lake: Path, marker: str) -> bool:
    service = SearchService(LakeStore(lake), embedder=HashingEmbedder(64))
    result = service.search(SearchRequest(marker, Principal("acme", analyst=True),
                                          scope="tenant", as_of=AS_OF, k=5))
    return any(marker in (h.text or "") for h in result.hits)


def _hits(lake: Path) -> list[object]:
    service = SearchService(LakeStore(lake), embedder=HashingEmbedder(64))
    out: list[object] = []
    for query in ("deploy question", "longmark1", "ledger cache", "shortmark13 answer"):
        result = service.search(SearchRequest(query, Principal("acme", analyst=True),
                                              scope="tenant", as_of=AS_OF, k=20))
        out.append([(h.row_id, h.turn_id, round(h.score, 6)) for h in result.hits])
    return out


def _rebuilt(lake: Path, tmp: Path) -> Path:
    return rebuilt_copy(lake, tmp, MODEL)


def _deferred_lake(settings: Settings) -> PartitionManifest:
    """A partition indexed up to 12 short turns, then a long turn and two short turns
    committed, and a delta that deferred the long one: its live manifest."""
    _commit(settings, [_record(n) for n in range(12)])
    build_indexes(LakeStore(settings.lake), model=MODEL, compaction=NO_COMPACTION)
    _commit(settings, [_record(1001, _long_answer(1))])
    _commit(settings, [_record(12), _record(13)])
    appended = _append(settings, DEFER_BYTES)
    assert appended is not None
    return appended


def test_a_large_file_is_deferred_and_the_turns_beside_it_are_searchable_first(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lake = Path(str(hashing_settings.lake))
    appended = _deferred_lake(hashing_settings)
    assert len(appended.deferred_content) == 1 and len(appended.deferred_logs) == 1
    assert appended.segment_rows[-1] == 4  # the two short turns' rows, not the long turn's
    assert partition_statuses(LakeStore(lake))[PART].freshness == "stale"
    assert _found(lake, "shortmark13")
    assert not _found(lake, "longmark1")

    store = LakeStore(lake)
    built = write_deferred(store, appended, model=MODEL)
    assert built is not None and not built.deferred_content
    assert (partition_dir(lake, *PART) / f"{HIDDEN_PREFIX}{built.build_id}").is_dir()
    # A short turn committed while the long one is indexed: published beside it meanwhile.
    _commit(hashing_settings, [_record(14)])
    assert _append(hashing_settings, DEFER_BYTES) is not None
    assert _found(lake, "shortmark14") and not _found(lake, "longmark1")
    with index_lock(lake):
        published = publish_deferred(store, appended, built, model=MODEL,
                                     defer_bytes=DEFER_BYTES)
    assert published is not None and not published.deferred_content
    assert published.live_segments[-2] == built.build_id
    assert partition_statuses(LakeStore(lake))[PART].freshness == "fresh"
    assert _found(lake, "longmark1") and _found(lake, "shortmark14")
    assert _hits(lake) == _hits(_rebuilt(lake, tmp_path))


def test_a_delta_without_defer_bytes_indexes_what_was_deferred(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lake = Path(str(hashing_settings.lake))
    _deferred_lake(hashing_settings)
    caught_up = _append(hashing_settings, None)
    assert caught_up is not None and not caught_up.deferred_content
    assert partition_statuses(LakeStore(lake))[PART].freshness == "fresh"
    assert _found(lake, "longmark1")
    assert _hits(lake) == _hits(_rebuilt(lake, tmp_path))


def test_a_deferred_segment_is_discarded_when_the_partition_was_rebuilt_meanwhile(
        hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    appended = _deferred_lake(hashing_settings)
    store = LakeStore(lake)
    built = write_deferred(store, appended, model=MODEL)
    assert built is not None
    build_indexes(LakeStore(lake), model=MODEL, full=True)  # indexes the long turn itself
    with index_lock(lake):
        assert publish_deferred(store, appended, built, model=MODEL,
                                defer_bytes=DEFER_BYTES) is None
    assert not (partition_dir(lake, *PART) / f"{HIDDEN_PREFIX}{built.build_id}").exists()
    assert _found(lake, "longmark1")
    assert partition_statuses(LakeStore(lake))[PART].freshness == "fresh"


def test_a_large_file_is_deferred_whole_with_every_turn_it_holds(
        hashing_settings: Settings) -> None:
    """Deferral is by data file: short turns committed in one batch with the long one are
    deferred and indexed with it, never served half."""
    lake = Path(str(hashing_settings.lake))
    _commit(hashing_settings, [_record(n) for n in range(12)])
    build_indexes(LakeStore(lake), model=MODEL, compaction=NO_COMPACTION)
    _commit(hashing_settings, [_record(1001, _long_answer(1)), _record(12)])
    appended = _append(hashing_settings, DEFER_BYTES)
    assert appended is not None and appended.deferred_content
    assert not _found(lake, "shortmark12") and not _found(lake, "longmark1")
    store = LakeStore(lake)
    built = write_deferred(store, appended, model=MODEL)
    assert built is not None
    with index_lock(lake):
        assert publish_deferred(store, appended, built, model=MODEL,
                                defer_bytes=DEFER_BYTES) is not None
    assert _found(lake, "shortmark12") and _found(lake, "longmark1")


def test_a_live_writer_publishes_the_turns_after_a_long_one_while_it_is_indexed(
        hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    gate = threading.Event()

    def on_hit(point: str) -> None:
        if point == "index.deferred_written":  # the long turn's segment, not yet live
            assert gate.wait(timeout=120)

    # a base the long turn does not outweigh (else a rebase indexes it: the test below)
    live = LiveWriter(hashing_settings.with_(index_defer_bytes=DEFER_BYTES,
                                             index_compact_ratio=1e9),
                      embed=False, faults=Faults(on_hit), background_rebase=True)
    try:
        live.record([_record(n) for n in range(12)])
        live.ingest([json.dumps(_record(1001, _long_answer(1)))])  # committed alone
        parts = live.ingest([json.dumps(_record(12))]).ingest.partitions
        report = live.index(parts)
        assert report.deferring == ["acme/2026-03"]
        long_turn = make_record(1001)["turn_id"]
        assert {t for _, _, t in live.deferred_turns(report)} == {long_turn}
        assert _found(lake, "shortmark12") and not _found(lake, "longmark1")
        # Steps meanwhile publish new turns and keep the long one deferred.
        report = live.index(live.ingest([json.dumps(_record(13))]).ingest.partitions)
        assert {t for _, _, t in live.deferred_turns(report)} == {long_turn}
        assert _found(lake, "shortmark13")
    finally:
        gate.set()
        assert live.wait_rebases(120)
    assert _found(lake, "longmark1") and _found(lake, "shortmark13")
    assert partition_statuses(LakeStore(lake))[PART].freshness == "fresh"


def test_a_long_turn_that_outweighs_the_base_is_indexed_once_by_a_background_rebase(
        hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    gate = threading.Event()
    hits: list[str] = []

    def on_hit(point: str) -> None:
        hits.append(point)
        if point == "index.rebase_visible":  # the new base, not yet live
            assert gate.wait(timeout=120)

    # The settings' thresholds: a delta of the long turn would make a rebase due at once, so
    # the rebase indexes it, not a deferred build first and the rebase after.
    live = LiveWriter(hashing_settings.with_(index_defer_bytes=DEFER_BYTES), embed=False,
                      faults=Faults(on_hit), background_rebase=True)
    try:
        live.record([_record(n) for n in range(12)])
        live.ingest([json.dumps(_record(1001, _long_answer(1)))])
        report = live.index(live.ingest([json.dumps(_record(12))]).ingest.partitions)
        assert report.rebasing == ["acme/2026-03"] and not report.deferring
        long_turn = make_record(1001)["turn_id"]
        assert {t for _, _, t in live.deferred_turns(report)} == {long_turn}
        assert _found(lake, "shortmark12") and not _found(lake, "longmark1")
        # Another long turn while that rebase runs: deferred, and built after it by a
        # rebase of its own (it outweighs the new base too), not by a deferred segment.
        live.ingest([json.dumps(_record(1002, _long_answer(2)))])
        report = live.index(live.ingest([json.dumps(_record(13))]).ingest.partitions)
        assert _found(lake, "shortmark13") and not _found(lake, "longmark2")
    finally:
        gate.set()
        assert live.wait_rebases(120)
    assert _found(lake, "longmark1") and _found(lake, "longmark2")
    assert hits.count("index.rebase_visible") == 2
    assert "index.deferred_written" not in hits
    assert len(_live(lake).live_segments) == 1
    assert partition_statuses(LakeStore(lake))[PART].freshness == "fresh"


def test_an_index_step_without_deferral_indexes_a_long_turn_at_once(
        hashing_settings: Settings) -> None:
    live = LiveWriter(hashing_settings.with_(index_defer_bytes=DEFER_BYTES), embed=False,
                      background_rebase=True)
    live.record([_record(n) for n in range(12)])
    parts = live.ingest([json.dumps(_record(1001, _long_answer(1)))]).ingest.partitions
    report = live.index(parts, defer=False)
    assert not report.deferring and not live.deferred_turns(report)
    assert _found(Path(str(hashing_settings.lake)), "longmark1")


class _Crash(Exception):
    pass


def test_a_crash_as_a_deferred_segment_goes_live_leaves_the_deferral_to_the_next_step(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lake = Path(str(hashing_settings.lake))
    appended = _deferred_lake(hashing_settings)
    store = LakeStore(lake)
    built = write_deferred(store, appended, model=MODEL)
    assert built is not None

    def crash(point: str) -> None:
        if point == "index.deferred_visible":
            raise _Crash(point)

    with index_lock(lake), pytest.raises(_Crash):
        publish_deferred(store, appended, built, model=MODEL, defer_bytes=DEFER_BYTES,
                         faults=Faults(on_hit=crash))
    assert _live(lake) == appended  # the previous segments, the file still deferred
    assert partition_statuses(LakeStore(lake))[PART].freshness == "stale"
    assert _found(lake, "shortmark13") and not _found(lake, "longmark1")
    # The next step without deferral (a start-up's, `index build`) indexes it, and its
    # publication removes the folder the crash left visible.
    build_indexes(LakeStore(lake), model=MODEL, compaction=NO_COMPACTION)
    assert partition_statuses(LakeStore(lake))[PART].freshness == "fresh"
    assert _found(lake, "longmark1")
    folders = {p.name for p in partition_dir(lake, *PART).iterdir() if p.is_dir()}
    assert folders == set(_live(lake).live_segments)
    assert _hits(lake) == _hits(_rebuilt(lake, tmp_path))
