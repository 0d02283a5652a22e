"""`turnlake serve --memory-budget`: a server keeps its partition indexes within the budget,
reports what its searches had to open in /metrics, and answers as without a budget."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.pipeline.service.server import ROOT, Server, make_keys, server_env, wait_until
from tests.reliability.lake_audit import turn_record


def _metric(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def _hits(server: Server, key: str) -> list[tuple[str, str]]:
    with server.client(key) as client:
        answer = client.post("/v1/search", json={"query": "forecast", "scope": "tenant",
                                                 "max_per_conversation": 0})
        assert answer.status_code == 200, answer.text
        return [(h["conversation_id"], h["turn_id"]) for h in answer.json()["hits"]]


def test_a_server_within_a_budget_reopens_partitions_and_counts_them(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    with Server(lake, "--memory-budget", "1") as server:  # one partition open at most
        for recorder, record in (("recorder", turn_record(0)),
                                 ("zeta_recorder", turn_record(200, tenant="zeta",
                                                               user="u-zed",
                                                               conversation="c-9"))):
            with server.client(keys[recorder]) as client:
                assert client.post("/v1/turns", json={"turns": [record]}).status_code == 200
        assert wait_until(lambda: len(_hits(server, keys["analyst"])) == 1
                          and len(_hits(server, keys["zeta_admin"])) == 1, timeout_s=60), \
            server.log_tail()
        opened = _metric(server, "turnlake_search_partitions_opened_total")
        acme, zeta = _hits(server, keys["analyst"]), _hits(server, keys["zeta_admin"])
        assert acme == [("c-1", "t-0000")] and zeta == [("c-9", "t-0200")]
        # each tenant's search had to open its partition again: the other's closed it
        assert _metric(server, "turnlake_search_partitions_opened_total") == opened + 2
        assert _metric(server, "turnlake_search_partitions_closed_total") >= 2
        assert _metric(server, "turnlake_search_partitions_open") == 1
        assert _metric(server, "turnlake_search_open_bytes") > 0


def test_a_bad_budget_is_refused_before_serving(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", "--lake",
                           str(tmp_path / "lake"), "--memory-budget", "lots"],
                          env=server_env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert "memory budget 'lots' is not a size" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
