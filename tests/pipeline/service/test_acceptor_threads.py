"""The in-process acceptor is called from two threads: the group writer decides on one and
reports commits from the other. A commit reported while a group is being decided must not
lose that group's pending turns."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson

from lake.settings import Settings
from pipeline.service.acceptor import SpoolAcceptor
from tests.reliability.lake_audit import turn_record


def _line(turn: int) -> str:
    return orjson.dumps(turn_record(turn, conversation="c-1")).decode()


def test_a_commit_reported_while_a_group_is_decided_keeps_that_groups_turns_pending(
        tmp_path: Path) -> None:
    acceptor = SpoolAcceptor(Settings(lake=tmp_path / "lake", embedding_model="hashing-64"))
    try:
        assert acceptor.accept([_line(1)], source="first").kept
        rebuild = acceptor._pending_turns
        inside, decided = threading.Event(), threading.Event()

        def rebuilt_slowly() -> object:
            # the committer thread reads the pending groups, then a decision lands before it
            # stores what it read (as a busy machine may schedule them)
            pending = rebuild()
            if threading.current_thread().name == "committer":
                inside.set()
                decided.wait(timeout=1.0)  # with the lock, the decision waits for this call
            return pending

        acceptor._pending_turns = rebuilt_slowly  # type: ignore[method-assign]
        committer = threading.Thread(target=acceptor.committed, args=(1,), name="committer")
        committer.start()
        assert inside.wait(timeout=30)
        second = acceptor.accept([_line(2)], source="second")
        decided.set()
        committer.join(timeout=30)
        assert second.kept
        # the second group is not committed yet: its turn recorded again is a duplicate
        again = acceptor.accept([_line(2)], source="again")
        assert not again.kept
    finally:
        acceptor.close()
