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
