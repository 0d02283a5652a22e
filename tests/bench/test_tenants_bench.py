from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

import bench.run as run
from bench.tenants_bench import bench_tenants, spread_lines

matplotlib.use("Agg")


def test_each_conversation_moves_whole_to_one_of_the_tenants() -> None:
    records = [json.loads(line) for line in spread_lines(7)]
    tenant_of: dict[str, set[str]] = {}
    for record in records:
        tenant_of.setdefault(record["conversation_id"], set()).add(record["tenant"])
    assert all(len(tenants) == 1 for tenants in tenant_of.values())
    assert {t for tenants in tenant_of.values() for t in tenants} <= {f"t{i:04d}" for i in range(7)}
    assert len({r["tenant"] for r in records}) > 3


def test_a_small_run_measures_every_figure() -> None:
    figures = bench_tenants(4, queries=8, writes=2)
    assert figures["tenants"] == 4 and figures["partitions"] >= 4
    assert figures["search_p50_ms"] > 0
    assert figures["check"]["one_tenant_ms"] > 0 and figures["check"]["whole_lake_ms"] > 0
    assert figures["after_write"]["search_ms"] > 0
    assert figures["after_write"]["whole_lake_reread_ms"] > 0
    assert figures["after_write"]["writes"] == 2 and figures["live_index_step_ms"] > 0


def test_the_many_tenants_plot_draws_each_figure(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    figures = {"tenants": 300, "partitions": 1012, "search_p50_ms": 1.8,
               "check": {"one_tenant_ms": 0.4, "whole_lake_ms": 7.3, "ratio": 18.3},
               "after_write": {"search_ms": 10.3, "whole_lake_reread_ms": 81.0, "ratio": 7.9,
                               "writes": 12}}
    assert run.plot({"many_tenants": figures}) == ["many_tenants.png"]
    assert (tmp_path / "many_tenants.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
