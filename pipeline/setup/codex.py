"""``turnlake setup codex``: Codex's ``notify`` program and MCP server, in its ``config.toml``.

What it writes, in ``$CODEX_HOME/config.toml`` (``~/.codex/config.toml``; ``--scope user``) or
``<project>/.codex/config.toml`` (``--scope project``, read by Codex in trusted projects only):

* ``notify = [".../turnlake", "hook", "codex", ...]``: Codex runs it after every turn with the
  turn's JSON appended, and does not wait for it;
* ``[mcp_servers.turnlake]``: ``turnlake mcp`` over the lake (stdio), or the server's
  ``/mcp/`` endpoint with ``bearer_token_env_var = "TURNLAKE_KEY"``, which Codex reads from
  its environment: the key is never written into the file.

Codex runs a single notify program. A notify program of someone else's is never replaced:
setup refuses and says how to chain both, or (``capture=False``) sets up the MCP server only.
The file is edited with tomlkit, so every comment, key and table of the user's stays as it
was, and ``--remove`` takes out our ``notify`` and ``[mcp_servers.turnlake]`` and nothing else.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import InlineTable, Table

from lake.errors import TurnlakeError
from pipeline.setup.common import (
    KEY_ENV,
    SERVER_NAME,
    Options,
    hook_argv,
    mcp_argv,
    put_server,
    runs_hook,
    runs_mcp,
    take_server,
    turnlake_executable,
)
from pipeline.setup.tomlfiles import TomlChange

HOOK_COMMANDS = ("codex",)
# Seconds Codex waits for the MCP server to start (its default is 10): `turnlake mcp` over a
# lake imports the search stack first.
MCP_STARTUP_TIMEOUT_S = 30


def config_path(options: Options) -> Path:
    """The config.toml setup edits for these options."""
    if options.scope == "user" and options.home is None and os.environ.get("CODEX_HOME"):
        return Path(os.environ["CODEX_HOME"]).expanduser() / "config.toml"
    return options.root() / ".codex" / "config.toml"


def plan(options: Options, *, remove: bool = False, capture: bool = True,
         executable: str | None = None) -> list[TomlChange]:
    """The change to Codex's config.toml that sets turnlake up (or, with ``remove``, takes it
    out); nothing is written."""
    config = TomlChange.load(config_path(options))
    try:
        if remove:
            _remove(config)
        else:
            _add(config, options, executable or turnlake_executable(), capture=capture)
    except (ValueError, TypeError) as exc:  # tomlkit refusing a shape it cannot hold
        raise TurnlakeError(f"cannot merge turnlake's entries into {config.path}: {exc}; "
                            "edit the file by hand (see the Codex page of the docs)") from None
    return [config]


def _add(config: TomlChange, options: Options, exe: str, *, capture: bool) -> None:
    doc = config.data
    notify = doc.get("notify")
    if capture:
        wanted = hook_argv(exe, "codex", options)
        if notify is not None and not _is_our_notify(notify):
            raise TurnlakeError(
                f"{config.path} already has notify = {_show(notify)}, and Codex runs a single "
                "notify program. Either chain both: write a script that runs that program and "
                f"then `{shlex.join(wanted)} \"$1\"` (Codex appends the turn's JSON as the last "
                "argument), set notify to the script, and run setup again with --no-capture "
                "for the MCP server; or remove that notify line and run setup again.")
        if notify is not None and list(notify) == wanted:
            config.notes.append("notify unchanged")
        else:
            config.notes.append("notify " + ("updated" if notify is not None else "added"))
            doc["notify"] = wanted
    elif notify is not None and _is_our_notify(notify):
        del doc["notify"]
        config.notes.append("notify removed")
    servers = doc.get("mcp_servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    elif not isinstance(servers, dict):
        raise TurnlakeError(f"mcp_servers in {config.path} is not a table")
    existing = servers.get(SERVER_NAME)
    server = _mcp_server(exe, options)
    if existing is not None and _is_our_server(existing) and _plain(existing) == server:
        config.notes.append(f"MCP server {SERVER_NAME} unchanged")
        return
    # An inline `mcp_servers = { ... }` takes our server inline too (it cannot hold a table).
    entry = _table(server, inline=isinstance(servers, InlineTable))
    what = put_server(servers, entry, _is_our_server, config.path)
    config.notes.append(f"MCP server {SERVER_NAME} {what}")


def _remove(config: TomlChange) -> None:
    doc = config.data
    notify = doc.get("notify")
    if notify is not None and _is_our_notify(notify):
        del doc["notify"]
        config.notes.append("notify removed")
    servers = doc.get("mcp_servers")
    if take_server(servers, _is_our_server):
        config.notes.append(f"MCP server {SERVER_NAME} removed")
    if isinstance(servers, dict) and not servers:
        del doc["mcp_servers"]


def _mcp_server(exe: str, options: Options) -> dict[str, Any]:
    if options.target.server is not None:
        return {"url": options.target.mcp_url, "bearer_token_env_var": KEY_ENV}
    program, *args = mcp_argv(exe, options)
    return {"command": program, "args": args, "startup_timeout_sec": MCP_STARTUP_TIMEOUT_S}


def _table(server: dict[str, Any], *, inline: bool = False) -> Table | InlineTable:
    table: Table | InlineTable = tomlkit.inline_table() if inline else tomlkit.table()
    for key, value in server.items():
        table[key] = value
    if isinstance(table, Table):
        table.add(tomlkit.nl())  # a blank line before the table after it, taken out with it
    return table


def _plain(value: Any) -> Any:
    """A tomlkit value as plain Python (dicts, lists, str, int)."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def _show(value: Any) -> str:
    return str(tomlkit.item(_plain(value)).as_string())


def _is_our_notify(notify: Any) -> bool:
    words = _plain(notify)
    return isinstance(words, list) and all(isinstance(w, str) for w in words) and runs_hook(
        words, HOOK_COMMANDS)


def _is_our_server(server: Any) -> bool:
    plain = _plain(server)
    if not isinstance(plain, dict):
        return False
    return runs_mcp(plain.get("command"), plain.get("args")) or (
        "url" in plain and plain.get("bearer_token_env_var") == KEY_ENV)
