"""The search latency plot: one per run mode, named by the lakes it draws."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

import bench.run as run

matplotlib.use("Agg")


def _section(p50: float) -> dict[str, object]:
    return {"rows": 1000, "index_build_s": 1.0,
            **{f"{scope}/{arm}": {"p50_ms": p50, "p95_ms": 2 * p50, "p99_ms": 3 * p50}
               for scope in ("user", "tenant") for arm in ("hybrid", "semantic")}}


def test_the_quick_and_the_full_run_each_keep_their_own_latency_plot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    quick = run.plot({"scale_100k": _section(4.0), "scale_100k_clustered": _section(5.0)})
    full = run.plot({"scale_1m": _section(6.0), "scale_1m_clustered": _section(7.0),
                     "scale_1e9": {"rows": 10**9}})
    assert quick == ["search_latency_100k.png"]
    assert full == ["search_latency_1m.png"]
    for name in quick + full:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
