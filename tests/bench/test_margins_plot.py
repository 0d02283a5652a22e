from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import pytest

import bench.run as run

matplotlib.use("Agg")


def _margins(shift: float) -> dict[str, Any]:
    return {split: {k: {"arm": "lexical", "fused_minus_arm": shift, "low": shift - 0.01,
                        "high": shift + 0.01} for k in ("5", "10", "25")}
            for split in ("tune", "report", "all")}


def test_the_margins_plot_draws_each_history_that_has_margins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    results = {"locomo_reworded": {"minimal": {}, "minimal_margins": _margins(0.01),
                                   "rich_margins": _margins(-0.002)},
               "locomo_long": {"passages": {split: {g: {"5": 0.5, "10": 0.6, "25": 0.7}
                                                    for g in ("semantic", "lexical", "fused")}
                                            for split in ("tune", "report", "all")},
                               "passages_margins": _margins(0.02)}}
    assert run._margin_rows(results) == [
        ("reworded, minimal", _margins(0.01)), ("reworded, rich", _margins(-0.002)),
        ("long turns", _margins(0.02))]
    assert "fusion_margins.png" in run.plot(results)
    assert (tmp_path / "fusion_margins.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # results of a run before margins were measured draw no such plot
    del results["locomo_reworded"], results["locomo_long"]["passages_margins"]
    assert "fusion_margins.png" not in run.plot(results)
