"""Chaos of the live path: recorders and searchers against a server killed with SIGKILL at
random moments and restarted each time; every acknowledged turn is stored exactly once and
searchable within 2 s of ``/readyz``. Two servers on one lake: one killed, the other keeps
answering."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.pipeline.service.server import Server, make_keys
from tests.reliability.lake_audit import TurnKey, audit_lake, key_of, turn_record

RECORDERS = 8
SEARCHERS = 2
KILLS = 5
LOAD_S = 60.0
PER_REQUEST = 3
FOUND_WITHIN_S = 2.0


class _Target:
    """The server the clients talk to now (None between a kill and the next start)."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.lock = threading.Lock()
        self.acked: set[TurnKey] = set()
        self.errors: list[str] = []


def _recorder(target: _Target, key: str, client: int, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set() and n < 1_000_000:
        url = target.url
        if url is None:
            time.sleep(0.05)
            continue
        records = [turn_record(client * 1_000_000 + n + i, conversation=f"c-x{client}")
                   for i in range(PER_REQUEST)]
        try:
            answer = httpx.post(f"{url}/v1/turns", json={"turns": records}, timeout=60,
                                headers={"Authorization": f"Bearer {key}"})
        except httpx.TransportError:
            continue  # killed under the request: it may or may not be in; sent again later
        if answer.status_code == 200:
            with target.lock:
                target.acked.update(key_of(r) for r in records)
            n += PER_REQUEST
        elif answer.status_code != 503:  # 503: the server is going away or starting
            with target.lock:
                target.errors.append(answer.text[:300])


def _searcher(target: _Target, key: str, stop: threading.Event) -> None:
    rng = random.Random(11)
    while not stop.is_set():
        url = target.url
        if url is None:
            time.sleep(0.05)
            continue
        try:
            answer = httpx.post(f"{url}/v1/search", timeout=60, json={
                "query": f"mk{rng.randrange(10_000)} forecast", "scope": "tenant"},
                headers={"Authorization": f"Bearer {key}"})
        except httpx.TransportError:
            continue
        if answer.status_code not in (200, 503):
            with target.lock:
                target.errors.append(answer.text[:300])


def _found_within(server: Server, key: str, turns: list[TurnKey], seconds: float) -> list[TurnKey]:
    """The turns of ``turns`` not found by search within ``seconds`` (one search each, then
    again while time is left)."""
    missing = list(turns)
    deadline = time.monotonic() + seconds
    with server.client(key) as client:
        while missing:
            missing = [k for k in missing if k[2] not in [h["turn_id"] for h in client.post(
                "/v1/search", json={"query": f"mk{int(k[2].removeprefix('t-'))}",
                                    "scope": "tenant"}).json()["hits"]]]
            if time.monotonic() > deadline:
                break
    return missing


@pytest.mark.slow
def test_recorders_and_searchers_through_five_kills(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    target, stop = _Target(), threading.Event()
    threads = [threading.Thread(target=_recorder, args=(target, keys["recorder"], c, stop))
               for c in range(RECORDERS)]
    threads += [threading.Thread(target=_searcher, args=(target, keys["analyst"], stop))
                for _ in range(SEARCHERS)]
    rng = random.Random(5)
    for thread in threads:
        thread.start()
    try:
        for _ in range(KILLS):
            server = Server(lake).start()
            try:
                ready_at = time.monotonic()
                with target.lock:
                    before = sorted(target.acked)
                sample = rng.sample(before, min(len(before), 12))
                assert not _found_within(server, keys["analyst"], sample,
                                         FOUND_WITHIN_S - (time.monotonic() - ready_at))
                target.url = server.url
                time.sleep(rng.uniform(0.4, 2.0) * LOAD_S / KILLS)
                target.url = None
                server.kill()
            finally:
                target.url = None
                server.stop()  # a failed check leaves no server behind
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=90)
    assert not target.errors, target.errors[:5]
    with Server(lake) as last:
        acked = sorted(target.acked)
        assert len(acked) >= RECORDERS * PER_REQUEST
        assert not _found_within(last, keys["analyst"], rng.sample(acked, 20), FOUND_WITHIN_S)
    audit = audit_lake(lake)
    assert not audit.problems, audit.problems[:10]
    assert not set(acked) - audit.keys, sorted(set(acked) - audit.keys)[:10]
    assert all(audit.turns[k] == 1 for k in acked)


@pytest.mark.slow
def test_one_of_two_servers_killed_the_other_keeps_answering(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    acked: set[TurnKey] = set()
    with Server(lake) as a, Server(lake) as b:
        for server, n in ((a, 0), (b, 100)):
            with server.client(keys["recorder"]) as client:
                records = [turn_record(n + i, conversation=f"c-{n}") for i in range(5)]
                assert client.post("/v1/turns", json={"turns": records}).status_code == 200
                acked.update(key_of(r) for r in records)
        a.kill()
        with b.client(keys["recorder"]) as client, b.client(keys["analyst"]) as analyst:
            for n in range(200, 220):
                record = turn_record(n, conversation="c-200")
                assert client.post("/v1/turns", json=record).status_code == 200
                acked.add(key_of(record))
                assert analyst.post("/v1/search", json={"query": "forecast",
                                                        "scope": "tenant"}).status_code == 200
        assert not _found_within(b, keys["analyst"], sorted(acked)[-3:], 30.0)
    with Server(lake) as again:  # commits whatever the killed one left
        assert not _found_within(again, keys["analyst"], sorted(acked), FOUND_WITHIN_S)
    audit = audit_lake(lake)
    assert not audit.problems, audit.problems[:10]
    assert all(audit.turns[k] == 1 for k in acked)
