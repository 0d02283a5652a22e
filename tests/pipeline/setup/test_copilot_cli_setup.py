"""`turnlake setup copilot-cli` on a temporary HOME whose mcp-config.json already holds other
servers: merged in, idempotent, the key named and never written, --remove takes out exactly
what it added, and the watch command that captures the sessions is printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.setup.setup_cli import read_json, run_setup

OTHER_CONFIG: dict[str, Any] = {"mcpServers": {
    "playwright": {"type": "local", "command": "npx", "args": ["@playwright/mcp@latest"],
                   "env": {}, "tools": ["*"]},
    "context7": {"type": "http", "url": "https://mcp.context7.com/mcp",
                 "headers": {"CONTEXT7_API_KEY": "${CONTEXT7_KEY}"}, "tools": ["*"]}}}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose Copilot CLI already has MCP servers of other tools."""
    home = tmp_path / "home"
    (home / ".copilot").mkdir(parents=True)
    (home / ".copilot" / "mcp-config.json").write_text(json.dumps(OTHER_CONFIG, indent=2))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("COPILOT_HOME", raising=False)
    monkeypatch.setenv("TURNLAKE_KEY", "tlk_secret_never_in_a_file")
    return home


def run(*args: str) -> tuple[int, str]:
    return run_setup("copilot-cli", *args)


def test_setup_merges_with_other_servers_and_remove_restores_them(
        home: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    path = home / ".copilot" / "mcp-config.json"
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--dry-run")
    assert code == 0 and "would change (MCP server turnlake added)" in output, output
    assert read_json(path) == OTHER_CONFIG

    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0, output
    said = " ".join(output.split())
    assert (f"turnlake import copilot-cli --watch ~/.copilot/session-state --tenant acme "
            f"--user u-ana --lake {lake.resolve()}") in said
    config = read_json(path)
    for name, server in OTHER_CONFIG["mcpServers"].items():
        assert config["mcpServers"][name] == server
    ours = config["mcpServers"]["turnlake"]
    assert ours["type"] == "local" and Path(ours["command"]).is_absolute()
    assert ours["tools"] == ["*"] and ours["args"][-7:] == [
        "mcp", "--lake", str(lake.resolve()), "--tenant", "acme", "--user", "u-ana"]
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0 and "unchanged (MCP server turnlake unchanged)" in output, output

    code, output = run("--tenant", "acme", "--user", "u-ana", "--server",
                       "http://127.0.0.1:8700")
    assert code == 0, output
    assert read_json(path)["mcpServers"]["turnlake"] == {
        "type": "http", "url": "http://127.0.0.1:8700/mcp/",
        "headers": {"Authorization": "Bearer ${TURNLAKE_KEY}"}, "tools": ["*"]}
    assert "tlk_secret" not in path.read_text()
    assert '--server http://127.0.0.1:8700 --key "$TURNLAKE_RECORDER_KEY"' in \
        " ".join(output.split())

    code, output = run("--remove")
    assert code == 0, output
    assert read_json(path) == OTHER_CONFIG


def test_setup_refuses_what_it_cannot_merge(home: Path, tmp_path: Path) -> None:
    path = home / ".copilot" / "mcp-config.json"
    config = read_json(path)
    config["mcpServers"]["turnlake"] = {"type": "local", "command": "/opt/proxy", "args": []}
    path.write_text(json.dumps(config))
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 2 and 'already has an MCP server "turnlake"' in output
    code, output = run("--remove")
    assert code == 0 and read_json(path) == config  # not ours: left in place
    path.write_text("[]")
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 2 and "does not hold a JSON object" in output
