"""A server that answers from its spool still reads and erases what it answered: a turn is
there the moment its answer came, and an erasure right after the answer is not undone by the
commit that follows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipeline.service.server import Server, make_keys
from tests.reliability.lake_audit import turn_record


@pytest.mark.slow
def test_answered_turns_are_read_and_erased_at_once(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    with Server(lake) as server, server.client(keys["recorder"]) as recorder, \
            server.client(keys["admin"]) as admin:
        for round_no in range(3):
            conversation = f"c-r{round_no}"
            records = [turn_record(round_no * 100 + i, conversation=conversation)
                       for i in range(20)]
            answer = recorder.post("/v1/turns", json={"turns": records})
            assert answer.json()["accepted"] == 20, answer.text
            erased = admin.delete(f"/v1/conversations/{conversation}")  # right after: no read
            assert erased.status_code == 200, erased.text
            # And a turn is readable the moment its answer came.
            read = turn_record(round_no * 100 + 50, conversation=f"c-read{round_no}")
            assert recorder.post("/v1/turns", json=read).json()["accepted"] == 1
            shown = admin.get(f"/v1/conversations/c-read{round_no}/turns/{read['turn_id']}")
            assert shown.status_code == 200, shown.text
        # Later commits (of other turns) bring none of the erased ones back.
        assert recorder.post("/v1/turns", json=turn_record(999, conversation="c-x")
                             ).json()["accepted"] == 1
        for round_no in range(3):
            listed = admin.get("/v1/catalog", params={"conversation": f"c-r{round_no}"})
            assert listed.status_code == 200, listed.text
            assert listed.json()["turns"] == []
        assert len(admin.get("/v1/catalog", params={"conversation": "c-x"}).json()["turns"]) == 1
