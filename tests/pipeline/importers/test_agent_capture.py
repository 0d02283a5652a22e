"""The import commands of the other agents, --watch, and Codex's notify program."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lake.location import LakeLocation
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.importers.agent_files import find_files
from pipeline.importers.agent_watch import watch_sessions
from pipeline.importers.codex import is_rollout, iter_codex
from pipeline.importers.common import ImportStream

FIXTURES = Path(__file__).parent / "fixtures"
ROLLOUT = next((FIXTURES / "codex").glob("rollout-2025-10-01*.jsonl"))
THREAD = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_LAKE", str(tmp_path / "lake"))
    return CliRunner()


def _said(output: str) -> str:
    return " ".join(output.split())


def _turns(lake: Path | LakeLocation) -> dict[str, dict[str, object]]:
    store = LakeStore(lake)
    if not store.exists(Table.TURN_LOGS):
        return {}
    rows = store.read(Table.TURN_LOGS, columns=["turn_id", "payload"]).to_pylist()
    return {r["turn_id"]: json.loads(r["payload"]) for r in rows}


@pytest.mark.parametrize(("command", "source", "turns"), [
    ("codex", FIXTURES / "codex", 4),
    ("gemini-cli", FIXTURES / "gemini_cli", 5),
    ("claude-ai", FIXTURES / "claude_ai" / "conversations.json", 3),
    ("copilot-cli", FIXTURES / "copilot_cli", 2),
    ("aider", FIXTURES / "aider", 4),
])
def test_each_agent_imports_once_and_again_adds_nothing(
        runner: CliRunner, tmp_path: Path, command: str, source: Path, turns: int) -> None:
    args = ["import", command, str(source), "--tenant", "acme", "--user", "u-ana",
            "--no-embed", "--no-index"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert f"imported {turns} turns, 0 already there" in _said(first.output)
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert f"imported 0 turns, {turns} already there" in _said(again.output)
    stored = _turns(tmp_path / "lake")
    assert len(stored) == turns
    assert {t["agent"] for t in stored.values()} == {command}


def test_a_file_of_the_wrong_agent_exits_1_with_its_problems_quarantined(
        runner: CliRunner, tmp_path: Path) -> None:
    wrong = tmp_path / "conversations.json"
    wrong.write_text('{"not": "an array"}')
    result = runner.invoke(app, ["import", "claude-ai", str(wrong), "--tenant", "acme",
                                 "--user", "u-ana", "--no-embed", "--no-index"])
    assert result.exit_code == 1, result.output
    assert "yielded no turn" in _said(result.output)
    missing = runner.invoke(app, ["import", "codex", str(tmp_path / "nope"), "--tenant",
                                  "acme", "--user", "u-ana"])
    assert missing.exit_code != 0 and "does not exist" in _said(missing.output)


def test_watch_records_a_session_as_it_grows(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")  # for this test only
    settings = Settings.from_env(str(tmp_path / "lake"))
    folder = tmp_path / "sessions"
    folder.mkdir()
    lines = ROLLOUT.read_bytes().splitlines(keepends=True)
    rollout = folder / ROLLOUT.name
    cut = next(i for i, raw in enumerate(lines) if b'"turn-3"' in raw)
    rollout.write_bytes(b"".join(lines[:cut]))

    def stream_of(files: Sequence[Path]) -> ImportStream:
        return iter_codex(files, tenant="acme", user_id="u-ana")

    def find(f: Path) -> list[Path]:
        return find_files([f], is_rollout, "codex")

    assert watch_sessions(settings, folder, find, stream_of, interval_s=0, rounds=1) == 1
    assert sorted(_turns(settings.lake)) == ["turn-1", "turn-2"]
    # Nothing changed: nothing is read again.
    assert watch_sessions(settings, folder, find, stream_of, interval_s=0, rounds=1) == 1
    rollout.write_bytes(b"".join(lines[:-1]))
    assert watch_sessions(settings, folder, find, stream_of, interval_s=0, rounds=1) == 1
    assert sorted(_turns(settings.lake)) == ["turn-1", "turn-2", "turn-3"]


def _notify(lake: Path, home: Path, payload: str, log: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CODEX_HOME": str(home), "TURNLAKE_EMBEDDING_MODEL": "hashing-64",
           "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(home.parent / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "hook", "codex", "--tenant", "acme", "--user",
         "u-ana", "--lake", str(lake), "--log", str(log), payload],
        env=env, capture_output=True, text=True, timeout=300, check=False)


def test_codex_notify_records_each_turn_once_and_never_fails(tmp_path: Path) -> None:
    home = tmp_path / "codex"
    day = home / "sessions" / "2025" / "10" / "01"
    day.mkdir(parents=True)
    lines = ROLLOUT.read_bytes().splitlines(keepends=True)[:-1]  # without the damaged line
    cut = next(i for i, raw in enumerate(lines) if b'"turn-2"' in raw)
    rollout = day / ROLLOUT.name
    rollout.write_bytes(b"".join(lines[:cut]))
    lake, log = tmp_path / "lake", tmp_path / "notify.log"
    payload = json.dumps({"type": "agent-turn-complete", "thread-id": THREAD,
                          "turn-id": "turn-1", "cwd": "/home/ana/bakery",
                          "input-messages": ["Why does the sourdough timer test fail?"],
                          "last-assistant-message": "The timer rounded..."})
    first = _notify(lake, home, payload, log)
    assert first.returncode == 0, first.stderr
    assert sorted(_turns(lake)) == ["turn-1"]
    assert "1 turns read, 1 new" in log.read_text()
    rollout.write_bytes(b"".join(lines))
    second = _notify(lake, home, payload, log)
    assert second.returncode == 0, second.stderr
    stored = _turns(lake)
    assert sorted(stored) == ["turn-1", "turn-2", "turn-3"]
    # Resumed at the last turn it stored: turn-1 came back unchanged, two turns are new.
    assert re.search(r"3 turns read, 2 new, 1 unchanged, 0 replaced, 0 conflicts, "
                     r"0 rows embedded, 0 problems \(resumed", log.read_text())
    assert stored["turn-1"]["agent"] == "codex"
    # Where it resumes from is in the user's cache folder, never in the lake.
    assert len(list((tmp_path / "cache" / "turnlake" / "capture" / "codex").glob("*.json"))) == 1
    assert not (lake / "_capture").exists()
    # A payload it cannot use, or a thread without rollout, is logged, and Codex sees exit 0.
    assert _notify(lake, home, "{not json", log).returncode == 0
    unknown = json.dumps({"type": "agent-turn-complete", "thread-id": "no-such-thread"})
    assert _notify(lake, home, unknown, log).returncode == 0
    logged = log.read_text()
    assert "notify payload is not JSON" in logged and "no Codex rollout of thread" in logged


def test_search_filters_by_agent_and_app(runner: CliRunner) -> None:
    for command, source in (("codex", FIXTURES / "codex"), ("aider", FIXTURES / "aider")):
        done = runner.invoke(app, ["import", command, str(source), "--tenant", "acme",
                                   "--user", "u-ana"])
        assert done.exit_code == 0, done.output

    def found(*extra: str) -> set[str]:
        result = runner.invoke(app, ["search", "rye", "--tenant", "acme", "--user", "u-ana",
                                     "--min-relevance", "0", "--json",
                                     # the fixtures are of 2025: retention has expired them
                                     # by now
                                     "--as-of", "2025-12-01T00:00:00Z", *extra])
        assert result.exit_code == 0, result.output
        return {h["conversation_id"] for h in json.loads(result.output)["hits"]}

    everything = found()
    codex = found("--agent", "codex")
    aider = found("--agent", "aider", "--app", "aider")
    assert codex and aider and codex | aider == everything and not codex & aider
    assert all(c.startswith("aider-") for c in aider)
    assert found("--agent", "gemini-cli") == set()
    assert found("--agent", "codex", "--app", "aider") == set()
    shown = runner.invoke(app, ["search", "rye", "--tenant", "acme", "--user", "u-ana",
                                "--min-relevance", "0", "--as-of", "2025-12-01T00:00:00Z"],
                          env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "agent" in shown.output and " codex " in shown.output and " aider " in shown.output


def test_gemini_hook_records_the_session_and_answers_empty_json(tmp_path: Path) -> None:
    session = tmp_path / "session-2025-11-03T09-00-a7b8c9d0.jsonl"
    recording = FIXTURES / "gemini_cli" / "tmp" / "9f8e" / "chats" / session.name
    lines = recording.read_bytes().splitlines(keepends=True)
    session.write_bytes(b"".join(lines[:4]))
    lake, log = tmp_path / "lake", tmp_path / "hook.log"
    env = {**os.environ, "TURNLAKE_EMBEDDING_MODEL": "hashing-64", "HF_HUB_OFFLINE": "1"}
    hook = json.dumps({"session_id": "a7b8c9d0", "transcript_path": str(session),
                       "cwd": str(tmp_path), "hook_event_name": "AfterAgent",
                       "timestamp": "2025-11-03T09:00:05Z"})

    def call(stdin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "hook", "gemini-cli", "--tenant", "acme",
             "--user", "u-ana", "--lake", str(lake), "--log", str(log)],
            input=stdin, env=env, capture_output=True, text=True, timeout=300, check=False)

    first = call(hook)
    assert (first.returncode, first.stdout) == (0, "{}\n"), first.stderr
    assert sorted(_turns(lake)) == ["j-u1"]
    session.write_bytes(b"".join(lines))
    assert call(hook).returncode == 0
    assert sorted(_turns(lake)) == ["j-u1", "j-u3"]
    # The summary written later retitles the session: its first turn is superseded.
    assert "1 replaced" in log.read_text()
    broken = call("not json")
    assert (broken.returncode, broken.stdout) == (0, "{}\n")
    assert "hook input is not JSON" in log.read_text()
