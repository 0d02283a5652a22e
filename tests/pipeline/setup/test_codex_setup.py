"""`turnlake setup codex` on a temporary HOME whose config.toml already holds comments,
other MCP servers and profiles: merged in with the layout kept, refused over another notify
program, and --remove gives back the file byte for byte. The notify it writes runs as Codex
runs it, posting to a server with the key from the environment and no lake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.pipeline.setup.setup_cli import run_setup

OTHER_CONFIG = """\
# Ana's Codex settings
model = "gpt-5-codex"  # the one I like
approval_policy = "on-request"

[mcp_servers.docs]
command = "npx"
args = ["-y", "@example/docs-mcp"]
env = { "DOCS_TOKEN_FILE" = "/home/ana/.docs" }

[profiles.fast]
model = "gpt-5-mini"
"""
FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures"
THREAD = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose Codex config already has settings and an MCP server of its own."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(OTHER_CONFIG)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.setenv("TURNLAKE_KEY", "tlk_secret_never_in_a_file")
    return home


def run(*args: str) -> tuple[int, str]:
    return run_setup("codex", *args)


def config(home: Path) -> dict[str, Any]:
    return tomllib.loads((home / ".codex" / "config.toml").read_text())


def test_setup_merges_keeps_the_layout_and_remove_restores_the_file(
        home: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    path = home / ".codex" / "config.toml"
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake), "--dry-run")
    assert code == 0, output
    assert "would change (notify added, MCP server turnlake added)" in " ".join(output.split())
    assert '+[mcp_servers.turnlake]' in output and path.read_text() == OTHER_CONFIG

    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0, output
    text, parsed = path.read_text(), config(home)
    # The user's comments, keys, server and profile are all still there, as written.
    for line in OTHER_CONFIG.splitlines():
        assert line in text.splitlines()
    assert parsed["mcp_servers"]["docs"]["args"] == ["-y", "@example/docs-mcp"]
    assert parsed["profiles"]["fast"] == {"model": "gpt-5-mini"}
    # notify is a top-level key (before the tables), the program by its absolute path.
    notify = parsed["notify"]
    assert Path(notify[0]).is_absolute() and notify[-6:] == [
        "--tenant", "acme", "--user", "u-ana", "--lake", str(lake.resolve())]
    assert notify[notify.index("hook") + 1] == "codex"
    server = parsed["mcp_servers"]["turnlake"]
    assert Path(server["command"]).is_absolute()
    assert server["args"][-7:] == ["mcp", "--lake", str(lake.resolve()), "--tenant", "acme",
                                   "--user", "u-ana"]

    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(lake))
    assert code == 0 and ": unchanged (notify unchanged, MCP server turnlake unchanged)" in \
        " ".join(output.split()), output
    # From the lake to a server: both entries are updated, the key is named, never written.
    code, output = run("--tenant", "acme", "--user", "u-ana", "--server",
                       "http://127.0.0.1:8700")
    assert code == 0, output
    parsed = config(home)
    assert parsed["mcp_servers"]["turnlake"] == {
        "url": "http://127.0.0.1:8700/mcp/", "bearer_token_env_var": "TURNLAKE_KEY"}
    assert parsed["notify"][-2:] == ["--server", "http://127.0.0.1:8700"]
    assert "tlk_secret" not in path.read_text()

    code, output = run("--remove")
    assert code == 0, output
    assert path.read_text() == OTHER_CONFIG
    code, output = run("--remove")
    assert code == 0 and "unchanged (nothing of turnlake's)" in output, output


def test_another_notify_program_is_never_replaced(home: Path, tmp_path: Path) -> None:
    path = home / ".codex" / "config.toml"
    mine = 'notify = ["/home/ana/bin/ding", "--loud"]\n' + OTHER_CONFIG
    path.write_text(mine)
    lake = str(tmp_path / "lake")
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", lake)
    said = " ".join(output.split())
    assert code == 2 and 'already has notify = ["/home/ana/bin/ding", "--loud"]' in said
    assert "chain both" in said and "--no-capture" in said
    assert path.read_text() == mine
    # The MCP server alone, the notify program left as it is; --remove keeps it too.
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", lake, "--no-capture")
    assert code == 0, output
    assert config(home)["notify"] == ["/home/ana/bin/ding", "--loud"]
    assert "turnlake" in config(home)["mcp_servers"]
    run("--remove")
    assert path.read_text() == mine


def test_project_scope_and_what_setup_refuses(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"),
                       "--scope", "project", "--project", str(project))
    assert code == 0, output
    assert "turnlake" in tomllib.loads(
        (project / ".codex" / "config.toml").read_text())["mcp_servers"]
    assert (home / ".codex" / "config.toml").read_text() == OTHER_CONFIG
    run("--remove", "--scope", "project", "--project", str(project))
    assert (project / ".codex" / "config.toml").read_text() == ""
    inline = 'mcp_servers = { docs = { command = "npx" } }\n'
    (home / ".codex" / "config.toml").write_text(inline)
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 0, output
    assert set(config(home)["mcp_servers"]) == {"docs", "turnlake"}
    run("--remove")
    assert (home / ".codex" / "config.toml").read_text() == inline
    (home / ".codex" / "config.toml").write_text("model = \n")
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 2 and "config.toml is not valid TOML (line 1" in output
    (home / ".codex" / "config.toml").write_text(
        '[mcp_servers.turnlake]\ncommand = "/opt/proxy"\n')
    code, output = run("--tenant", "acme", "--user", "u-ana", "--lake", str(tmp_path / "l"))
    assert code == 2 and 'already has an MCP server "turnlake"' in output


class _Recorder(BaseHTTPRequestHandler):
    """A `POST /v1/turns` that accepts every turn and remembers what it got."""

    seen: ClassVar[list[tuple[str, int]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = len(body["turns"])
        self.seen.append((self.headers["Authorization"], n))
        answer = {"accepted": n, "duplicates": 0, "rejected": 0,
                  "turns": [{"index": i, "status": "accepted"} for i in range(n)]}
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(answer).encode())

    def log_message(self, *args: object) -> None:
        pass


def test_the_notify_setup_writes_runs_as_codex_runs_it_with_no_lake(
        home: Path, tmp_path: Path) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        code, output = run("--tenant", "acme", "--user", "u-ana", "--server", url)
        assert code == 0, output
        notify = config(home)["notify"]
        codex_home = home / ".codex"
        day = codex_home / "sessions" / "2025" / "10" / "01"
        day.mkdir(parents=True)
        rollout = next((FIXTURES / "codex").glob("rollout-2025-10-01*.jsonl"))
        (day / rollout.name).write_bytes(b"".join(rollout.read_bytes().splitlines(
            keepends=True)[:-1]))
        payload = json.dumps({"type": "agent-turn-complete", "thread-id": THREAD,
                              "turn-id": "turn-3"})
        cwd = tmp_path / "somewhere"
        cwd.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLAKE_")}
        env.update(HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache"),
                   TURNLAKE_RECORDER_KEY="tlk_recorder", HF_HUB_OFFLINE="1")
        if Path(notify[0]).name != "turnlake":  # python -m pipeline.cli: as it was written
            assert notify[0] == sys.executable
        # Codex runs the notify argv with the turn's JSON appended.
        done = subprocess.run([*notify, payload], env=env, cwd=cwd, timeout=300,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    finally:
        server.shutdown()
        thread.join(timeout=10)
    log = (tmp_path / "cache" / "turnlake" / "hook-codex.log").read_text()
    assert _Recorder.seen == [("Bearer tlk_recorder", 3)], log
    # Its state is in the cache folder; nothing was written where Codex ran it.
    assert list((tmp_path / "cache" / "turnlake" / "capture" / "codex").glob("*.json"))
    assert list(cwd.iterdir()) == []
