"""A recording server on an ``s3://`` lake whose object store fails a share of the PUTs and
GETs (503 Slow Down, or the connection dropped without an answer): the clients' retries with
backoff carry every turn through, none is lost or stored twice, and every one is found. And
one whose store goes down for good, then comes back: the host is told, with the cause, that
its turn was not accepted; nothing acknowledged is lost; recording resumes by itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake.keys import KeyStore
from tests.faulty_proxy import FaultyProxy
from tests.pipeline.service.server import Server, make_keys, server_env, wait_until
from tests.reliability.lake_audit import key_of, turn_record
from tests.s3_server import aws_env, new_bucket, s3_config, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture, imported for pytest

REQUESTS = 4
PER_REQUEST = 3


def _s3_lake(s3_endpoint: str) -> tuple[str, dict[str, str]]:
    """A new ``s3://`` lake on the test server, and its keys by role."""
    lake = f"s3://{new_bucket(s3_endpoint)}/lake"
    return lake, make_keys(lake, KeyStore(lake, s3=s3_config(s3_endpoint)))


def _env(proxy: FaultyProxy, tmp_path: Path) -> dict[str, str]:
    """A server's environment reaching the store through ``proxy``."""
    return {**server_env(), **aws_env(proxy.url), "TURNLAKE_CACHE": str(tmp_path / "cache")}


@pytest.mark.slow
def test_a_failing_share_of_object_store_requests_loses_and_doubles_nothing(
        s3_endpoint: str, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    lake, keys = _s3_lake(s3_endpoint)
    proxy = FaultyProxy(s3_endpoint, error_share=0.15, drop_share=0.05)
    with proxy, Server(lake, env=_env(proxy, tmp_path)) as server:
        sent = []
        with server.client(keys["recorder"]) as client:
            for r in range(REQUESTS):
                records = [turn_record(r * PER_REQUEST + i, conversation="c-s3")
                           for i in range(PER_REQUEST)]
                answer = client.post("/v1/turns", json={"turns": records})
                # On an object store the answer comes after the commit: the faults are
                # retried under it, not seen by the host.
                assert answer.status_code == 200, f"{answer.text}\n{server.log_tail()}"
                assert answer.json()["accepted"] == PER_REQUEST, answer.text
                sent += [key_of(rec) for rec in records]
        assert proxy.counts["errors"] > 0 and proxy.counts["dropped"] > 0, proxy.counts
        with server.client(keys["analyst"]) as client:
            turns = client.get("/v1/catalog", params={"conversation": "c-s3"}).json()
            stored = sorted(("acme", t["conversation_id"], t["turn_id"])
                            for t in turns["turns"])
            assert stored == sorted(sent)  # each once, none lost

            def found(marker: str) -> bool:
                answer = client.post("/v1/search", json={"query": marker,
                                                         "scope": "tenant"})
                assert answer.status_code == 200, answer.text
                return any(h["text"].startswith(marker) for h in answer.json()["hits"])

            last = f"mk{REQUESTS * PER_REQUEST - 1}"
            assert wait_until(lambda: found(last), timeout_s=120), server.log_tail()


@pytest.mark.slow
def test_an_object_store_that_stays_down_refuses_with_its_cause_and_loses_nothing(
        s3_endpoint: str, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    lake, keys = _s3_lake(s3_endpoint)

    def body(n: int) -> dict[str, object]:
        return {"turns": [turn_record(n, conversation="c-down")]}

    with FaultyProxy(s3_endpoint) as proxy, Server(lake, env=_env(proxy, tmp_path)) as server:
        with server.client(keys["recorder"]) as client:
            first = client.post("/v1/turns", json=body(0))
            assert first.status_code == 200, f"{first.text}\n{server.log_tail()}"
            proxy.down = True  # every PUT and GET answered 503 Slow Down from now on
            # the store's client retries with backoff, then the host is told why
            down = client.post("/v1/turns", json=body(1), timeout=600)
            assert down.status_code == 503, f"{down.text}\n{server.log_tail()}"
            error = down.json()["error"]
            assert error["code"] == "lake_unavailable"
            assert lake in error["message"] and "SlowDown" in error["message"]
            assert proxy.counts["errors"] > 0
            proxy.down = False
            again = client.post("/v1/turns", json=body(2), timeout=600)
            assert again.status_code == 200, f"{again.text}\n{server.log_tail()}"
            assert again.json()["accepted"] == 1
        with server.client(keys["analyst"]) as client:
            turns = client.get("/v1/catalog", params={"conversation": "c-down"}).json()
    # the acknowledged turns, each once; the refused one was never promised
    assert sorted(t["turn_id"] for t in turns["turns"]) == ["t-0000", "t-0002"]
