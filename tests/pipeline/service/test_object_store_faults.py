"""A recording server on an ``s3://`` lake whose object store fails a share of the PUTs and
GETs (503 Slow Down, or the connection dropped without an answer): the clients' retries with
backoff carry every turn through, none is lost or stored twice, and every one is found."""

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


@pytest.mark.slow
def test_a_failing_share_of_object_store_requests_loses_and_doubles_nothing(
        s3_endpoint: str, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    lake = f"s3://{new_bucket(s3_endpoint)}/lake"
    keys = make_keys(lake, KeyStore(lake, s3=s3_config(s3_endpoint)))
    with FaultyProxy(s3_endpoint, error_share=0.15, drop_share=0.05) as proxy:
        env = {**server_env(), **aws_env(proxy.url), "TURNLAKE_CACHE": str(tmp_path / "cache")}
        with Server(lake, env=env) as server:
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
