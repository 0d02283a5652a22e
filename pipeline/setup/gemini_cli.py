"""``turnlake setup gemini-cli``: Gemini CLI's hooks and MCP server, in its ``settings.json``.

What it writes, in ``~/.gemini/settings.json`` (``--scope user``) or
``<project>/.gemini/settings.json`` (``--scope project``), merged with what is there:

* ``hooks.AfterAgent``: ``turnlake hook gemini-cli``, which records the session's new turns
  once the agent answered; with ``--recall``, ``hooks.BeforeAgent``: ``turnlake hook
  gemini-cli-recall``, which adds the user's relevant past turns to the prompt
  (``hookSpecificOutput.additionalContext``). Gemini CLI waits for both, so each names a
  timeout (in milliseconds, as Gemini CLI counts them);
* ``mcpServers.turnlake``: ``turnlake mcp`` over the lake (stdio), or the server's ``/mcp/``
  endpoint (``httpUrl``) with ``Authorization: Bearer ${TURNLAKE_KEY}``, which Gemini CLI
  expands from its environment when it loads the settings: the key is never written.

A hook is ours when its command runs ``turnlake hook gemini-cli...``; the MCP server
``turnlake`` is ours when it runs turnlake or sends the ``${TURNLAKE_KEY}`` bearer.
``--remove`` takes out those, and nothing else.
"""

from __future__ import annotations

from pipeline.setup.common import (
    SERVER_NAME,
    Options,
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

HOOK_COMMANDS = ("gemini-cli", "gemini-cli-recall")
HOOK_NAME = "turnlake"
RECALL_HOOK_NAME = "turnlake-recall"
# Milliseconds Gemini CLI gives each hook (its default is 60000); it waits for both.
CAPTURE_TIMEOUT_MS = 60_000
RECALL_TIMEOUT_MS = 10_000


def plan(options: Options, *, remove: bool = False, executable: str | None = None
         ) -> list[Change]:
    """The change to Gemini CLI's settings.json that sets turnlake up (or, with ``remove``,
    takes it out); nothing is written."""
    settings = Change.load(options.root() / ".gemini" / "settings.json")
    if remove:
        _remove(settings)
    else:
        _add(settings, options, executable or turnlake_executable())
    return [settings]


def _add(settings: Change, options: Options, exe: str) -> None:
    hooks = section(settings.data, "hooks", settings.path)
    wanted: list[tuple[str, Entry]] = [
        ("AfterAgent", {"type": "command", "name": HOOK_NAME,
                        "command": hook_command(exe, "gemini-cli", options),
                        "timeout": CAPTURE_TIMEOUT_MS})]
    if options.recall:
        wanted.append(("BeforeAgent", {
            "type": "command", "name": RECALL_HOOK_NAME,
            "command": hook_command(exe, "gemini-cli-recall", options),
            "timeout": RECALL_TIMEOUT_MS}))
    for event, hook in wanted:
        what = put_hook(hooks, event, hook, _is_our_hook, settings.path)
        settings.notes.append(f"{event} hook {what}")
    if not options.recall:
        settings.notes.extend(f"{event} hook removed" for event in drop_hooks(
            hooks, _is_our_hook, ("BeforeAgent",)))
    servers = section(settings.data, "mcpServers", settings.path)
    what = put_server(servers, _mcp_server(exe, options), _is_our_server, settings.path)
    settings.notes.append(f"MCP server {SERVER_NAME} {what}")


def _remove(settings: Change) -> None:
    hooks = settings.data.get("hooks")
    if isinstance(hooks, dict):
        settings.notes.extend(f"{event} hook removed"
                              for event in drop_hooks(hooks, _is_our_hook))
        drop_empty(settings.data, "hooks")
    if take_server(settings.data.get("mcpServers"), _is_our_server):
        settings.notes.append(f"MCP server {SERVER_NAME} removed")
    drop_empty(settings.data, "mcpServers")


def _mcp_server(exe: str, options: Options) -> Entry:
    if options.target.server is not None:
        return {"httpUrl": options.target.mcp_url,
                "headers": {"Authorization": bearer_header()}}
    program, *args = mcp_argv(exe, options)
    return {"command": program, "args": args}


def _is_our_hook(hook: Entry) -> bool:
    return shell_runs_hook(hook.get("command"), HOOK_COMMANDS)


def _is_our_server(server: Entry) -> bool:
    if runs_mcp(server.get("command"), server.get("args")):
        return True
    headers = server.get("headers")
    return isinstance(headers, dict) and headers.get("Authorization") == bearer_header()
