from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.axes
import pytest

import bench.run as run

matplotlib.use("Agg")


def _split(false_empty: float, reworded: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "floor": 0.5, "false_empty_rate": false_empty,
        "true_empty_by_kind": {"dictionary": 1.0, "foreign": 1.0, "punctuation": 0.96,
                               "shuffled": 1.0}}
    if reworded:
        recall = {"5": 0.3, "10": 0.4, "25": 0.6}
        figures["reworded"] = {"questions": 760, "recall_floor": recall,
                               "recall_no_floor": recall, "false_empty_rate": 0.05}
        figures["recall_floor"] = figures["recall_no_floor"] = recall
    return figures


@pytest.mark.parametrize("reworded", [True, False])
def test_the_floor_plot_draws_reworded_questions_when_they_were_measured(
        reworded: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    drawn: list[list[str]] = []
    real = matplotlib.axes.Axes.set_xticks

    def ticks(self: Any, where: Any, labels: Any = None, **kw: Any) -> Any:
        drawn.append(list(labels or []))
        return real(self, where, labels, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_xticks", ticks)
    figures = {"tune": _split(0.003, reworded), "report": _split(0.0, reworded)}
    assert run.plot({"relevance": figures}) == ["relevance_floor.png"]
    assert (tmp_path / "relevance_floor.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ["LoCoMo\nquestions", *(["reworded\nquestions"] if reworded else []),
            "dictionary", "foreign", "punctuation", "shuffled"] in drawn


def test_the_codes_plot_labels_every_kind_with_its_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    labels: list[list[str]] = []
    real = matplotlib.axes.Axes.bar_label

    def bar_label(self: Any, container: Any, texts: Any = None, **kw: Any) -> Any:
        labels.append(list(texts or []))
        return real(self, container, texts, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar_label", bar_label)
    figures = {"as_written": {"probes": 78, "right": 1.0},
               "near_miss": {"probes": 70, "right": 0.5}}
    import matplotlib.pyplot as plt

    assert run._codes_plot(figures, plt) == "codes_floor.png"
    assert (tmp_path / "codes_floor.png").stat().st_size > 0
    assert labels == [["100% of 78", "50% of 70"]]
