"""Progress of long jobs when stderr is not a terminal: plain lines now and then."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import progress as progress_module
from pipeline.cli import app
from pipeline.progress import JobProgress, ProgressLines


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_short_job_writes_no_line() -> None:
    out, clock = io.StringIO(), Clock()
    lines = ProgressLines(out, every_s=30, clock=clock)
    job = JobProgress(None, lines)
    advance = job.counter("writing turns")
    for _ in range(20):
        advance(500)
        clock.now += 1
    lines.finish()
    assert out.getvalue() == ""


def test_a_long_job_writes_a_line_per_count_at_most_every_interval_and_a_last_one() -> None:
    out, clock = io.StringIO(), Clock()
    lines = ProgressLines(out, every_s=30, clock=clock)
    job = JobProgress(None, lines)
    advance = job.counter("writing turns")
    build = job.partitions("building indexes")
    for second in range(1, 95):
        clock.now = 100.0 + second
        advance(1000)
    build("acme/2026-08", 1, 3)
    clock.now += 40
    build("acme/2026-09", 2, 3)
    lines.finish()
    assert out.getvalue().splitlines() == [
        "writing turns: 30,000 after 30 s",
        "writing turns: 60,000 after 60 s",
        "writing turns: 90,000 after 90 s",
        "building indexes (acme/2026-08): 1/3 after 94 s",
        "building indexes (acme/2026-09): 2/3 after 134 s",
        "writing turns: 94,000 after 134 s",  # the last: where the count ended
    ]


def test_the_cli_writes_progress_lines_to_a_non_terminal_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every update is due: the demo's index build reports each partition
    monkeypatch.setattr(progress_module, "LINE_EVERY_S", 0.0)
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    result = CliRunner().invoke(app, ["demo", "--lake", str(tmp_path / "lake"), "--users", "3",
                                      "--turns", "40"])
    assert result.exit_code == 0, result.output
    assert "demo lake at" in result.stdout
    building = re.findall(r"^building indexes \(.+\): (\d+)/(\d+) after \d+ s$",
                          result.stderr, re.MULTILINE)
    assert building, result.stderr
    assert building[-1][0] == building[-1][1]  # the last partition's line: all built
