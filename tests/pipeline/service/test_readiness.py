"""Recovery before readiness: a starting server commits what a dead server acknowledged and
makes it searchable before ``/readyz`` answers 200; ``/healthz`` answers all along."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import orjson

from lake.settings import Settings
from lake.store import Partition
from pipeline.live import LiveWriter
from pipeline.service.spool import Recovered, Spool, SpooledGroup
from pipeline.service.startup import StartUp
from tests.pipeline.service.server import Server, make_keys, server_env, wait_until
from tests.reliability.lake_audit import turn_record


def _dead_spool(lake: Path, groups: list[list[int]]) -> None:
    """A spool as a kill -9 leaves it: acknowledged groups on disk, its lock gone."""
    spool = Spool.create(lake)
    for seq, numbers in enumerate(groups, start=1):
        spool.append(SpooledGroup(seq, f"<api g{seq}>",
                                  [orjson.dumps(turn_record(n)).decode() for n in numbers]))
    spool._lock.close()


def test_a_dead_servers_acknowledged_turns_are_searchable_once_ready(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    # The partition is indexed before the crash: the recovered turns must not leave it stale.
    settings = Settings(lake=lake, embedding_model="hashing-64")
    live = LiveWriter(settings)
    live.record([turn_record(0)])
    # A server killed between a commit and its index step: turn 4 (another month) is
    # committed, its partition never indexed.
    live.ingest([turn_record(4, month=5)])
    _dead_spool(lake, [[1, 2], [3]])
    with Server(lake, env=server_env()) as server:  # started: /readyz answered 200
        ready = httpx.get(f"{server.url}/readyz").json()
        assert ready["status"] == "ready"
        assert ready["readiness"]["recovered_groups"] == 2
        assert ready["readiness"]["partitions_to_index"] == 2
        with server.client(keys["analyst"]) as analyst:
            for n in (0, 1, 2, 3, 4):  # no waiting: readiness promised them
                answer = analyst.post("/v1/search", json={"query": f"mk{n}",
                                                          "scope": "tenant"}).json()
                assert [h["turn_id"] for h in answer["hits"]][:1] == [f"t-{n:04d}"], answer
                assert not any("stale" in w for w in answer.get("warnings", [])), answer
        health = httpx.get(f"{server.url}/healthz").json()
        assert health["status"] == "ok" and health["readiness"]["ready"]
        assert health["backlog"]["uncommitted_turns"] == 0
        metrics = httpx.get(f"{server.url}/metrics").text
        assert "turnlake_recovered_groups 2.0" in metrics
        assert "turnlake_startup_seconds" in metrics
        assert "turnlake_writer_queued_requests" in metrics
    assert not list((lake / "_spool").rglob("g*.json"))


def test_readiness_waits_for_recovery_and_its_index_step() -> None:
    release = threading.Event()
    index_tries: list[set[Partition]] = []
    part: Partition = ("acme", "2026-03")

    def recover() -> Recovered:
        release.wait(30)
        return Recovered(3, frozenset({part}))

    def index(partitions: set[Partition]) -> None:
        index_tries.append(partitions)
        if len(index_tries) == 1:
            raise OSError(28, "No space left on device")

    startup = StartUp(recover=recover, index=index, warm=lambda: None, stopped=lambda: False)
    assert startup.readiness.phase == "starting" and not startup.readiness.ready
    runner = threading.Thread(target=lambda: startup.recover() and startup.finish())
    runner.start()
    assert wait_until(lambda: startup.readiness.phase == "recovering", timeout_s=10)
    assert not startup.readiness.ready
    release.set()
    assert wait_until(lambda: startup.readiness.problem is not None
                      or startup.readiness.ready, timeout_s=10)
    if not startup.readiness.ready:  # the first index try failed: the reason is shown
        assert "No space left on device" in (startup.readiness.problem or "")
    runner.join(30)
    state = startup.readiness
    assert state.ready and state.phase == "ready" and state.problem is None
    assert state.recovered_groups == 3 and state.partitions_to_index == 1
    assert index_tries == [{part}, {part}]


def test_a_stopped_start_up_never_says_ready() -> None:
    stop = threading.Event()

    def recover() -> Recovered:
        stop.set()
        raise OSError("the lake is unreachable")

    startup = StartUp(recover=recover, index=None, warm=lambda: None, stopped=stop.is_set)
    assert startup.recover() is False
    assert not startup.readiness.ready
    assert "the lake is unreachable" in (startup.readiness.problem or "")


def test_healthz_answers_while_the_start_up_runs(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    make_keys(lake)
    _dead_spool(lake, [[1]])
    server = Server(lake, env=server_env()).start(ready=False)
    try:
        seen: set[int] = set()
        # Bounded: until ready; every answer on the way is 200 (alive) or 503 (starting).
        assert wait_until(lambda: seen.add(httpx.get(f"{server.url}/readyz").status_code)
                          or 200 in seen, timeout_s=120), server.log_tail()
        assert seen <= {200, 503}
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    finally:
        server.stop()
