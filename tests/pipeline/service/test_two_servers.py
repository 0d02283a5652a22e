"""Two ``turnlake serve`` processes over one lake (a folder, or an s3:// bucket with a cache
of its own per server) recording and searching at once: every acknowledged turn is stored
once and is found through both servers."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from lake.keys import KeyStore
from tests.pipeline.service.server import Server, make_keys, server_env, wait_until
from tests.reliability.lake_audit import TurnKey, audit_lake, key_of, turn_record
from tests.s3_server import aws_env, new_bucket, s3_config, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture, imported for pytest
REQUESTS = 4
PER_REQUEST = 10


def _record(server: Server, key: str, writer: int, acked: set[TurnKey],
            lock: threading.Lock, requests: int) -> None:
    with server.client(key) as client:
        for r in range(requests):
            records = [turn_record(writer * 1000 + r * PER_REQUEST + i,
                                   conversation=f"c-w{writer}") for i in range(PER_REQUEST)]
            answer = client.post("/v1/turns", json={"turns": records})
            assert answer.status_code == 200, answer.text
            assert answer.json()["accepted"] == PER_REQUEST, answer.text
            with lock:
                acked.update(key_of(rec) for rec in records)


def _search(server: Server, key: str, done: threading.Event, errors: list[str]) -> None:
    with server.client(key) as client:
        # A pause between searches, as between an agent's questions: back to back, two
        # searchers took most of the 2 cores from the writers and tripled the test's time.
        while not done.wait(0.2):
            answer = client.post("/v1/search", json={"query": "forecast", "scope": "tenant"})
            if answer.status_code != 200:
                errors.append(f"{answer.text}\n{server.log_tail()}")
                return


def _finds(server: Server, client: httpx.Client, marker: str) -> bool:
    answer = client.post("/v1/search", json={"query": marker, "scope": "tenant"})
    assert answer.status_code == 200, f"{answer.text}\n{server.log_tail()}"
    return any(h["text"].startswith(marker) for h in answer.json()["hits"])


def _stored(client: httpx.Client) -> list[TurnKey]:
    stored: list[TurnKey] = []
    for w in range(4):
        turns = client.get("/v1/catalog", params={"conversation": f"c-w{w}"}).json()["turns"]
        stored += [("acme", t["conversation_id"], t["turn_id"]) for t in turns]
    return stored


def _run_two(servers: tuple[Server, Server], keys: dict[str, str], requests: int = REQUESTS
             ) -> set[TurnKey]:
    acked: set[TurnKey] = set()
    lock, done, errors = threading.Lock(), threading.Event(), []
    writers = [threading.Thread(target=_record, args=(servers[w % 2], keys["recorder"], w,
                                                      acked, lock, requests))
               for w in range(4)]
    searchers = [threading.Thread(target=_search, args=(s, keys["analyst"], done, errors))
                 for s in servers]
    for thread in (*writers, *searchers):
        thread.start()
    for thread in writers:
        thread.join(timeout=300)
    done.set()
    for thread in searchers:
        thread.join(timeout=60)
    assert not errors, errors[:3]
    assert len(acked) == 4 * requests * PER_REQUEST
    for server in servers:
        with server.client(keys["analyst"]) as client:
            # At once: a read waits until what either server answered is committed.
            assert sorted(_stored(client)) == sorted(acked)  # each once, none lost
            for w in range(4):
                last = f"mk{w * 1000 + requests * PER_REQUEST - 1}"
                assert wait_until(lambda q=last, s=server: _finds(s, client, q), timeout_s=120), \
                    f"{last} is not searchable through {server.url}"
    return acked


@pytest.mark.slow
def test_two_servers_on_one_local_lake(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    with Server(lake) as a, Server(lake) as b:
        acked = _run_two((a, b), keys)
    audit = audit_lake(lake)
    assert not audit.problems, audit.problems[:10]
    assert all(audit.turns[k] == 1 for k in acked)


@pytest.mark.slow
def test_two_servers_on_one_s3_lake(s3_endpoint: str, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    lake = f"s3://{new_bucket(s3_endpoint)}/team/lake"
    keys = make_keys(lake, KeyStore(lake, s3=s3_config(s3_endpoint)))
    envs = [{**server_env(), **aws_env(s3_endpoint), "TURNLAKE_CACHE": str(tmp_path / f"c{n}")}
            for n in range(2)]
    with Server(lake, env=envs[0]) as a, Server(lake, env=envs[1]) as b:
        # Fewer turns: every commit and index build goes through the S3 test server.
        _run_two((a, b), keys, requests=2)
