"""``turnlake setup copilot-cli``: the turnlake MCP server in GitHub Copilot CLI's
``~/.copilot/mcp-config.json`` (``$COPILOT_HOME`` moves the folder).

Copilot CLI reads MCP servers from that one user file, so there is no project scope. Its
hooks do not name the session's event log, so capture is not a hook here: ``turnlake import
copilot-cli --watch ~/.copilot/session-state`` records the sessions as they change (setup
prints that command). The server is ``turnlake mcp`` over the lake (``"type": "local"``), or
the server's ``/mcp/`` endpoint (``"type": "http"``) with ``Authorization: Bearer
${TURNLAKE_KEY}``, which Copilot CLI expands from its environment: the key is never written.
``--remove`` takes out the ``turnlake`` server setup wrote, and nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

from lake.errors import TurnlakeError
from pipeline.setup.common import (
    SERVER_NAME,
    Options,
    bearer_header,
    mcp_argv,
    put_server,
    runs_mcp,
    take_server,
    turnlake_executable,
)
from pipeline.setup.jsonfiles import Change, Entry, drop_empty, section

HOME_ENV = "COPILOT_HOME"


def config_path(options: Options) -> Path:
    """Copilot CLI's mcp-config.json; TurnlakeError for ``--scope project``."""
    if options.scope != "user":
        raise TurnlakeError("Copilot CLI reads MCP servers from ~/.copilot/mcp-config.json "
                            "only: use --scope user")
    if options.home is None and os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser() / "mcp-config.json"
    return options.root() / ".copilot" / "mcp-config.json"


def plan(options: Options, *, remove: bool = False, executable: str | None = None
         ) -> list[Change]:
    """The change to Copilot CLI's mcp-config.json that sets turnlake up (or, with
    ``remove``, takes it out); nothing is written."""
    config = Change.load(config_path(options))
    if remove:
        if take_server(config.data.get("mcpServers"), _is_our_server):
            config.notes.append(f"MCP server {SERVER_NAME} removed")
        drop_empty(config.data, "mcpServers")
        return [config]
    servers = section(config.data, "mcpServers", config.path)
    server = _mcp_server(executable or turnlake_executable(), options)
    what = put_server(servers, server, _is_our_server, config.path)
    config.notes.append(f"MCP server {SERVER_NAME} {what}")
    return [config]


def _mcp_server(exe: str, options: Options) -> Entry:
    if options.target.server is not None:
        return {"type": "http", "url": options.target.mcp_url,
                "headers": {"Authorization": bearer_header()}, "tools": ["*"]}
    program, *args = mcp_argv(exe, options)
    return {"type": "local", "command": program, "args": args, "env": {}, "tools": ["*"]}


def _is_our_server(server: Entry) -> bool:
    if runs_mcp(server.get("command"), server.get("args")):
        return True
    headers = server.get("headers")
    return isinstance(headers, dict) and headers.get("Authorization") == bearer_header()
