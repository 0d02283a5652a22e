"""A recording server on an ``s3://`` lake whose object store goes down for good, then comes
back: the host is told, with the cause, that its turn was not accepted; nothing acknowledged
is lost; recording resumes by itself once the store answers again."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake.keys import KeyStore
from tests.faulty_proxy import FaultyProxy
from tests.pipeline.service.server import Server, make_keys, server_env
from tests.reliability.lake_audit import turn_record
from tests.s3_server import aws_env, new_bucket, s3_config, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture, imported for pytest


@pytest.mark.slow
def test_an_object_store_that_stays_down_refuses_with_its_cause_and_loses_nothing(
        s3_endpoint: str, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    lake = f"s3://{new_bucket(s3_endpoint)}/lake"
    keys = make_keys(lake, KeyStore(lake, s3=s3_config(s3_endpoint)))

    def body(n: int) -> dict[str, object]:
        return {"turns": [turn_record(n, conversation="c-down")]}

    with FaultyProxy(s3_endpoint) as proxy:
        env = {**server_env(), **aws_env(proxy.url), "TURNLAKE_CACHE": str(tmp_path / "cache")}
        with Server(lake, env=env) as server:
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
