"""`turnlake setup gemini-cli` on a temporary HOME whose settings.json already holds other
hooks and MCP servers: merged in, shown by --dry-run, idempotent, --remove takes out exactly
what it added; the hooks it writes run as Gemini CLI runs them (AfterAgent records the
session, BeforeAgent adds a past turn from another session)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.setup.setup_cli import read_json, run_setup

OTHER_SETTINGS: dict[str, Any] = {
    "ui": {"theme": "GitHub"},
    "hooksConfig": {"enabled": True, "disabled": ["ding"]},
    "hooks": {
        "BeforeTool": [{"matcher": "run_shell_command", "hooks": [
            {"type": "command", "command": "~/.gemini/hooks/check.sh", "timeout": 5000}]}],
        "AfterAgent": [{"hooks": [{"type": "command", "name": "ding",
                                   "command": "notify-send 'Gemini is done'"}]}],
    },
    "mcpServers": {"github": {"httpUrl": "https://api.githubcopilot.com/mcp/",
                              "headers": {"Authorization": "Bearer $GITHUB_PAT"}}},
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose Gemini CLI already has hooks and an MCP server of other tools."""
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(OTHER_SETTINGS, indent=2))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TURNLAKE_KEY", "tlk_secret_never_in_a_file")
    return home


def run(*args: str) -> tuple[int, str]:
    return run_setup("gemini-cli", *args)


def ours(settings: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [h for group in settings["hooks"].get(event, []) for h in group["hooks"]
            if " hook gemini-cli" in h["command"]]


def test_setup_merges_with_other_hooks_and_servers_and_remove_restores_them(
        home: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    path = home / ".gemini" / "settings.json"
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--dry-run")
    assert code == 0, output
    assert "would change" in output and "hook gemini-cli --tenant acme" in output
    assert read_json(path) == OTHER_SETTINGS

    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0, output
    settings = read_json(path)
    assert settings["ui"] == OTHER_SETTINGS["ui"]
    assert settings["hooksConfig"] == OTHER_SETTINGS["hooksConfig"]
    assert settings["hooks"]["BeforeTool"] == OTHER_SETTINGS["hooks"]["BeforeTool"]
    assert settings["hooks"]["AfterAgent"][0] == OTHER_SETTINGS["hooks"]["AfterAgent"][0]
    assert settings["mcpServers"]["github"] == OTHER_SETTINGS["mcpServers"]["github"]
    (capture,) = ours(settings, "AfterAgent")
    assert capture["type"] == "command" and capture["timeout"] >= 10_000  # milliseconds
    words = shlex.split(capture["command"])
    assert Path(words[0]).is_absolute()
    assert words[words.index("--lake") + 1] == str(lake.resolve())
    assert "BeforeAgent" not in settings["hooks"]
    server = settings["mcpServers"]["turnlake"]
    assert Path(server["command"]).is_absolute()
    assert server["args"][-7:] == ["mcp", "--lake", str(lake.resolve()), "--tenant", "acme",
                                   "--user", "u-ana"]

    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0 and ": unchanged" in output, output
    run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--recall")
    (recall,) = ours(read_json(path), "BeforeAgent")
    assert " hook gemini-cli-recall " in recall["command"]
    run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert "BeforeAgent" not in read_json(path)["hooks"]

    code, output = run("--remove")
    assert code == 0, output
    assert read_json(path) == OTHER_SETTINGS
    code, output = run("--remove")
    assert code == 0 and "unchanged (nothing of turnlake's)" in output, output


def test_project_scope_with_a_server_names_the_key_never_writes_it(
        home: Path, tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    code, output = run("--tenant", "acme", "--user", "u-ana", "--server",
                       "http://127.0.0.1:8700", "--scope", "project", "--project", str(project),
                       "--recall")
    assert code == 0, output
    settings = read_json(project / ".gemini" / "settings.json")
    assert settings["mcpServers"]["turnlake"] == {
        "httpUrl": "http://127.0.0.1:8700/mcp/",
        "headers": {"Authorization": "Bearer ${TURNLAKE_KEY}"}}
    (capture,) = ours(settings, "AfterAgent")
    assert "--server http://127.0.0.1:8700" in capture["command"]
    assert "--lake" not in capture["command"] and ours(settings, "BeforeAgent")
    assert "tlk_secret" not in (project / ".gemini" / "settings.json").read_text()
    assert read_json(home / ".gemini" / "settings.json") == OTHER_SETTINGS
    run("--remove", "--scope", "project", "--project", str(project))
    assert read_json(project / ".gemini" / "settings.json") == {}
    (home / ".gemini" / "settings.json").write_text('{"mcpServers": {"turnlake": '
                                                    '{"command": "/opt/proxy"}}}')
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 2 and 'already has an MCP server "turnlake"' in output


def _session(path: Path, session_id: str, prompt: str, answer: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    lines = [
        {"sessionId": session_id, "projectHash": "ab12", "startTime": now,
         "lastUpdated": now, "kind": "main"},
        {"id": f"{session_id}-u1", "timestamp": now, "type": "user", "content": prompt},
        {"id": f"{session_id}-g1", "timestamp": now, "type": "gemini", "content": answer}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_hooks_setup_writes_run_as_gemini_cli_runs_them(
        home: Path, tmp_path: Path) -> None:
    from lake.store import LakeStore
    from lake.tables import Table

    lake = tmp_path / "lake"
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--recall")
    assert code == 0, output
    settings = read_json(home / ".gemini" / "settings.json")
    past = tmp_path / "session-past.jsonl"
    _session(past, "5e55a0b1-2c3d-4e5f-8a9b-0c1d2e3f4a5b", "How do owls see at night?",
             "Their eyes hold many rod cells.")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLAKE_")}
    env.update(HOME=str(home), TURNLAKE_EMBEDDING_MODEL="hashing-64", HF_HUB_OFFLINE="1",
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    # Gemini CLI runs a command hook through the shell, the JSON on its stdin.
    (capture,) = ours(settings, "AfterAgent")
    hook = json.dumps({"session_id": "5e55a0b1-2c3d-4e5f-8a9b-0c1d2e3f4a5b",
                       "transcript_path": str(past), "cwd": str(tmp_path),
                       "hook_event_name": "AfterAgent", "prompt": "How do owls see at night?"})
    done = subprocess.run(["/bin/sh", "-c", capture["command"]], env=env, timeout=300,
                          input=hook.encode(), capture_output=True, cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout) == {}, done.stderr.decode()
    assert LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 1
    # Recall searches the embedded, indexed lake (the capture hook only stores the turns).
    for step in (["embed", "--backfill"], ["index", "build"]):
        words = shlex.split(capture["command"])
        exe = words[:words.index("hook")]
        built = subprocess.run([*exe, *step, "--lake", str(lake)], env=env, timeout=300,
                               capture_output=True)
        assert built.returncode == 0, built.stderr.decode()
    (recall,) = ours(settings, "BeforeAgent")
    prompt = json.dumps({"session_id": "another-session", "prompt": "owls seeing at night",
                         "hook_event_name": "BeforeAgent"})
    done = subprocess.run(["/bin/sh", "-c", recall["command"] + " --min-relevance 0"],
                          env=env, timeout=300, input=prompt.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    answer = json.loads(done.stdout)["hookSpecificOutput"]
    assert answer["hookEventName"] == "BeforeAgent"
    assert "How do owls see at night?" in answer["additionalContext"]
    # Nothing relevant: Gemini CLI still gets JSON on stdout.
    done = subprocess.run(["/bin/sh", "-c", recall["command"]], env=env, timeout=300,
                          input=json.dumps({"session_id": "s", "prompt": "/help"}).encode(),
                          capture_output=True)
    assert (done.returncode, json.loads(done.stdout)) == (0, {}), done.stderr.decode()
