"""bench.scale_10m at a size a test can build: the lake is built once, reused, and searched by
processes of their own whose figures come back per scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale_10m import main, run


def test_a_small_scale_lake_is_built_reused_and_searched(tmp_path: Path) -> None:
    first = run(3000, 20, cache=tmp_path)
    assert first["rows"] > 2000 and first["ingest_s"] > 0 and first["index_build_s"] > 0
    for scope in ("user", "tenant"):
        assert 0 < first[scope]["p50_ms"] <= first[scope]["p95_ms"]
        assert first[scope]["peak_rss_mb"] > 0
    assert first["disk_mb"]["indexes"] > 0
    again = run(3000, 20, cache=tmp_path)  # reused: the build's seconds are the first run's
    assert (again["ingest_s"], again["index_build_s"], again["rows"]) == (
        first["ingest_s"], first["index_build_s"], first["rows"])


def test_too_few_rows_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rows", "10"]) == 2
    assert "--rows must be at least 1000" in capsys.readouterr().err


def test_the_ten_million_row_run_goes_into_the_paper_once() -> None:
    from bench.scale_paper import ten_million_section, with_ten_million

    figures = {"rows": 9_995_000, "cpu": "AMD EPYC", "cores": 2, "ingest_s": 1800.0,
               "index_build_s": 900.0, "disk_mb": {"lake": 25_000},
               "user": {"p50_ms": 8.0, "p95_ms": 15.0, "peak_rss_mb": 1500},
               "tenant": {"p50_ms": 120.0, "p95_ms": 300.0, "peak_rss_mb": 4200}}
    section = ten_million_section(figures)
    assert "9,995,000 rows built in 45 min" in section
    assert "≈ 90 µs per row" in section and "25 core-hours" in section
    assert "peak RSS 4,200 MB" in section and "26.2 GB on disk (2,623 B per row" in section
    paper = "## Scaling to 10^9 rows (on paper)\n\nfigures\n"
    once = with_ten_million(paper, figures)
    assert once.startswith(paper) and once.count("ten million rows") == 1
    again = with_ten_million(once, {**figures, "rows": 10_000_000})
    assert again.count("ten million rows") == 1 and "10,000,000 rows built" in again


def test_a_build_stopped_in_its_indexes_is_completed_not_taken_as_built(tmp_path: Path) -> None:
    import json
    import shutil

    from bench.scale import scale_lake_dir

    first = run(3000, 20, cache=tmp_path)
    root = scale_lake_dir(tmp_path, 3000, "clustered")
    # as a build killed after the tables and one partition's index: no sidecar, one index gone
    root.with_name(f"{root.name}.build.json").unlink()
    partitions = sorted(p for p in (root / "indexes").glob("*/*") if p.is_dir())
    shutil.rmtree(partitions[-1])
    again = run(3000, 20, cache=tmp_path)
    assert again["resumed"] is True and again["index_build_s"] > 0
    assert again["rows"] == first["rows"] and (partitions[-1] / "current.json").exists()
    assert json.loads(root.with_name(f"{root.name}.build.json").read_text())["resumed"]
