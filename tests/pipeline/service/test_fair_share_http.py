"""The per-key fair share against a real ``turnlake serve``: while one key sends large turns
back to back, another key's recordings keep flowing, and every turn of both is stored once
and found."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from lake.keys import KeyStore
from lake.store import LakeStore
from lake.tables import Table
from tests.pipeline.service.server import Server, server_env, wait_until
from tests.reliability.lake_audit import turn_record

LARGE_TURNS = 4
SMALL_TURNS = 8


def test_another_keys_turns_flow_while_one_key_sends_large_turns(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = KeyStore(lake)
    big = keys.create(tenant="acme", role="recorder", name="big")[1]
    small = keys.create(tenant="acme", role="recorder", name="small")[1]
    analyst = keys.create(tenant="acme", role="analyst")[1]
    events: list[str] = []  # the order the answers came in
    lock = threading.Lock()
    with Server(lake, "--no-embed", env=server_env()) as server:

        def send_large() -> None:
            with server.client(big) as http:
                for n in range(LARGE_TURNS):
                    record = turn_record(100 + n, conversation=f"c-big-{n}")
                    # 3 MB of words: past the 1 MiB share, seconds to index.
                    record["completion"]["text"] = f"mk{100 + n} " + " ".join(
                        f"deploy{i % 5000}" for i in range(330_000))
                    answer = http.post("/v1/turns", json=record)
                    assert answer.status_code == 200, answer.text
                    with lock:
                        events.append(f"big {answer.json()['accepted']} {time.monotonic():.1f}")

        sender = threading.Thread(target=send_large)
        sender.start()
        try:
            with server.client(small) as http:
                assert wait_until(lambda: bool(events), timeout_s=120)  # the first is in
                for n in range(SMALL_TURNS):
                    answer = http.post("/v1/turns", json=turn_record(
                        n, conversation=f"c-small-{n}"))
                    assert answer.json()["accepted"] == 1, answer.text
                    backlog = httpx.get(f"{server.url}/healthz").json()["backlog"]
                    with lock:  # the time and backlog: read in a failure's message
                        events.append(f"small {time.monotonic():.1f} {backlog}")
        finally:
            sender.join(600)
        assert not sender.is_alive()
        # The small key's turns did not each wait for one of the large key's: all of them
        # were answered before the large key's last turn (one a large turn's cycle without
        # the fair share). (The large key's pause for its share: test_fair_share.py.)
        last_big = max(i for i, e in enumerate(events) if e.startswith("big"))
        assert not any(e.startswith("small") for e in events[last_big + 1:]), "\n".join(events)
        with server.client(analyst) as search:
            def found(marker: str) -> bool:
                hits = search.post("/v1/search", json={"query": marker, "scope": "tenant",
                                                       "k": 1}).json()["hits"]
                return bool(hits) and marker in str(hits[0])

            for n in [*range(SMALL_TURNS), *range(100, 100 + LARGE_TURNS)]:
                assert wait_until(lambda n=n: found(f"mk{n}"), timeout_s=120), n
    logs = LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"])
    assert logs.num_rows == SMALL_TURNS + LARGE_TURNS
    assert len(set(logs["turn_id"].to_pylist())) == logs.num_rows
