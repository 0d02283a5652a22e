"""``turnlake setup``: wire turnlake into an agent's own configuration in one command."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lake.errors import TurnlakeError
from pipeline.commands.common import app, fail, literal, out, styled

if TYPE_CHECKING:
    from pipeline.setup.common import Options
    from pipeline.setup.jsonfiles import Change
    from pipeline.setup.tomlfiles import TomlChange

setup_app = typer.Typer(no_args_is_help=True,
                        help="Wire turnlake's hooks and MCP server into an agent's configuration.")
app.add_typer(setup_app, name="setup")

DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", help="Print the change to each file (a diff); write nothing.")]
RemoveOpt = Annotated[bool, typer.Option(
    "--remove", help="Take out what setup added (and nothing else).")]
TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant the turns belong to.")]
UserOpt = Annotated[str, typer.Option("--user", help="Your user id in the lake.")]
LakeOpt = Annotated[Path | None, typer.Option(
    "--lake", help="Lake folder the hooks write and the MCP server reads.")]
ProjectOpt = Annotated[Path, typer.Option(
    "--project", help="The project folder, for --scope project.")]
KEYS_NOTE = ("Start {agent} with TURNLAKE_RECORDER_KEY (a recorder key, for the capture "
             "hook) and TURNLAKE_KEY (your user key, for the MCP server{recall}) in its "
             "environment.")


def _setup(plan: Callable[[Options], Sequence[Change | TomlChange]],
           tenant: str, user: str, lake: Path | None, server: str | None, *, scope: str,
           project: Path, recall: bool, dry_run: bool, remove: bool) -> None:
    """Plan the agent's changes and print them (--dry-run) or write them."""
    from pipeline.setup.common import Options, Target

    try:
        if not remove and not (tenant and user):
            raise TurnlakeError("give --tenant and --user (whose turns the hooks record)")
        target = (Target(lake=lake, server=server) if not remove
                  else Target(server="http://removing"))
        changes = plan(Options(tenant=tenant, user=user, target=target, scope=scope,
                               project=project, recall=recall))
        _apply(changes, dry_run)
    except (TurnlakeError, OSError) as exc:
        raise fail(exc if isinstance(exc, TurnlakeError) else TurnlakeError(str(exc))) from exc


def _apply(changes: Sequence[Change | TomlChange], dry_run: bool) -> None:
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
    from pipeline.setup.claude_code import plan

    _setup(lambda options: plan(options, remove=remove), tenant, user, lake,
           server, scope=scope, project=project, recall=recall, dry_run=dry_run, remove=remove)
    if not dry_run and not remove and server is not None:
        out.print(literal(KEYS_NOTE.format(agent="Claude Code", recall=" and recall")))


@setup_app.command("codex")
def setup_codex(
    tenant: TenantOpt = "",
    user: UserOpt = "",
    lake: LakeOpt = None,
    server: Annotated[str | None, typer.Option(
        "--server", help="A `turnlake serve` URL instead of a lake; the keys are read from "
                         "$TURNLAKE_RECORDER_KEY and $TURNLAKE_KEY when Codex runs, never "
                         "written.")] = None,
    scope: Annotated[str, typer.Option(
        "--scope", help="user ($CODEX_HOME/config.toml, else ~/.codex/config.toml) or project "
                        "(.codex/config.toml, read in trusted projects).")] = "user",
    project: ProjectOpt = Path("."),
    capture: Annotated[bool, typer.Option(
        "--capture/--no-capture", help="Set Codex's notify program to the capture hook "
                                       "(--no-capture: the MCP server only, e.g. when you "
                                       "chain notify yourself).")] = True,
    dry_run: DryRunOpt = False,
    remove: RemoveOpt = False,
) -> None:
    """Set up Codex: its notify program (the capture hook) and the turnlake MCP server, merged
    into Codex's config.toml with its comments and other keys kept. Another notify program
    is never replaced. --remove takes out exactly what setup added."""
    from pipeline.setup.codex import plan

    _setup(lambda options: plan(options, remove=remove, capture=capture), tenant, user, lake,
           server, scope=scope, project=project, recall=False, dry_run=dry_run, remove=remove)
    if not dry_run and not remove and server is not None:
        out.print(literal(KEYS_NOTE.format(agent="Codex", recall="")))


@setup_app.command("gemini-cli")
def setup_gemini_cli(
    tenant: TenantOpt = "",
    user: UserOpt = "",
    lake: LakeOpt = None,
    server: Annotated[str | None, typer.Option(
        "--server", help="A `turnlake serve` URL instead of a lake; the keys are read from "
                         "$TURNLAKE_RECORDER_KEY and $TURNLAKE_KEY when Gemini CLI runs, never "
                         "written.")] = None,
    scope: Annotated[str, typer.Option(
        "--scope", help="user (~/.gemini/settings.json) or project "
                        "(.gemini/settings.json).")] = "user",
    project: ProjectOpt = Path("."),
    recall: Annotated[bool, typer.Option(
        "--recall", help="Also add your relevant past turns to each prompt "
                         "(BeforeAgent hook).")] = False,
    dry_run: DryRunOpt = False,
    remove: RemoveOpt = False,
) -> None:
    """Set up Gemini CLI: the AfterAgent capture hook, the turnlake MCP server, and with
    --recall the BeforeAgent prompt hook; merged into Gemini CLI's settings.json, never
    dropping another hook or server. --remove takes out exactly what setup added."""
    from pipeline.setup.gemini_cli import plan

    _setup(lambda options: plan(options, remove=remove), tenant, user, lake, server,
           scope=scope, project=project, recall=recall, dry_run=dry_run, remove=remove)
    if not dry_run and not remove and server is not None:
        out.print(literal(KEYS_NOTE.format(agent="Gemini CLI",
                                           recall=" and recall" if recall else "")))


@setup_app.command("copilot-cli")
def setup_copilot_cli(
    tenant: TenantOpt = "",
    user: UserOpt = "",
    lake: LakeOpt = None,
    server: Annotated[str | None, typer.Option(
        "--server", help="A `turnlake serve` URL instead of a lake; the key is read from "
                         "$TURNLAKE_KEY when Copilot CLI runs, never written.")] = None,
    dry_run: DryRunOpt = False,
    remove: RemoveOpt = False,
) -> None:
    """Set up GitHub Copilot CLI: the turnlake MCP server in ~/.copilot/mcp-config.json
    ($COPILOT_HOME), merged with the servers there. Copilot CLI has no usable capture hook:
    setup prints the `turnlake import copilot-cli --watch` command that records its sessions.
    --remove takes out exactly what setup added."""
    import os
    import shlex

    from pipeline.setup.copilot_cli import HOME_ENV, plan

    _setup(lambda options: plan(options, remove=remove), tenant, user, lake, server,
           scope="user", project=Path("."), recall=False, dry_run=dry_run, remove=remove)
    if dry_run or remove:
        return
    if server is not None:
        out.print(literal("Start Copilot CLI with TURNLAKE_KEY (your user key, for the MCP "
                          "server) in its environment."))
    target = (["--server", server] if server is not None
              else ["--lake", str(lake.expanduser().resolve())] if lake is not None else [])
    sessions = os.environ.get(HOME_ENV) or "~/.copilot"
    watch = ["turnlake", "import", "copilot-cli", "--watch", f"{sessions}/session-state",
             "--tenant", tenant, "--user", user, *target]
    # "~" is left for the user's shell to expand.
    command = shlex.join(watch).replace("'~/.copilot/session-state'", "~/.copilot/session-state")
    out.print(literal("Copilot CLI has no capture hook: record its sessions with\n  " + command
                      + (" --key \"$TURNLAKE_RECORDER_KEY\"" if server is not None else "")),
              soft_wrap=True)
