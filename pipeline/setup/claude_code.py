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

from pipeline.setup.common import (
    KEY_ENV,
    SERVER_NAME,
    Options,
    Target,
    bearer_header,
    hook_command,
    mcp_argv,
    put_server,
    runs_mcp,
    shell_runs_hook,
    take_server,
    turnlake_executable,
)
from pipeline.setup.jsonfiles import Change, Entry, drop_empty, drop_hooks, put_hook, section

__all__ = ["KEY_ENV", "SERVER_NAME", "Options", "Target", "plan", "turnlake_executable"]

HOOK_COMMANDS = ("claude-code", "claude-code-recall")
# Seconds Claude Code gives each hook. SessionEnd hooks get 1.5 s unless they ask for more
# (up to 60 s), and Claude Code waits for them as it exits.
STOP_TIMEOUT_S = 120
SESSION_END_TIMEOUT_S = 30
RECALL_TIMEOUT_S = 10


def plan(options: Options, *, remove: bool = False, executable: str | None = None
         ) -> list[Change]:
    """The changes to Claude Code's files that set turnlake up (or, with ``remove``, take it
    out); nothing is written."""
    root = options.root()
    settings_path = root / ".claude" / "settings.json"
    mcp_path = root / (".claude.json" if options.scope == "user" else ".mcp.json")
    settings, mcp = Change.load(settings_path), Change.load(mcp_path)
    if remove:
        _remove(settings, mcp)
    else:
        _add(settings, mcp, options, executable or turnlake_executable())
    return [settings, mcp]


def _add(settings: Change, mcp: Change, options: Options, exe: str) -> None:
    hooks = section(settings.data, "hooks", settings.path)
    capture = hook_command(exe, "claude-code", options)
    wanted: list[tuple[str, Entry]] = [
        ("Stop", {"type": "command", "command": capture, "timeout": STOP_TIMEOUT_S,
                  "async": True}),
        ("SessionEnd", {"type": "command", "command": capture,
                        "timeout": SESSION_END_TIMEOUT_S})]
    if options.recall:
        wanted.append(("UserPromptSubmit", {
            "type": "command", "command": hook_command(exe, "claude-code-recall", options),
            "timeout": RECALL_TIMEOUT_S}))
    for event, hook in wanted:
        what = put_hook(hooks, event, hook, _is_our_hook, settings.path)
        settings.notes.append(f"{event} hook {what}")
    if not options.recall:
        # Setup without --recall after one with it: recall goes.
        settings.notes.extend(f"{event} hook removed" for event in drop_hooks(
            hooks, _is_our_hook, ("UserPromptSubmit",)))
    servers = section(mcp.data, "mcpServers", mcp.path)
    what = put_server(servers, _mcp_server(exe, options), _is_our_server, mcp.path)
    mcp.notes.append(f"MCP server {SERVER_NAME} {what}")


def _remove(settings: Change, mcp: Change) -> None:
    hooks = settings.data.get("hooks")
    if isinstance(hooks, dict):
        settings.notes.extend(f"{event} hook removed"
                              for event in drop_hooks(hooks, _is_our_hook))
        drop_empty(settings.data, "hooks")
    if take_server(mcp.data.get("mcpServers"), _is_our_server):
        mcp.notes.append(f"MCP server {SERVER_NAME} removed")
    drop_empty(mcp.data, "mcpServers")


def _mcp_server(exe: str, options: Options) -> Entry:
    if options.target.server is not None:
        return {"type": "http", "url": options.target.mcp_url,
                "headers": {"Authorization": bearer_header()}}
    program, *args = mcp_argv(exe, options)
    return {"type": "stdio", "command": program, "args": args, "env": {}}


def _is_our_hook(hook: Entry) -> bool:
    return shell_runs_hook(hook.get("command"), HOOK_COMMANDS)


def _is_our_server(server: Entry) -> bool:
    if runs_mcp(server.get("command"), server.get("args")):
        return True
    headers = server.get("headers")
    return isinstance(headers, dict) and headers.get("Authorization") == bearer_header()
