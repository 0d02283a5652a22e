from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

import bench.run as run

matplotlib.use("Agg")


def test_the_passages_cost_plot_draws_both_lakes_per_scope_and_arm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    figures = {"rows": 1000, "long_share": 0.3, "long_rows": 70, "passages": 210}
    for lake, base in (("plain", 2.0), ("long", 2.5)):
        for scope in ("user", "tenant"):
            for arm in ("hybrid", "semantic"):
                figures[f"{lake}/{scope}/{arm}_p50_ms"] = [base, base + 0.1]
    assert run.plot({"passages_cost_100k": figures}) == ["passages_cost.png"]
    assert (tmp_path / "passages_cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
