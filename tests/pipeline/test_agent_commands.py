"""`turnlake pull` and `turnlake ref resolve --out DIR/` on the command line."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.factories import make_record, write_jsonl

REF = "conv:fi:conv_c-1.turn_t-0001.files/forecast.csv"
CSV = b"month,hours\n3,12\n"
ANA = ["--tenant", "acme", "--user", "u-ana"]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_LAKE", str(tmp_path / "lake"))
    runner = CliRunner()
    hosted = [{"path": "files/forecast.csv", "mime": "text/csv",
               "content_b64": base64.b64encode(CSV).decode()}]
    records = [make_record(1, hosted_files=hosted),
               make_record(2, user="u-ben", conversation="c-ben", hosted_files=hosted)]
    done = runner.invoke(app, ["ingest", str(write_jsonl(tmp_path / "in.jsonl", records)),
                               "--no-embed", "--no-index"])
    assert done.exit_code == 0, done.output
    return runner


def test_pull_and_clean(runner: CliRunner, tmp_path: Path) -> None:
    work = tmp_path / "work"
    pulled = runner.invoke(app, ["pull", "c-1/t-0001", "--into", str(work), *ANA, "--json"])
    assert pulled.exit_code == 0, pulled.output
    answer = json.loads(pulled.stdout)
    assert answer["ok"] and [i["status"] for i in answer["items"]] == ["pulled"]
    assert (work / "files" / "forecast.csv").read_bytes() == CSV
    partial = runner.invoke(app, ["pull", "c-ben/t-0002", REF, "--into", str(work), *ANA])
    assert partial.exit_code == 1  # Ben's turn is refused; the rest is unchanged
    assert "refused" in partial.stdout and "unchanged" in partial.stdout
    cleaned = runner.invoke(app, ["pull", "--clean", str(work)])
    assert cleaned.exit_code == 0, cleaned.output
    assert "removed 1 files and 1 folders" in cleaned.stdout
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["pull", "c-1/t-0001"],                              # no --into
    ["pull", "--into", "w"],                             # no target
    ["pull", "--clean", "nowhere"],                      # nothing to clean
    ["pull", "c-1/t-0001", "--into", "w", "--tenant", "acme"],   # no user
    ["pull", "c-1/t-0001", "--into", "w", "--key", "k", "--tenant", "acme"],
])
def test_pull_errors_are_clean(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output


def test_ref_resolve_into_a_folder_keeps_the_name(runner: CliRunner, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    done = runner.invoke(app, ["ref", "resolve", REF, "--out", f"{folder}/", *ANA])
    assert done.exit_code == 0, done.output
    assert (folder / "forecast.csv").read_bytes() == CSV
    plain = runner.invoke(app, ["ref", "resolve", REF, "--out", str(folder), *ANA])
    assert plain.exit_code == 0 and (folder / "forecast.csv").read_bytes() == CSV
    named = runner.invoke(app, ["ref", "resolve", REF, "--out", str(folder / "x.csv"), *ANA])
    assert named.exit_code == 0 and (folder / "x.csv").read_bytes() == CSV
    for out in (f"{tmp_path}/missing/", str(tmp_path / "missing" / "x.csv")):
        bad = runner.invoke(app, ["ref", "resolve", REF, "--out", out, *ANA])
        assert bad.exit_code == 2, bad.output
        assert "error:" in bad.output and "Traceback" not in bad.output
