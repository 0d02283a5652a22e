"""`turnlake ref resolve` for every namespace: JSON for records, bytes for files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.factories import make_record, rich_record, write_jsonl

ANA = ["--tenant", "acme", "--user", "u-ana"]
BEN = ["--tenant", "acme", "--user", "u-ben"]
FILE = "conv:fi:conv_c-1.turn_t-0002.files/forecast.csv"
CSV = b"month,hours\n3,12\n"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_LAKE", str(tmp_path / "lake"))
    runner = CliRunner()
    rich = rich_record(2)
    rich["completion"] = {**rich["completion"],
                          "text": f"Produced the forecast at {FILE}; see "
                                  "conv:ev:conv_c-1.turn_t-0002.events/40."}
    records = [make_record(1), rich, make_record(3, user="u-ben", conversation="c-ben")]
    done = runner.invoke(app, ["ingest", str(write_jsonl(tmp_path / "in.jsonl", records)),
                               "--no-embed", "--no-index"])
    assert done.exit_code == 0, done.output
    return runner


def _turn(runner: CliRunner) -> dict[str, Any]:
    shown = runner.invoke(app, ["turn", "show", "c-1", "t-0002", *ANA, "--json"])
    assert shown.exit_code == 0, shown.output
    turn: dict[str, Any] = json.loads(shown.stdout)
    return turn


def _resolve(runner: CliRunner, ref: str, *who: str) -> dict[str, Any]:
    done = runner.invoke(app, ["ref", "resolve", ref, *(who or ANA)])
    assert done.exit_code == 0, done.output
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_every_namespace_resolves_on_the_command_line(runner: CliRunner) -> None:
    turn = _turn(runner)
    addresses = turn["addresses"]
    record = _resolve(runner, addresses["record"])
    assert record["namespace"] == "ar" and record["value"]["turn_id"] == "t-0002"
    assert _resolve(runner, addresses["steps"][1])["value"] == turn["steps"][1]
    assert _resolve(runner, addresses["events"][0])["value"] == turn["events"][0]
    by_namespace = {}
    for address in addresses["rows"]:
        got = _resolve(runner, address)
        by_namespace.setdefault(got["namespace"], []).append(got["value"]["text"])
    assert by_namespace["ws"] == [turn["summary"]]
    assert by_namespace["su"] == [*turn["anchors"], *turn["notes"]]
    assert turn["submissions"][0]["text"] in by_namespace["so"]
    wrote = runner.invoke(app, ["ref", "resolve", FILE, *ANA])
    assert wrote.exit_code == 0 and wrote.stdout_bytes == CSV


def test_refs_in_the_text_are_listed_with_the_turn(runner: CliRunner) -> None:
    mentions = {m["ref"]: m for m in _turn(runner)["mentions"]}
    assert mentions[FILE]["status"] == "found"
    assert mentions["conv:ev:conv_c-1.turn_t-0002.events/40"]["status"] == "missing"
    shown = runner.invoke(app, ["turn", "show", "c-1", "t-0002", *ANA]).stdout
    assert f"ref {FILE} -> {FILE}" in shown
    assert "ref conv:ev:conv_c-1.turn_t-0002.events/40 -> missing" in shown
    assert "record conv:ar:conv_c-1.turn_t-0002.record@" in shown


def test_another_users_object_and_none_get_one_answer(runner: CliRunner) -> None:
    addresses = _turn(runner)["addresses"]
    for ref in (addresses["record"], addresses["steps"][0], addresses["rows"][0],
                addresses["events"][0], FILE):
        answers = set()
        for target in (ref, ref.replace("t-0002", "t-0404")):
            refused = runner.invoke(app, ["ref", "resolve", target, *BEN])
            assert refused.exit_code == 2
            answers.add(refused.output.replace("t-0404", "t-0002"))
        assert len(answers) == 1, answers
        assert "may not read" in answers.pop()


def test_an_expired_object_and_a_malformed_address_say_so(runner: CliRunner) -> None:
    record = _turn(runner)["addresses"]["record"]
    expired = runner.invoke(app, ["ref", "resolve", record, *ANA, "--as-of", "2300-01-01"])
    assert expired.exit_code == 2 and "expired at" in expired.output
    bad = runner.invoke(app, ["ref", "resolve", "conv:tc:conv_c-1.turn_t-0002.call/1", *ANA])
    assert bad.exit_code == 2 and "steps/<i>" in bad.output


def test_erasure_makes_every_address_of_the_turn_missing(runner: CliRunner) -> None:
    turn = _turn(runner)
    addresses = turn["addresses"]
    erased = runner.invoke(app, ["erase", "--tenant", "acme", "--turn", "c-1/t-0002"])
    assert erased.exit_code == 0, erased.output
    for ref in (addresses["record"], addresses["completion"], *addresses["steps"],
                *addresses["events"], *addresses["rows"], FILE):
        gone = runner.invoke(app, ["ref", "resolve", ref, "--tenant", "acme", "--analyst"])
        assert gone.exit_code == 2 and "names no retained object" in gone.output, gone.output


def test_a_real_process_writes_a_files_bytes_and_a_records_json(
        runner: CliRunner, tmp_path: Path) -> None:
    env = {**os.environ, "TURNLAKE_LAKE": str(tmp_path / "lake")}
    command = [sys.executable, "-m", "pipeline.cli", "ref", "resolve"]
    done = subprocess.run([*command, FILE, *ANA], env=env, capture_output=True, timeout=300,
                          check=False)
    assert done.returncode == 0 and done.stdout == CSV, done.stderr
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([*command, "conv:ws:conv_c-1.turn_t-0002.summary", *ANA, "--out",
                           f"{out}/"], env=env, capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    saved = json.loads((out / "record.json").read_text())
    assert saved["namespace"] == "ws" and saved["value"]["role"] == "summary"


def test_ingest_reports_refs_that_lead_nowhere(runner: CliRunner, tmp_path: Path) -> None:
    record = make_record(7, summary="see conv:ar:conv_c-1.turn_t-0001.record and "
                                     "conv:so:conv_c-1.turn_t-0404.user/0",
                         answer=f"wrote {FILE} and conv:tc:conv_c-1.turn_t-0002.call/1")
    done = runner.invoke(app, ["ingest", str(write_jsonl(tmp_path / "more.jsonl", [record])),
                               "--no-embed", "--no-index"])
    assert done.exit_code == 0, done.output
    lines = [line for line in done.stderr.splitlines() if line.startswith("unresolved ref")]
    assert len(lines) == 2, done.stderr
    assert "summary names conv:so:conv_c-1.turn_t-0404.user/0, which is missing" in lines[1]
    assert "completion names conv:tc:conv_c-1.turn_t-0002.call/1, which is invalid" in lines[0]
    mentions = {m["ref"]: m["status"] for m in json.loads(runner.invoke(app, [
        "turn", "show", "c-1", "t-0007", *ANA, "--json"]).stdout)["mentions"]}
    assert mentions == {FILE: "found", "conv:tc:conv_c-1.turn_t-0002.call/1": "invalid",
                        "conv:ar:conv_c-1.turn_t-0001.record": "found",
                        "conv:so:conv_c-1.turn_t-0404.user/0": "missing"}
