"""The CLI around conflicts and imports: --strict, --replace, --no-replace, --watch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.factories import make_record, write_jsonl

FIXTURES = Path(__file__).parent / "fixtures"


def _said(output: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(output.split())


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_LAKE", str(tmp_path / "lake"))
    return CliRunner()


def test_ingest_reports_conflicts_exits_1_under_strict_and_replace_supersedes(
        runner: CliRunner, tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [make_record(0)])
    assert runner.invoke(app, ["ingest", str(first), "--no-index"]).exit_code == 0
    changed = write_jsonl(tmp_path / "b.jsonl", [make_record(0, answer="changed answer")])
    strict = runner.invoke(app, ["ingest", str(changed), "--strict", "--no-index"])
    assert strict.exit_code == 1, strict.output
    assert "accepted 0, duplicate 0, quarantined 1" in _said(strict.output)
    assert "conflict 1: stored turns with other content" in _said(strict.output)
    assert "(differs in: completion.text); re-run with --replace" in _said(strict.output), \
        strict.output
    replaced = runner.invoke(app, ["ingest", str(changed), "--replace", "--strict",
                                   "--no-index"])
    assert replaced.exit_code == 0, replaced.output
    assert "accepted 1, duplicate 0, quarantined 0" in _said(replaced.output)
    assert "replaced 1 stored turn(s)" in _said(replaced.output)
    shown = runner.invoke(app, ["turn", "show", "c-1", "t-0000", "--tenant", "acme",
                                "--user", "u-ana", "--json"])
    assert json.loads(shown.output)["completion"]["text"] == "changed answer"


def test_import_without_replace_quarantines_a_changed_turn(runner: CliRunner,
                                                           tmp_path: Path) -> None:
    export = FIXTURES / "chatgpt" / "conversations.json"
    ok = runner.invoke(app, ["import", "chatgpt", str(export), "--tenant", "acme",
                             "--user", "u-ana", "--no-embed", "--no-index"])
    assert ok.exit_code == 0, ok.output
    said = _said(ok.output)
    assert "recorded as:" in said and "1 turn without answer (interrupted)" in said
    changed = tmp_path / "conversations.json"
    changed.write_bytes(export.read_bytes().replace(b"Keep feeding it rye", b"Keep it on rye"))
    kept = runner.invoke(app, ["import", "chatgpt", str(changed), "--tenant", "acme",
                               "--user", "u-ana", "--no-embed", "--no-index", "--no-replace"])
    assert "1 conflicts" in _said(kept.output), kept.output
    replaced = runner.invoke(app, ["import", "chatgpt", str(changed), "--tenant", "acme",
                                   "--user", "u-ana", "--no-embed", "--no-index"])
    assert "imported 1 turns" in _said(replaced.output) and "1 replaced" in _said(replaced.output)


def test_import_claude_code_needs_paths_or_watch(runner: CliRunner, tmp_path: Path) -> None:
    bare = runner.invoke(app, ["import", "claude-code", "--tenant", "acme", "--user", "u"])
    assert bare.exit_code == 2 and "--watch FOLDER" in _said(bare.output)
    missing = runner.invoke(app, ["import", "claude-code", "--tenant", "acme", "--user", "u",
                                  "--watch", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in _said(missing.output)


def test_import_exits_1_when_the_input_yields_no_turn_and_a_problem(
        runner: CliRunner, tmp_path: Path) -> None:
    opts = ["--tenant", "acme", "--user", "u-ana", "--no-embed", "--no-index"]
    not_export = tmp_path / "notjson.json"
    not_export.write_text('{"hello": "world"}')
    bad = runner.invoke(app, ["import", "chatgpt", str(not_export), *opts])
    assert bad.exit_code == 1, bad.output
    said = _said(bad.output)
    assert "imported 0 turns, 0 already there, 1 quarantined" in said, said
    assert "the input yielded no turn" in said and "Traceback" not in said
    export = FIXTURES / "chatgpt" / "conversations.json"
    wrong = runner.invoke(app, ["import", "claude-code", str(export), *opts])  # wrong importer
    assert wrong.exit_code == 1, wrong.output
    ok = runner.invoke(app, ["import", "chatgpt", str(export), *opts])
    assert ok.exit_code == 0, ok.output
    again = runner.invoke(app, ["import", "chatgpt", str(export), *opts])
    # everything already there is not a failure, even beside a quarantined conversation
    assert again.exit_code == 0, again.output
    assert re.search(r"imported 0 turns, [1-9]\d* already there, [1-9]\d* quarantined",
                     _said(again.output)), again.output


@pytest.mark.parametrize(("importer", "source"), [
    ("chatgpt", "chatgpt/conversations.json"), ("codex", "codex"),
    ("claude-code", "claude_code"), ("copilot-cli", "copilot_cli/session-state"),
    ("aider", "aider/bakery/.aider.chat.history.md")])
def test_an_imported_turn_cut_short_keeps_how_it_ended_in_turn_logs(
        runner: CliRunner, tmp_path: Path, importer: str, source: str) -> None:
    from lake.store import LakeStore
    from lake.tables import Table

    done = runner.invoke(app, ["import", importer, str(FIXTURES / source), "--tenant", "acme",
                               "--user", "u-ana", "--no-embed", "--no-index"])
    assert done.exit_code == 0, done.output
    logs = LakeStore(tmp_path / "lake").read(
        Table.TURN_LOGS, columns=["completion_status", "payload"]).to_pylist()
    assert logs and all(
        r["completion_status"] == json.loads(r["payload"])["completion"].get("status",
                                                                             "completed")
        for r in logs)
    assert "interrupted" in {r["completion_status"] for r in logs}
