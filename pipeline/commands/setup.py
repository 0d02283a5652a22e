"""``turnlake setup``: wire turnlake into an agent's own configuration in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lake.errors import TurnlakeError
from pipeline.commands.common import app, fail, literal, out, styled

setup_app = typer.Typer(no_args_is_help=True,
                        help="Wire turnlake's hooks and MCP server into an agent's configuration.")
app.add_typer(setup_app, name="setup")

DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", help="Print the change to each file (a diff); write nothing.")]
RemoveOpt = Annotated[bool, typer.Option(
    "--remove", help="Take out what setup added (and nothing else).")]


@setup_app.command("claude-code")
def setup_claude_code(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant the turns belong to.")] = "",
    user: Annotated[str, typer.Option("--user", help="Your user id in the lake.")] = "",
    lake: Annotated[Path | None, typer.Option(
        "--lake", help="Lake folder the hooks write and the MCP server reads.")] = None,
    server: Annotated[str | None, typer.Option(
        "--server", help="A `turnlake serve` URL instead of a lake; the keys are read from "
                         "$TURNLAKE_RECORDER_KEY and $TURNLAKE_KEY when Claude Code runs, "
                         "never written.")] = None,
    scope: Annotated[str, typer.Option(
        "--scope", help="user (~/.claude/settings.json, ~/.claude.json) or project "
                        "(.claude/settings.json, .mcp.json).")] = "user",
    project: Annotated[Path, typer.Option(
        "--project", help="The project folder, for --scope project.")] = Path("."),
    recall: Annotated[bool, typer.Option(
        "--recall", help="Also add your relevant past turns to each prompt "
                         "(UserPromptSubmit hook).")] = False,
    dry_run: DryRunOpt = False,
    remove: RemoveOpt = False,
) -> None:
    """Set up Claude Code: the Stop/SessionEnd capture hook, the turnlake MCP server, and
    with --recall the prompt hook; merged into Claude Code's files, never dropping another
    hook or server. --remove takes out exactly what setup added."""
    from pipeline.setup.claude_code import Options, Target, plan

    try:
        if not remove and not (tenant and user):
            raise TurnlakeError("give --tenant and --user (whose turns the hooks record)")
        target = (Target(lake=lake, server=server) if not remove
                  else Target(server="http://removing"))
        changes = plan(Options(tenant=tenant, user=user, target=target, scope=scope,
                               project=project, recall=recall), remove=remove)
        for change in changes:
            notes = ", ".join(change.notes) or "nothing of turnlake's"
            if not change.changed:
                out.print(literal(f"{change.path}: unchanged ({notes})"), soft_wrap=True)
                continue
            if dry_run:
                out.print(styled((f"{change.path}: would change ({notes})", "bold")),
                          soft_wrap=True)
                out.print(literal(change.diff()), end="", soft_wrap=True)
            else:
                change.write()
                out.print(literal(f"{change.path}: {notes}"), soft_wrap=True)
    except (TurnlakeError, OSError) as exc:
        raise fail(exc if isinstance(exc, TurnlakeError) else TurnlakeError(str(exc))) from exc
    if not dry_run and not remove and server is not None:
        out.print(literal("Start Claude Code with TURNLAKE_RECORDER_KEY (a recorder key, for "
                          "the capture hook) and TURNLAKE_KEY (your user key, for the MCP "
                          "server and recall) in its environment."))
