"""Jobs and readers at the same time: writers queue on the writer lock, index builds on the
index lock, readers take none; nothing is lost or doubled, and every conflict is a
TurnlakeError that says to re-run (``ConcurrentWriteError`` for writers)."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake.deletion.target import ErasureTarget
from lake.embedding.hashing import HashingEmbedder
from lake.errors import ConcurrentWriteError, IndexUnavailable, TurnlakeError
from lake.faults import Faults
from lake.index.manifest import read_current
from lake.locks import index_lock, writer_lock
from lake.search.access import Principal
from lake.search.catalog import TurnCatalog
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import SCHEMAS, Table
from pipeline.index_build import build_indexes
from pipeline.ingest import Ingestor
from pipeline.jobs import run_ingest
from pipeline.retention import erase, purge
from tests.reliability.cli_runs import clean, finish, start
from tests.reliability.lake_audit import (
    audit_lake,
    key_of,
    turn_record,
    write_records,
)

ANALYST = Principal("acme", analyst=True)


def _records(first: int, count: int, **kw: Any) -> list[dict[str, Any]]:
    return [turn_record(n, month=3 + n % 3, conversation=f"c-{n % 5}", rich=n % 4 == 0, **kw)
            for n in range(first, first + count)]


def _settings(lake: Path, **kw: Any) -> Settings:
    return Settings(lake=lake, embedding_model="hashing-64", **kw)


@pytest.mark.slow
def test_two_ingests_and_two_index_builds_at_once_all_land(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()  # index build needs a lake folder; the race is over what it holds
    first, second = _records(0, 30), _records(100, 30)
    a = write_records(tmp_path / "a.jsonl", first)
    b = write_records(tmp_path / "b.jsonl", second)
    procs = [start(lake, "ingest", a), start(lake, "ingest", b),
             start(lake, "index", "build", "--full"), start(lake, "index", "build")]
    for proc in procs:
        finish(proc)  # the second writer waited for the lock, it did not fail
    audit = clean(audit_lake(lake))
    assert audit.keys == {key_of(r) for r in first + second}
    assert max(audit.turns.values()) == 1
    # Each ingest indexed what it wrote; whatever order the builds ran in, a partition is
    # fresh and matches its table, or reported stale until the next build.
    build_indexes(LakeStore(lake), model="hashing-64")
    audit = clean(audit_lake(lake))
    assert audit.not_fresh == []


def _reader(lake: Path, stop: threading.Event, seen: dict[str, Any]) -> None:
    """Search and list in a loop until ``stop``; tally answers and errors by kind."""
    service = SearchService(LakeStore(lake), embedder=HashingEmbedder(64))
    catalog = TurnCatalog(LakeStore(lake))
    while not stop.is_set():
        try:
            result = service.search(SearchRequest(
                "forecast question", ANALYST, scope="tenant", k=200, max_per_conversation=0))
            turns = [(h.conversation_id, h.turn_id) for h in result.hits]
            assert len(turns) == len(set(turns)), "a turn appeared twice in one answer"
            seen["hit_turns"].update(turns)
            for entry in catalog.conversations(ANALYST)[:2]:
                listed = [t.turn_id for t in catalog.turns(ANALYST, entry.conversation_id)]
                assert len(listed) == len(set(listed))
            seen["answers"] += 1
        except TurnlakeError as exc:
            seen["retryable"].append(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # anything else is a crash a reader cannot act on
            seen["crashes"].append(f"{type(exc).__name__}: {exc}")


def _while_reading(lake: Path, job: Callable[[], object]) -> dict[str, Any]:
    seen: dict[str, Any] = {"answers": 0, "hit_turns": set(), "retryable": [], "crashes": []}
    stop = threading.Event()
    thread = threading.Thread(target=_reader, args=(lake, stop, seen))
    thread.start()
    try:
        job()
    finally:
        stop.set()
        thread.join(timeout=120)
    assert seen["crashes"] == [], seen["crashes"][:3]
    assert seen["answers"] > 0
    return seen


@pytest.mark.slow
def test_searches_during_ingest_and_purge_never_crash_or_double(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    live, expired = _records(0, 20), _records(50, 12, ttl_days=1)
    run_ingest(_settings(lake), records=[json.dumps(r) for r in live + expired])
    more = _records(200, 40)
    path = write_records(tmp_path / "more.jsonl", more)
    seen = _while_reading(lake, lambda: finish(start(lake, "ingest", path)))
    stored = {(c, t) for _, c, t in audit_lake(lake).keys}
    assert seen["hit_turns"] <= stored, "search showed a turn that was never committed"
    seen = _while_reading(lake, lambda: finish(start(lake, "retention", "purge")))
    audit = clean(audit_lake(lake))
    assert audit.keys == {key_of(r) for r in live + more}
    expired_turns = {(r["conversation_id"], r["turn_id"]) for r in expired}
    assert not seen["hit_turns"] & expired_turns, "an expired turn was shown during purge"


def test_writer_lock_timeout_is_a_clear_retryable_error(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "lake", lock_timeout_s=0.2)
    with writer_lock(settings.lake, job="another ingest"):
        with pytest.raises(ConcurrentWriteError, match=r"another ingest.*re-run"):
            Ingestor(settings).ingest_records([json.dumps(turn_record(1))])
        with pytest.raises(ConcurrentWriteError, match="re-run"):
            purge(settings)
    assert Ingestor(settings).ingest_records([json.dumps(turn_record(1))]).accepted == 1
    with index_lock(settings.lake, job="a long build"), pytest.raises(
            ConcurrentWriteError, match=r"a long build.*re-run"), index_lock(
                settings.lake, timeout_s=0.2):
        pass


def test_the_delta_log_arbitrates_conflicting_commits(tmp_path: Path) -> None:
    """Writers that bypass the lock (two processes' commits racing on one table) either
    commit or get ConcurrentWriteError; the table then holds exactly one winner's rows."""
    store = LakeStore(tmp_path / "lake")
    schema = SCHEMAS[Table.QUARANTINE]

    def rows(writer: int) -> pa.Table:
        return pa.Table.from_pylist([{"source_file": f"w{writer}", "line": i, "reason": "r",
                                      "raw": "x", "batch_id": f"b{writer}"} for i in range(5)],
                                    schema=schema)

    store.append(Table.QUARANTINE, rows(99))
    barrier = threading.Barrier(4)

    def replace(writer: int) -> str:
        barrier.wait()
        try:
            store.replace_where(Table.QUARANTINE, rows(writer), "line >= 0")
        except ConcurrentWriteError as exc:
            assert "re-run" in str(exc)
            return "conflict"
        return "committed"

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(replace, range(4)))
    assert "committed" in outcomes
    left = store.read(Table.QUARANTINE)
    assert left.num_rows == 5 and len(set(left.column("source_file").to_pylist())) == 1


def _indexed_lake(tmp_path: Path) -> Settings:
    settings = _settings(tmp_path / "lake")
    run_ingest(settings, records=[json.dumps(r) for r in _records(0, 12)])
    return settings


def test_readers_between_the_steps_of_an_erase_see_nothing_of_it(tmp_path: Path) -> None:
    """Between the TurnLog delete and the index rebuild / timeline refresh (a running erase,
    or one that crashed there), search and the conversation listing already show nothing."""
    settings = _indexed_lake(tmp_path)
    store = LakeStore(settings.lake)
    service = SearchService(store, embedder=HashingEmbedder(64))
    catalog = TurnCatalog(store)
    erased = {("c-3", "t-0003"), ("c-3", "t-0008")}
    query = SearchRequest("mk3 mk8 forecast", ANALYST, scope="tenant", k=50,
                          max_per_conversation=0)

    def visible() -> tuple[set[tuple[str, str]], set[str]]:
        hits = {(h.conversation_id, h.turn_id) for h in service.search(query).hits}
        return hits & erased, {e.conversation_id for e in catalog.conversations(ANALYST)}

    assert visible() == (erased, {f"c-{i}" for i in range(5)})
    seen: dict[str, tuple[set[tuple[str, str]], set[str]]] = {}

    def reader_between_steps(point: str) -> None:
        if point in ("erase.after_turn_logs", "erase.after_content_rows"):
            seen[point] = visible()

    erase(settings, ErasureTarget("acme", conversation_id="c-3"), actor="t", settle=None,
          faults=Faults(reader_between_steps))
    after: tuple[set[tuple[str, str]], set[str]] = (set(), {"c-0", "c-1", "c-2", "c-4"})
    assert seen == {"erase.after_turn_logs": after, "erase.after_content_rows": after}
    assert visible() == after


def test_a_vanished_index_is_a_clear_error_then_reported_and_rebuilt(tmp_path: Path) -> None:
    settings = _indexed_lake(tmp_path)
    store = LakeStore(settings.lake)
    folder, _manifest = read_current(settings.lake, "acme", "2026-03") or (None, None)
    assert folder is not None
    service = SearchService(store, embedder=HashingEmbedder(64))
    query = SearchRequest("forecast", ANALYST, scope="tenant")
    # A reader that resolved the live build just before a newer build removed it.
    (folder / "rows.arrow").unlink()
    with pytest.raises(IndexUnavailable, match="search again"):
        service.search(query)
    # A pointer naming no build is reported as unindexed, and a build repairs it.
    shutil.rmtree(folder)
    result = SearchService(store, embedder=HashingEmbedder(64)).search(query)
    assert "acme/2026-03" in result.unindexed_partitions
    build_indexes(store, model="hashing-64")
    clean(audit_lake(settings.lake))
    assert SearchService(store, embedder=HashingEmbedder(64)).search(query).hits
