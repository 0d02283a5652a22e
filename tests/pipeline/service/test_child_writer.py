"""The service's writer and indexer in child processes: the same outcomes as in process,
and a dead child is replaced rather than taking the writer down."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from lake.errors import LakeError
from lake.index.status import partition_statuses
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.service.acceptor import ChildAcceptor
from pipeline.service.child_writer import ChildWriter
from pipeline.service.spool import recover_orphans
from pipeline.service.writer import GroupWriter
from tests.reliability.lake_audit import key_of, turn_record


def _child_pid(writer: ChildWriter) -> int:
    processes = writer._pool._processes  # the one worker of the pool
    assert processes is not None and len(processes) == 1
    return next(iter(processes))


def _kill(pid: int) -> None:
    """SIGKILL a child and wait (bounded) until it is gone."""
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_a_group_writer_with_children_records_and_indexes(hashing_settings: Settings) -> None:
    writer = GroupWriter(hashing_settings, embedder=None, index=True, child=True)
    writer.start()
    try:
        records = [turn_record(n, conversation=f"c-{n % 2}") for n in range(4)]
        lines = [orjson.dumps(r).decode() for r in records]
        first = writer.submit(lines, [key_of(r) for r in records]).result(timeout=120)
        again = writer.submit(lines[:1], [key_of(records[0])]).result(timeout=120)
        bad = writer.submit(['{"schema": "turnlake.turn.v1"}'], [None]).result(timeout=120)
    finally:
        writer.close()  # waits for the indexer to publish what was committed
    assert [o.status for o in first] == ["accepted"] * 4
    assert [o.status for o in again] == ["duplicate"]
    assert bad[0].status == "rejected"
    store = LakeStore(hashing_settings.lake)
    assert store.read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 4
    assert all(s.freshness == "fresh" for s in partition_statuses(store).values())


def test_a_killed_child_fails_one_call_and_the_next_gets_a_new_child(
        hashing_settings: Settings) -> None:
    child = ChildWriter(hashing_settings, embed=False)
    try:
        lines = [orjson.dumps(turn_record(n)).decode() for n in range(3)]
        report = child.ingest(lines[:1], source="<test>")
        assert report.accepted == 1 and report.kept == {key_of(turn_record(0))}
        pid = _child_pid(child)
        _kill(pid)
        with pytest.raises(LakeError, match="writer process died"):
            child.ingest(lines[1:2], source="<test>")
        report = child.ingest(lines[1:], source="<test>")
        assert report.accepted == 2 and _child_pid(child) != pid
        assert report.kept == {key_of(turn_record(1)), key_of(turn_record(2))}
    finally:
        child.close()


def test_a_killed_acceptor_fails_one_group_and_the_next_gets_a_new_spool(
        hashing_settings: Settings) -> None:
    writer = GroupWriter(hashing_settings, embedder=None, index=False, child=True)
    writer.start()
    records = [turn_record(n) for n in range(3)]
    lines = [orjson.dumps(r).decode() for r in records]
    try:
        first = writer.submit(lines[:1], [key_of(records[0])]).result(timeout=120)
        acceptor = writer._acceptor
        assert isinstance(acceptor, ChildAcceptor)
        pid = next(iter(acceptor._pool._processes or {}))
        _kill(pid)
        with pytest.raises(LakeError, match="accepts recordings died"):
            writer.submit(lines[1:2], [key_of(records[1])]).result(timeout=120)
        again = writer.submit(lines[1:], [key_of(r) for r in records[1:]]).result(timeout=120)
        assert writer.flush(timeout_s=120)
    finally:
        writer.close()
    assert [o.status for o in first + again] == ["accepted"] * 3
    lake = Path(str(hashing_settings.lake))
    # The dead acceptor's spool is left behind; its group was committed from memory, so a
    # recovery finds it stored and adds nothing.
    assert recover_orphans(hashing_settings).groups == 1
    logs = LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"])
    assert sorted(logs["turn_id"].to_pylist()) == ["t-0000", "t-0001", "t-0002"]
    assert not list(lake.glob("_spool/*/g*.json"))
