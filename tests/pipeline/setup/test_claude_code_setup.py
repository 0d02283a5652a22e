"""`turnlake setup claude-code` on a temporary HOME that already holds other hooks and MCP
servers: merged in, shown by --dry-run, idempotent, and --remove takes out exactly what it
added."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipeline.cli import app

OTHER_SETTINGS: dict[str, Any] = {
    "model": "sonnet",
    "permissions": {"allow": ["Bash(npm test:*)"]},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send 'Claude is done'"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "~/bin/check-bash.sh", "timeout": 5}]}],
    },
}
OTHER_STATE: dict[str, Any] = {
    "numStartups": 12, "theme": "dark",
    "mcpServers": {"github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
                              "headers": {"Authorization": "Bearer ${GITHUB_PAT}"}}},
    "projects": {"/home/ana/app": {"allowedTools": []}},
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose Claude Code already has hooks and an MCP server of other tools."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps(OTHER_SETTINGS, indent=2))
    (home / ".claude.json").write_text(json.dumps(OTHER_STATE, indent=2))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TURNLAKE_KEY", "tlk_secret_never_in_a_file")
    return home


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["setup", "claude-code", *args])
    return result.exit_code, result.output


def read(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text())
    return value


def our_hooks(settings: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [h for group in settings["hooks"].get(event, []) for h in group["hooks"]
            if " hook claude-code" in h["command"]]


def test_setup_merges_with_other_hooks_and_servers_and_remove_restores_them(
        home: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    settings_path, state_path = home / ".claude" / "settings.json", home / ".claude.json"
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--dry-run")
    assert code == 0, output
    assert "would change" in output and "hook claude-code --tenant acme" in output
    assert read(settings_path) == OTHER_SETTINGS and read(state_path) == OTHER_STATE

    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0, output
    settings, state = read(settings_path), read(state_path)
    # Everything that was there is still there.
    assert settings["hooks"]["Stop"][0] == OTHER_SETTINGS["hooks"]["Stop"][0]
    assert settings["hooks"]["PreToolUse"] == OTHER_SETTINGS["hooks"]["PreToolUse"]
    assert settings["model"] == "sonnet" and state["projects"] == OTHER_STATE["projects"]
    assert state["mcpServers"]["github"] == OTHER_STATE["mcpServers"]["github"]
    # Ours: the capture hook on Stop (in the background) and SessionEnd, by absolute path.
    (stop,) = our_hooks(settings, "Stop")
    (end,) = our_hooks(settings, "SessionEnd")
    assert stop["async"] is True and "async" not in end and end["timeout"] >= 10
    words = shlex.split(stop["command"])
    assert Path(words[0]).is_absolute()
    assert words[words.index("--lake") + 1] == str(lake.resolve())
    assert "UserPromptSubmit" not in settings["hooks"]
    server = state["mcpServers"]["turnlake"]
    assert server["type"] == "stdio" and Path(server["command"]).is_absolute()
    assert server["args"][-7:] == ["mcp", "--lake", str(lake.resolve()), "--tenant", "acme",
                                   "--user", "u-ana"]

    # Again: nothing changes; with --recall, the prompt hook is added; without, it goes.
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0 and output.count(": unchanged") == 2, output
    run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--recall")
    (recall,) = our_hooks(read(settings_path), "UserPromptSubmit")
    assert " hook claude-code-recall " in recall["command"]
    run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert "UserPromptSubmit" not in read(settings_path)["hooks"]

    code, output = run("--remove")
    assert code == 0, output
    assert read(settings_path) == OTHER_SETTINGS and read(state_path) == OTHER_STATE
    code, output = run("--remove")
    assert code == 0 and output.count(": unchanged (nothing of turnlake's)") == 2, output


def test_project_scope_with_a_server_writes_the_project_files_and_never_the_key(
        home: Path, tmp_path: Path) -> None:
    project = tmp_path / "app"
    (project / ".claude").mkdir(parents=True)
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"db": {
        "command": "npx", "args": ["-y", "@example/db-mcp"], "env": {}}}}))
    code, output = run("--tenant", "acme", "--user", "u-ana", "--server",
                       "http://127.0.0.1:8700", "--scope", "project", "--project", str(project),
                       "--recall")
    assert code == 0, output
    settings, mcp = read(project / ".claude" / "settings.json"), read(project / ".mcp.json")
    assert mcp["mcpServers"]["db"]["command"] == "npx"
    assert mcp["mcpServers"]["turnlake"] == {
        "type": "http", "url": "http://127.0.0.1:8700/mcp/",
        "headers": {"Authorization": "Bearer ${TURNLAKE_KEY}"}}
    (stop,) = our_hooks(settings, "Stop")
    assert "--server http://127.0.0.1:8700" in stop["command"] and "--lake" not in stop["command"]
    assert our_hooks(settings, "UserPromptSubmit")
    for path in (project / ".claude" / "settings.json", project / ".mcp.json",
                 home / ".claude" / "settings.json", home / ".claude.json"):
        assert "tlk_secret" not in path.read_text()
    # The user's own files were not touched.
    assert read(home / ".claude" / "settings.json") == OTHER_SETTINGS
    run("--remove", "--scope", "project", "--project", str(project))
    assert read(project / ".mcp.json") == {"mcpServers": {"db": {
        "command": "npx", "args": ["-y", "@example/db-mcp"], "env": {}}}}
    assert read(project / ".claude" / "settings.json") == {}


def test_setup_refuses_what_it_cannot_merge(home: Path, tmp_path: Path) -> None:
    state = read(home / ".claude.json")
    state["mcpServers"]["turnlake"] = {"command": "/opt/other/turnlake-proxy", "args": []}
    (home / ".claude.json").write_text(json.dumps(state))
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 2 and 'already has an MCP server "turnlake"' in output
    assert "turnlake hook" not in (home / ".claude" / "settings.json").read_text()
    (home / ".claude" / "settings.json").write_text("{not json")
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 2 and "settings.json is not valid JSON (line 1" in output
    code, output = run("--tenant", "acme", "--user", "u-ana")
    assert code == 2 and "give --lake FOLDER or --server URL" in output
    code, output = run("--lake", str(tmp_path / "l"))
    assert code == 2 and "give --tenant and --user" in output


def test_the_hooks_setup_writes_run_as_claude_code_runs_them(
        home: Path, tmp_path: Path) -> None:
    import os
    import subprocess

    from lake.store import LakeStore
    from lake.tables import Table
    from tests.pipeline.importers.claude_session import SessionWriter, hook_payload

    lake = tmp_path / "lake"
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--recall")
    assert code == 0, output
    settings = read(home / ".claude" / "settings.json")
    writer = SessionWriter(tmp_path / "t" / "1c2d3e4f-0000-4000-8000-000000000001.jsonl",
                           "1c2d3e4f-0000-4000-8000-000000000001", str(tmp_path))
    writer.turn("How do owls see at night?", "Their eyes hold many rod cells.", [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLAKE_")}
    env.update(HOME=str(home), TURNLAKE_EMBEDDING_MODEL="hashing-64", HF_HUB_OFFLINE="1")
    # Claude Code runs a command hook through the shell, the JSON on its stdin.
    for event in ("Stop", "SessionEnd"):
        (hook,) = our_hooks(settings, event)
        done = subprocess.run(["/bin/sh", "-c", hook["command"]], env=env, timeout=300,
                              input=hook_payload(writer, event).encode(), capture_output=True)
        assert done.returncode == 0, done.stderr.decode()
    assert LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 1
    (recall,) = our_hooks(settings, "UserPromptSubmit")
    prompt = json.dumps({"session_id": "another-session", "prompt": "owls seeing at night"})
    done = subprocess.run(["/bin/sh", "-c", recall["command"] + " --min-relevance 0"],
                          env=env, timeout=300, input=prompt.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "How do owls see at night?" in context
