"""``turnlake setup claude-code``: Claude Code's hooks and MCP server, at user or project level.

What it writes (Claude Code's own files, merged with what they hold):

* hooks, in ``~/.claude/settings.json`` (``--scope user``) or ``<project>/.claude/settings.json``
  (``--scope project``): ``Stop`` (in the background: ``"async": true``, so the user never
  waits for an embedding) and ``SessionEnd`` run ``turnlake hook claude-code``; with
  ``--recall``, ``UserPromptSubmit`` runs ``turnlake hook claude-code-recall``;
* the MCP server ``turnlake``, in ``~/.claude.json`` (user) or ``<project>/.mcp.json``
  (project): ``turnlake mcp`` over the lake (stdio), or the server's ``/mcp/`` endpoint over
  HTTP with ``Authorization: Bearer ${TURNLAKE_KEY}``, which Claude Code expands from the
  environment: the key is never written into a file.

Every command names the absolute path of the ``turnlake`` that ran setup, so the hooks work
whatever PATH Claude Code was started with. A hook is ours when its command runs
``turnlake hook claude-code...``; the MCP server ``turnlake`` is ours when it runs turnlake or
sends the ``${TURNLAKE_KEY}`` bearer. ``--remove`` takes out those, and nothing else.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from lake.errors import TurnlakeError
from pipeline.setup.jsonfiles import Change, Entry, drop_empty, drop_hooks, put_hook, section

SERVER_NAME = "turnlake"
KEY_ENV = "TURNLAKE_KEY"
HOOK_COMMANDS = ("claude-code", "claude-code-recall")
# Seconds Claude Code gives each hook. SessionEnd hooks get 1.5 s unless they ask for more
# (up to 60 s), and Claude Code waits for them as it exits.
STOP_TIMEOUT_S = 120
SESSION_END_TIMEOUT_S = 30
RECALL_TIMEOUT_S = 10


@dataclass(frozen=True)
class Target:
    """Where the turns go: a lake folder, or a ``turnlake serve`` URL (key from the
    environment)."""

    lake: Path | None = None
    server: str | None = None

    def __post_init__(self) -> None:
        if (self.lake is None) == (self.server is None):
            raise TurnlakeError("give --lake FOLDER or --server URL (one of them)")
        if self.server is not None and not self.server.startswith(("http://", "https://")):
            raise TurnlakeError(f"--server must be an http(s) URL, got {self.server!r}")


@dataclass(frozen=True)
class Options:
    """What ``setup claude-code`` was asked for."""

    tenant: str
    user: str
    target: Target
    scope: str = "user"
    project: Path = Path(".")
    recall: bool = False
    home: Path | None = None


def turnlake_executable() -> str:
    """The absolute path of the ``turnlake`` command that is running (else the one installed
    beside this interpreter, else the one on PATH, else ``python -m pipeline.cli`` of this
    interpreter)."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "turnlake" and argv0.exists():
        return str(argv0.absolute())
    # The script installed beside this interpreter (a virtualenv's bin folder).
    beside = Path(sys.executable).parent / "turnlake"
    if beside.is_file():
        return str(beside.absolute())
    found = shutil.which("turnlake")
    if found:
        return str(Path(found).resolve())
    return f"{shlex.quote(sys.executable)} -m pipeline.cli"


def plan(options: Options, *, remove: bool = False, executable: str | None = None
         ) -> list[Change]:
    """The changes to Claude Code's files that set turnlake up (or, with ``remove``, take it
    out); nothing is written."""
    if options.scope not in ("user", "project"):
        raise TurnlakeError(f"--scope must be user or project, got {options.scope!r}")
    home = options.home or Path.home()
    if options.scope == "user":
        settings_path, mcp_path = home / ".claude" / "settings.json", home / ".claude.json"
    else:
        root = options.project.resolve()
        settings_path, mcp_path = root / ".claude" / "settings.json", root / ".mcp.json"
    settings, mcp = Change.load(settings_path), Change.load(mcp_path)
    if remove:
        _remove(settings, mcp)
    else:
        _add(settings, mcp, options, executable or turnlake_executable())
    return [settings, mcp]


def _add(settings: Change, mcp: Change, options: Options, exe: str) -> None:
    hooks = section(settings.data, "hooks", settings.path)
    capture = _hook_command(exe, "claude-code", options)
    wanted: list[tuple[str, Entry]] = [
        ("Stop", {"type": "command", "command": capture, "timeout": STOP_TIMEOUT_S,
                  "async": True}),
        ("SessionEnd", {"type": "command", "command": capture,
                        "timeout": SESSION_END_TIMEOUT_S})]
    if options.recall:
        wanted.append(("UserPromptSubmit", {
            "type": "command", "command": _hook_command(exe, "claude-code-recall", options),
            "timeout": RECALL_TIMEOUT_S}))
    for event, hook in wanted:
        what = put_hook(hooks, event, hook, _is_our_hook, settings.path)
        settings.notes.append(f"{event} hook {what}")
    if not options.recall:
        # Setup without --recall after one with it: recall goes.
        settings.notes.extend(f"{event} hook removed" for event in drop_hooks(
            hooks, _is_our_hook, ("UserPromptSubmit",)))
    servers = section(mcp.data, "mcpServers", mcp.path)
    server = _mcp_server(exe, options)
    existing = servers.get(SERVER_NAME)
    if existing is not None and not (isinstance(existing, dict) and _is_our_server(existing)):
        raise TurnlakeError(f'{mcp.path} already has an MCP server "{SERVER_NAME}" that '
                            "turnlake setup did not write; rename or remove it first")
    servers[SERVER_NAME] = server
    mcp.notes.append(f"MCP server {SERVER_NAME} " + (
        "unchanged" if existing == server else "updated" if existing else "added"))


def _remove(settings: Change, mcp: Change) -> None:
    hooks = settings.data.get("hooks")
    if isinstance(hooks, dict):
        settings.notes.extend(f"{event} hook removed"
                              for event in drop_hooks(hooks, _is_our_hook))
        drop_empty(settings.data, "hooks")
    servers = mcp.data.get("mcpServers")
    if isinstance(servers, dict):
        existing = servers.get(SERVER_NAME)
        if isinstance(existing, dict) and _is_our_server(existing):
            del servers[SERVER_NAME]
            mcp.notes.append(f"MCP server {SERVER_NAME} removed")
        drop_empty(mcp.data, "mcpServers")


def _hook_command(exe: str, command: str, options: Options) -> str:
    parts = [exe, "hook", command, "--tenant", options.tenant, "--user", options.user]
    target = options.target
    if target.server is not None:
        parts += ["--server", target.server]
    else:
        assert target.lake is not None
        parts += ["--lake", str(target.lake.expanduser().resolve())]
    # The executable may be "python -m pipeline.cli": already quoted, kept whole.
    return " ".join([exe] + [shlex.quote(p) for p in parts[1:]])


def _mcp_server(exe: str, options: Options) -> Entry:
    target = options.target
    if target.server is not None:
        return {"type": "http", "url": target.server.rstrip("/") + "/mcp/",
                "headers": {"Authorization": f"Bearer ${{{KEY_ENV}}}"}}
    assert target.lake is not None
    program, *prefix = shlex.split(exe)
    return {"type": "stdio", "command": program,
            "args": [*prefix, "mcp", "--lake", str(target.lake.expanduser().resolve()),
                     "--tenant", options.tenant, "--user", options.user],
            "env": {}}


def _runs_turnlake(words: list[str]) -> list[str] | None:
    """The words after the turnlake program (``turnlake`` or ``python -m pipeline.cli``)."""
    if words and Path(words[0]).name == "turnlake":
        return words[1:]
    if len(words) >= 3 and words[1:3] == ["-m", "pipeline.cli"]:
        return words[3:]
    return None


def _is_our_hook(hook: Entry) -> bool:
    command = hook.get("command")
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    rest = _runs_turnlake(words)
    return rest is not None and len(rest) >= 2 and rest[0] == "hook" and rest[1] in HOOK_COMMANDS


def _is_our_server(server: Entry) -> bool:
    command, args = server.get("command"), server.get("args")
    if isinstance(command, str):
        words = [command, *(a for a in args if isinstance(a, str))] if isinstance(
            args, list) else [command]
        rest = _runs_turnlake(words)
        return rest is not None and rest[:1] == ["mcp"]
    headers = server.get("headers")
    return isinstance(headers, dict) and headers.get("Authorization") == f"Bearer ${{{KEY_ENV}}}"
