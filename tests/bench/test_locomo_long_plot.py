from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

import bench.run as run

matplotlib.use("Agg")


def _recalls(base: float) -> dict[str, dict[str, dict[str, float]]]:
    by_generator = {g: {"5": base + i / 10, "10": base + i / 10 + 0.05, "25": base + 0.2}
                    for i, g in enumerate(("semantic", "lexical", "trigram", "fused"))}
    return {split: by_generator for split in ("tune", "report", "all")}


def test_the_long_rows_plot_draws_each_history_present(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    figures = {name: _recalls(0.4) for name in (
        "passages", "passages_reworded", "passages_mixed", "passages_mixed_reworded",
        "truncated", "truncated_reworded")}
    assert run.plot({"locomo_long": figures}) == ["locomo_long_recall.png"]
    full = (tmp_path / "locomo_long_recall.png").read_bytes()
    assert full[:8] == b"\x89PNG\r\n\x1a\n"
    # results of a run before the mixed variant existed still draw, with fewer panels
    older = {k: v for k, v in figures.items() if "mixed" not in k}
    assert run.plot({"locomo_long": json.loads(json.dumps(older))}) == ["locomo_long_recall.png"]
    assert (tmp_path / "locomo_long_recall.png").read_bytes() != full
