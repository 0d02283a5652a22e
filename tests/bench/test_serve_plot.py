from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import pytest

import bench.run as run

matplotlib.use("Agg")


def _figures(turns_per_s: float, visible_p95: float | None) -> dict[str, Any]:
    return {"turns_per_s": turns_per_s, "ack_p50_ms": 350.0, "ack_p95_ms": 900.0,
            "ack_to_searchable_p95_s": visible_p95, "search_load_p50_ms": 100.0,
            "search_searchers_alone_p50_ms": 60.0, "mean_turns_per_commit": 4.1}


def test_the_serve_plot_draws_every_request_size_and_leaves_a_gap_for_no_sample(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    serve = {**_figures(650, 0.7), "turns_per_request": 50,
             "by_request_size": {"1": _figures(22, None), "200": _figures(2200, 1.4)}}
    made = run.plot({"serve": serve})
    assert made == ["serve_by_request_size.png"]
    png = tmp_path / "serve_by_request_size.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_serve_section_without_request_sizes_draws_no_serve_plot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    assert run.plot({"serve": {**_figures(650, 0.7), "turns_per_request": 50}}) == []


def test_the_serve_plot_draws_the_answers_after_the_commit_beside_the_spooled_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    serve = {**_figures(2800, 3.5), "turns_per_request": 50,
             "by_request_size": {"1": _figures(400, 0.8), "200": _figures(3000, 3.9)},
             "without_spool": {"1": _figures(40, 0.3), "50": _figures(680, 0.5),
                               "200": _figures(2300, None)}}
    assert run.plot({"serve": serve}) == ["serve_by_request_size.png"]
    assert (tmp_path / "serve_by_request_size.png").stat().st_size > 0
