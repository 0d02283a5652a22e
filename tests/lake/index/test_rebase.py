"""Rebases beside a live writer (lake.index.rebase, pipeline.index_build.BackgroundRebases):
a base written while deltas are published goes live with a delta of what came after it, and
equals a full rebuild; it is discarded when the live base changed or rows went meanwhile."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from lake.deletion.target import ErasureTarget
from lake.embedding.hashing import HashingEmbedder
from lake.faults import Faults
from lake.index.manifest import PartitionManifest, partition_dir, read_current
from lake.index.rebase import HIDDEN_PREFIX, publish_base, write_base
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
from pipeline.retention import erase
from tests.factories import BASE_TIME, make_record, rebuilt_copy

MODEL = "hashing-64"
AS_OF = BASE_TIME + timedelta(days=30)
WORDS = ["deploy", "ingress", "invoice", "forecast", "timezone", "pods", "budget", "vault"]
QUERIES = ["deploy ingress", "invoice", "forecast timezone", "vault pods", "budget"]
NO_COMPACTION = Compaction(max_segments=1000, max_delta_ratio=1e9)


def _record(n: int) -> dict[str, object]:
    words = f"{WORDS[n % 8]} {WORDS[(n * 3) % 8]}"
    return make_record(n, user="u-ana", conversation=f"c-{n % 4}", prompt=f"{words} question",
                       answer=f"{WORDS[(n + 1) % 8]} answer",
                       at=BASE_TIME + timedelta(minutes=7 * n))


def _ingest(settings: Settings, numbers: range) -> None:
    report = run_ingest(settings, records=[json.dumps(_record(n)) for n in numbers], index=False)
    build_indexes(LakeStore(settings.lake), model=MODEL, partitions=report.ingest.partitions,
                  compaction=NO_COMPACTION)


def _live(lake: Path) -> PartitionManifest:
    current = read_current(lake, "acme", "2026-03")
    assert current is not None
    return current[1]


def _hits(lake: Path) -> list[object]:
    service = SearchService(LakeStore(lake), embedder=HashingEmbedder(64))
    out: list[object] = []
    for query in QUERIES:
        for principal, scope in ((Principal("acme", "u-ana"), "user"),
                                 (Principal("acme", analyst=True), "tenant")):
            result = service.search(SearchRequest(query, principal, scope=scope,  # type: ignore[arg-type]
                                                  as_of=AS_OF, k=20))
            out.append([(h.row_id, h.turn_id, {g: (r.rank, round(r.score, 6)) if r else None
                                               for g, r in h.ranks.items()}, round(h.score, 6))
                        for h in result.hits])
    return out


def _rebuilt(lake: Path, tmp: Path) -> Path:
    return rebuilt_copy(lake, tmp, MODEL)


def _folders(lake: Path) -> set[str]:
    return {p.name for p in partition_dir(lake, "acme", "2026-03").iterdir() if p.is_dir()}


def _begin(settings: Settings) -> tuple[PartitionManifest, PartitionManifest]:
    """A partition of a base and a delta segment: its live manifest and a new base written
    beside it at the current versions."""
    _ingest(settings, range(12))
    _ingest(settings, range(20, 24))
    store = LakeStore(settings.lake)
    begun = _live(Path(settings.lake))
    versions = store.version(Table.CONTENT_ROWS), store.version(Table.TURN_LOGS)
    assert versions[0] is not None and versions[1] is not None
    base = write_base(store, begun, content_version=versions[0], logs_version=versions[1],
                      model=MODEL)
    return begun, base


def _publish(settings: Settings, begun: PartitionManifest, base: PartitionManifest,
             faults: Faults | None = None) -> PartitionManifest | None:
    with index_lock(settings.lake):
        return publish_base(LakeStore(settings.lake), begun, base, model=MODEL,
                            faults=faults or Faults())


def test_a_base_written_beside_deltas_goes_live_with_a_delta_of_what_came_after_it(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lake = Path(hashing_settings.lake)
    begun, base = _begin(hashing_settings)
    assert f"{HIDDEN_PREFIX}{base.build_id}" in _folders(lake)
    # A delta published meanwhile (on the old base) leaves the hidden base alone.
    _ingest(hashing_settings, range(30, 33))
    assert len(_live(lake).segments) == 3
    assert f"{HIDDEN_PREFIX}{base.build_id}" in _folders(lake)
    published = _publish(hashing_settings, begun, base)
    assert published is not None
    assert published.live_segments[0] == base.build_id
    assert published.segment_rows == [base.row_count, 6]  # the three turns after its versions
    assert published.row_count == 38
    assert _folders(lake) == set(published.live_segments)
    assert _hits(lake) == _hits(_rebuilt(lake, tmp_path))


def test_a_base_is_discarded_when_another_build_replaced_the_live_base(
        hashing_settings: Settings) -> None:
    lake = Path(hashing_settings.lake)
    begun, base = _begin(hashing_settings)
    build_indexes(LakeStore(lake), model=MODEL, full=True)
    rebuilt = _live(lake)
    assert _publish(hashing_settings, begun, base) is None
    assert _live(lake) == rebuilt
    assert _folders(lake) == set(rebuilt.live_segments)


def test_a_base_written_before_an_erase_never_goes_live(hashing_settings: Settings) -> None:
    lake = Path(hashing_settings.lake)
    begun, base = _begin(hashing_settings)
    erase(hashing_settings, ErasureTarget("acme", conversation_id="c-1"), actor="test", settle=None)
    before = _live(lake)
    assert _publish(hashing_settings, begun, base) is None
    assert _live(lake) == before
    assert not any(h[1] in {"t-0001", "t-0005", "t-0009", "t-0021"}
                   for hits in _hits(lake) for h in hits)  # type: ignore[index]


def test_a_base_is_discarded_when_rows_went_without_a_new_index(
        hashing_settings: Settings) -> None:
    lake = Path(hashing_settings.lake)
    begun, base = _begin(hashing_settings)
    store = LakeStore(lake)
    for table in (Table.CONTENT_ROWS, Table.TURN_LOGS):
        store.delete(table, "conversation_id = 'c-2'")
    assert _publish(hashing_settings, begun, base) is None
    assert _live(lake) == begun
    assert base.build_id not in _folders(lake)


class _Crash(Exception):
    pass


def _crash_at(point: str) -> Faults:
    def hit(name: str) -> None:
        if name == point:
            raise _Crash(name)
    return Faults(on_hit=hit)


@pytest.mark.parametrize("point", ["index.rebase_visible", "index.after_delta_segment"])
def test_a_crash_while_a_base_goes_live_leaves_the_previous_segments_live(
        hashing_settings: Settings, point: str) -> None:
    lake = Path(hashing_settings.lake)
    begun, base = _begin(hashing_settings)
    _ingest(hashing_settings, range(30, 33))
    live = _live(lake)
    hits = _hits(lake)
    with pytest.raises(_Crash):
        _publish(hashing_settings, begun, base, _crash_at(point))
    assert _live(lake) == live
    assert _hits(lake) == hits
    # The base folder the crash left visible goes with the partition's next publication.
    _ingest(hashing_settings, range(40, 42))
    assert _folders(lake) == set(_live(lake).live_segments)


def test_a_live_writer_rebases_in_the_background_and_every_turn_stays_searchable(
        hashing_settings: Settings) -> None:
    settings = hashing_settings.with_(index_compact_ratio=0.2, index_compact_segments=1000)
    writer = LiveWriter(settings, HashingEmbedder(64), background_rebase=True)
    writer.record([_record(n) for n in range(20)])
    service = SearchService(LakeStore(settings.lake), embedder=HashingEmbedder(64))
    rebasing = 0
    for n in range(20, 40):
        record = _record(n)
        record["completion"] = {"text": f"marker{n}x answer", "at": record["started_at"]}
        report = writer.record([record])
        assert report.build is not None
        rebasing += len(report.build.rebasing)
        found = service.search(SearchRequest(f"marker{n}x", Principal("acme", "u-ana"),
                                             as_of=AS_OF))
        assert [h.turn_id for h in found.hits][:1] == [f"t-{n:04d}"]
    assert rebasing, "no rebase was started in the background"
    assert writer.wait_rebases(120)
    live = _live(Path(settings.lake))
    assert live.row_count == 80
    assert live.segment_rows[0] > 40  # a base newer than the first 20 turns' rows
    assert _folders(Path(settings.lake)) == set(live.live_segments)
