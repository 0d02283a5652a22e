"""kill -9 of a recording server: after a restart every acknowledged turn is there exactly
once, no half turn is visible, and the reliability suite's lake audit passes."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.pipeline.service.server import Server, make_keys, wait_until
from tests.reliability.lake_audit import TurnKey, audit_lake, key_of, turn_record

CLIENTS = 4
PER_REQUEST = 10
ACKED_BEFORE_KILL = 120


def _record_until_killed(server: Server, key: str, client_no: int, acked: set[TurnKey],
                         lock: threading.Lock, stop: threading.Event) -> None:
    with server.client(key) as client:
        n = 0
        while not stop.is_set() and n < 100_000:
            records = [turn_record(client_no * 100_000 + n + i, conversation=f"c-k{client_no}",
                                   rich=(n + i) % 7 == 0) for i in range(PER_REQUEST)]
            n += PER_REQUEST
            try:
                answer = client.post("/v1/turns", json={"turns": records})
            except httpx.TransportError:
                return  # the server is gone; what was not acknowledged may or may not be in
            assert answer.status_code == 200, answer.text
            assert answer.json()["accepted"] == PER_REQUEST
            with lock:
                acked.update(key_of(r) for r in records)


@pytest.mark.slow
def test_kill_9_while_clients_record(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    acked: set[TurnKey] = set()
    lock, stop = threading.Lock(), threading.Event()
    server = Server(lake).start()
    try:
        clients = [threading.Thread(target=_record_until_killed,
                                    args=(server, keys["recorder"], c, acked, lock, stop))
                   for c in range(CLIENTS)]
        for thread in clients:
            thread.start()
        assert wait_until(lambda: len(acked) >= ACKED_BEFORE_KILL, timeout_s=180)
        children = server.children()
        server.kill()
        # Its index builder child dies with it (no orphan holding a model's memory).
        assert wait_until(lambda: not any(Path(f"/proc/{c}").exists() for c in children),
                          timeout_s=30), children
    finally:
        stop.set()
        server.stop()
    for thread in clients:
        thread.join(timeout=60)
    assert len(acked) >= ACKED_BEFORE_KILL
    with Server(lake) as again, again.client(keys["recorder"]) as client:
        # Ready means the killed server's acknowledged turns are committed and searchable:
        # a sample of them is found at once, and no partition is stale.
        with again.client(keys["analyst"]) as analyst:
            for key in sorted(acked)[::max(len(acked) // 8, 1)]:
                answer = analyst.post("/v1/search", json={
                    "query": f"mk{int(key[2].removeprefix('t-'))}", "scope": "tenant"}).json()
                assert key[2] in [h["turn_id"] for h in answer["hits"]], (key, answer)
                assert not any("stale" in w for w in answer["warnings"]), answer["warnings"]
        last = turn_record(999_999, conversation="c-after")
        assert client.post("/v1/turns", json=last).json()["accepted"] == 1
        with again.client(keys["analyst"]) as analyst:
            assert wait_until(lambda: any(h["turn_id"] == "t-999999" for h in analyst.post(
                "/v1/search", json={"query": "mk999999", "scope": "tenant"}).json()["hits"]),
                timeout_s=120)
    # The killed server's spool (turns it answered before committing them) was committed by
    # the restarted one, and the restarted one emptied its own when it stopped.
    assert not [p for p in (lake / "_spool").rglob("g*.json")]
    audit = audit_lake(lake)
    assert not audit.problems, audit.problems[:10]
    assert not audit.pending
    missing = acked - audit.keys
    assert not missing, sorted(missing)[:10]
    assert all(audit.turns[k] == 1 for k in acked)
