"""The group writer's index lane with its real child processes: a large request is committed
alone and indexed in the background (lake.index.deferred), a short turn of another key sent
with it is searchable, and the writer reports the large group searchable only once it is."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pyarrow.compute as pc
import pyarrow.feather as feather

from lake.embedding.hashing import HashingEmbedder
from lake.embedding.precision import half_precision_column
from lake.embedding.rows import embed_rows
from lake.index.manifest import partition_dir, read_current
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import TurnKey
from pipeline.prepare import SealedGroup
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.writer import GroupWriter
from tests.reliability.lake_audit import key_of, turn_record

PART = ("acme", "2026-03")


def _lines(records: list[dict[str, object]]) -> tuple[list[str], list[TurnKey | None]]:
    return [orjson.dumps(r).decode() for r in records], [key_of(r) for r in records]


def _found(lake: Path, marker: str) -> bool:
    service = SearchService(LakeStore(lake), embedder=HashingEmbedder(64))
    result = service.search(SearchRequest(marker, Principal("acme", analyst=True),
                                          scope="tenant", k=5))
    return any(marker in (h.text or "") for h in result.hits)


def _all_searchable(writer: GroupWriter) -> None:
    deadline = time.monotonic() + 120
    while writer.backlog()["unsearchable_groups"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.backlog()["unsearchable_groups"] == 0


def test_a_large_request_is_indexed_beside_the_turns_of_other_keys(
        hashing_settings: Settings) -> None:
    # index_compact_ratio: a base the long turn does not outweigh, so that it is a deferred
    # segment (one that outweighs the base goes into a background rebase instead:
    # tests/lake/index/test_deferred.py)
    settings = hashing_settings.with_(record_fair_share_bytes=4_000, index_defer_bytes=10_000,
                                      record_max_lag_s=0.0, index_compact_ratio=1e9)
    lake = Path(str(settings.lake))
    metrics = ServiceMetrics()
    writer = GroupWriter(settings, embedder=None, index=True, metrics=metrics, child=True)
    writer.start(wait=True)
    try:
        seeded = writer.submit(*_lines([turn_record(n) for n in range(12)]), sharer="acme/a")
        assert all(o.status == "accepted" for o in seeded.result(timeout=120))
        _all_searchable(writer)
        rng = random.Random(5)
        large = turn_record(100, conversation="c-big", marker="longmark")
        large["completion"]["text"] = "longmark " + " ".join(
            f"ledger{rng.randrange(100_000)}" for _ in range(8_000))
        short = turn_record(101, conversation="c-short", marker="shortmark")
        futures = [writer.submit(*_lines([large]), sharer="acme/big"),
                   writer.submit(*_lines([short]), sharer="acme/small")]
        assert all(f.result(timeout=120)[0].status == "accepted" for f in futures)
        _all_searchable(writer)
        # Said searchable: both are found.
        assert _found(lake, "shortmark") and _found(lake, "longmark")
    finally:
        writer.close()
    # The long turn's rows were a segment of their own: its deferred segment.
    current = read_current(lake, *PART)
    assert current is not None
    holding = [feather.read_table(partition_dir(lake, *PART) / segment / "rows.arrow")
               for segment in current[1].live_segments]
    long_turn = str(large["turn_id"])
    mine = [t for t in holding if long_turn in t["turn_id"].to_pylist()]
    assert len(mine) == 1 and set(mine[0]["turn_id"].to_pylist()) == {long_turn}
    assert not current[1].deferred_content


def test_a_large_requests_texts_are_embedded_ahead_of_its_commit_as_its_commit_would(
        hashing_settings: Settings) -> None:
    """With an embedder, the large group goes through the vector lane (a child of its own)
    before its commit: its rows carry the vectors an ingest computes, and each turn is
    stored once."""
    settings = hashing_settings.with_(record_fair_share_bytes=4_000, index_defer_bytes=10_000)
    lake = Path(str(settings.lake))
    writer = GroupWriter(settings, embedder=HashingEmbedder(64), index=True, child=True)
    writer.start(wait=True)
    try:
        rng = random.Random(7)
        large = turn_record(200, conversation="c-big", marker="longmark")
        large["completion"]["text"] = "longmark " + " ".join(
            f"ledger{rng.randrange(100_000)}" for _ in range(8_000))
        futures = [writer.submit(*_lines([large]), sharer="acme/big"),
                   *(writer.submit(*_lines([turn_record(201 + n, conversation="c-short")]),
                                   sharer="acme/small") for n in range(3))]
        assert all(f.result(timeout=120)[0].status == "accepted" for f in futures)
        assert writer.flush(120)
        _all_searchable(writer)
        assert _found(lake, "longmark")
    finally:
        writer.close()
    rows = LakeStore(lake).read(Table.CONTENT_ROWS)
    assert sorted(set(rows["turn_id"].to_pylist())) == sorted(
        str(r["turn_id"]) for r in [large, *(turn_record(201 + n) for n in range(3))])
    mine = rows.filter(pc.equal(rows["turn_id"], str(large["turn_id"])))
    assert mine.num_rows == len(set(mine["row_id"].to_pylist()))  # stored once
    expected, _ = embed_rows(mine, HashingEmbedder(64))
    assert mine["embedding_status"].to_pylist() == ["done"] * mine.num_rows
    # the lake stores vectors at half precision (lake.embedding.precision)
    assert mine["embedding"].to_pylist() == \
        half_precision_column(expected["embedding"]).to_pylist()


class _HeldVectors:
    """A vector lane whose embedding waits until the test lets it go."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def embed_ahead(self, group: SealedGroup) -> dict[str, object]:
        assert self.go.wait(timeout=120)
        return {}  # nothing computed: the commit embeds

    def close(self) -> None:
        self.go.set()


def test_a_group_in_the_vector_lane_stays_in_the_spool_while_later_groups_commit(
        hashing_settings: Settings) -> None:
    """A spool forgets every group up to the number it is told: committing a later group
    must not make it forget the large one still being embedded (a crash would lose it)."""
    settings = hashing_settings.with_(record_fair_share_bytes=4_000, record_max_lag_s=0.0)
    lake = Path(str(settings.lake))
    writer = GroupWriter(settings, embedder=HashingEmbedder(64), index=False)
    held = _HeldVectors()
    assert writer._committer is not None
    writer._committer._vectors = held  # type: ignore[assignment]
    writer._committer._ahead = ThreadPoolExecutor(max_workers=1)
    writer.start(wait=True)
    try:
        large = turn_record(300, conversation="c-big", marker="longmark")
        large["completion"]["text"] = "longmark " + "ledger " * 2_000
        assert writer.submit(*_lines([large]), sharer="acme/big"
                             ).result(timeout=60)[0].status == "accepted"
        small = turn_record(301, conversation="c-small")
        assert writer.submit(*_lines([small]), sharer="acme/small"
                             ).result(timeout=60)[0].status == "accepted"
        deadline = time.monotonic() + 60
        while _stored(lake) != {str(small["turn_id"])} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _stored(lake) == {str(small["turn_id"])}  # committed past the large one
        assert len(list((lake / "_spool").glob("*/g*.json"))) == 2  # both files kept
        held.go.set()
        assert writer.flush(60)
        assert _stored(lake) == {str(small["turn_id"]), str(large["turn_id"])}
        assert not list((lake / "_spool").glob("*/g*.json"))
    finally:
        held.go.set()
        writer.close()


def _stored(lake: Path) -> set[str]:
    store = LakeStore(lake)
    if not store.exists(Table.TURN_LOGS):
        return set()
    return set(store.read(Table.TURN_LOGS, columns=["turn_id"])["turn_id"].to_pylist())
