"""Commands for agents: ``turnlake mcp`` (the MCP tools over stdio) and ``turnlake pull``
(materialize hosted files into a workspace, and clean it up)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table as RichTable

from lake.errors import QueryError, TurnlakeError
from lake.search.access import Principal
from lake.settings import Settings
from lake.store import LakeStore
from lake.workspace import CleanReport, PullReport, WorkspacePuller, clean
from pipeline.commands.common import (
    LakeOption,
    app,
    console,
    existing_lake,
    fail,
    literal,
    out,
    styled,
)
from pipeline.commands.query import AnalystOption, JsonOption, TenantOption, UserOption
from pipeline.contract import principal_from

KeyOption = Annotated[str | None, typer.Option(
    "--key", envvar="TURNLAKE_KEY",
    help="API key whose principal the tools act as (default: $TURNLAKE_KEY).")]


def agent_principal(settings: Settings, key: str | None, tenant: str | None,
                    user: str | None, analyst: bool) -> Principal:
    """The principal of ``--key``, or of ``--tenant`` with ``--user`` / ``--analyst``."""
    from pipeline.mcp_server import resolve_key

    if key is not None:
        if tenant or user or analyst:
            raise QueryError("give --key or --tenant/--user/--analyst, not both")
        return resolve_key(settings, key)
    return principal_from(tenant, user, analyst)


@app.command("mcp")
def mcp_command(
    key: KeyOption = None,
    tenant: TenantOption = None,
    user: UserOption = None,
    analyst: AnalystOption = False,
    workspace: Annotated[Path, typer.Option(
        help="Folder pull_files writes into (default: the current folder).")] = Path("."),
    no_pull: Annotated[bool, typer.Option("--no-pull", help="Offer no pull_files tool.")
                       ] = False,
    lake: LakeOption = None,
) -> None:
    """Serve the MCP tools (search_conversations, list_turns, get_turn, pull_files) on
    stdio, as the principal of --key (or of --tenant with --user / --analyst)."""
    from pipeline.mcp_server import create_mcp_server

    # A lake that does not exist is what to say (exit 2, as `search` does), not "unknown key"
    # nor a server whose every answer is empty, which the tools tell an agent means nothing.
    settings = existing_lake(lake)
    try:
        principal = agent_principal(settings, key, tenant, user, analyst)
        if not no_pull and not workspace.is_dir():
            raise QueryError(f"--workspace {workspace} is not a folder")
    except TurnlakeError as exc:
        raise fail(exc) from exc
    # stdout carries the protocol from here on: anything else goes to stderr.
    console.print(literal(f"turnlake MCP server on stdio as {principal.describe()}"))
    create_mcp_server(settings, principal,
                      workspace=None if no_pull else workspace.resolve()).run("stdio")


@app.command()
def pull(
    targets: Annotated[list[str] | None, typer.Argument(
        help="conv:fi: refs and/or turns as CONVERSATION/TURN.")] = None,
    into: Annotated[Path | None, typer.Option(
        "--into", help="Workspace folder to write into (made when missing).")] = None,
    clean_dir: Annotated[Path | None, typer.Option(
        "--clean", help="Remove what pull wrote into this folder, and nothing else.")] = None,
    key: KeyOption = None,
    tenant: TenantOption = None,
    user: UserOption = None,
    analyst: AnalystOption = False,
    as_json: JsonOption = False,
    lake: LakeOption = None,
) -> None:
    """Materialize hosted files and user attachments into DIR/files/ and
    DIR/user.attachments/ (exit 1 if something that has bytes was not pulled)."""
    try:
        if clean_dir is not None:
            if targets or into is not None:
                raise QueryError("--clean DIR takes no targets and no --into")
            _show_clean(clean(clean_dir), as_json)
            return
        if not targets or into is None:
            raise QueryError("give REF_OR_TURN... --into DIR (or --clean DIR)")
        settings = existing_lake(lake)
        principal = agent_principal(settings, key, tenant, user, analyst)
        report = WorkspacePuller(LakeStore(settings.lake)).pull(principal, targets, into)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _show_pull(report, as_json)
    if not report.ok:
        raise typer.Exit(1)


def _show_pull(report: PullReport, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps({
            "into": report.into, "manifest": report.manifest, "ok": report.ok,
            "items": [{**item.__dict__, "expires_at": item.expires_at.isoformat()
                       if item.expires_at else None} for item in report.items]}))
        return
    table = RichTable("status", "kind", "path", "ref / target", "note")
    for item in report.items:
        colour = "green" if item.ok else "dim" if item.status == "not_hosted" else "red"
        table.add_row(styled((item.status, colour)), item.kind, literal(item.path or ""),
                      literal(item.ref or item.target), literal(item.message))
    out.print(table)
    done = sum(item.ok for item in report.items)
    out.print(literal(f"{done} of {len(report.items)} files in {report.into}; "
                      f"manifest {report.manifest}"))


def _show_clean(report: CleanReport, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(report.__dict__))
        return
    for path in report.kept:
        console.print(styled(("kept", "yellow"), f" {path}: changed since pull wrote it"))
    out.print(literal(f"removed {len(report.removed)} files and {len(report.folders_removed)} "
                      f"folders pull wrote in {report.into}"))
