"""``turnlake import`` and ``turnlake hook``: bring third-party chat exports and live Claude
Code sessions into the lake."""

from __future__ import annotations

import os
import re
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lake.errors import TurnlakeError
from lake.settings import Settings
from pipeline.commands.common import (
    LakeOption,
    advised_reason,
    app,
    console,
    erase_settler,
    fail,
    literal,
    out,
    settings_from,
    styled,
)
from pipeline.commands.embedding_opts import RuntimeOption, with_runtime
from pipeline.commands.index import RayCpusOption, RayFlagCommand, RayOption

if TYPE_CHECKING:
    from pipeline.importers import ImportStream
    from pipeline.importers.live import CaptureReport, ServerTarget

# The importers, ingest and the Delta tables load when a command runs, not when the command
# line starts: a Stop hook pays for every import on each call.

import_app = typer.Typer(no_args_is_help=True,
                         help="Import Claude Code transcripts or ChatGPT exports.")
app.add_typer(import_app, name="import")
hook_app = typer.Typer(no_args_is_help=True,
                       help="Live capture from agent hosts' hooks (Claude Code's Stop hook).")
app.add_typer(hook_app, name="hook")

TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant to import into.")]
UserOpt = Annotated[str, typer.Option("--user", help="User id the turns belong to.")]
ReplaceOpt = Annotated[bool, typer.Option(
    "--replace/--no-replace",
    help="Supersede stored turns the export changed (else quarantine them as conflicts).")]
ServerOpt = Annotated[str | None, typer.Option(
    "--server", help="Post turns to this `turnlake serve` URL instead of writing the lake.")]
KeyOpt = Annotated[str | None, typer.Option("--key", help="API key for --server.")]
HookKeyOpt = Annotated[str | None, typer.Option(
    "--key", envvar=["TURNLAKE_RECORDER_KEY", "TURNLAKE_KEY"],
    help="A recorder key for --server (default: $TURNLAKE_RECORDER_KEY, else $TURNLAKE_KEY, "
         "so no file holds it).")]
HOOK_LOG_ENV = "TURNLAKE_HOOK_LOG"
# The options of every recall-at-the-prompt hook (hook claude-code-recall, gemini-cli-recall).
RecallServerOpt = Annotated[str | None, typer.Option(
    "--server", help="Search through this warm `turnlake serve` (user key: --key or "
                     "$TURNLAKE_KEY).")]
RecallKeyOpt = Annotated[str | None, typer.Option(
    "--key", help="Your user key for --server (default: $TURNLAKE_KEY).")]
RecallBudgetOpt = Annotated[int, typer.Option(
    help="Tokens the added context may take (characters / 4).")]
RecallFloorOpt = Annotated[float, typer.Option(
    "--min-relevance", help="Only turns at least this relevant (0-1).")]
RecallTurnsOpt = Annotated[int, typer.Option(help="At most this many turns.")]


def _run(stream: ImportStream, lake: str | None, embed: bool, index: bool, *,
         replace: bool = True, runtime: str | None = None, ray: str | None = None,
         ray_cpus: int | None = None) -> None:
    from pipeline.ingest import Ingestor, Quarantined
    from pipeline.progress import job_progress
    from pipeline.ray_ingest import ingest_job

    settings = with_runtime(settings_from(lake), runtime)
    try:
        if ray_cpus is not None and ray is None:
            raise TurnlakeError("--ray-cpus needs --ray")
        with job_progress() as progress:
            job = ingest_job(settings, records=stream, embed=embed, index=index,  # type: ignore[arg-type]
                             replace=replace, ray=ray, ray_cpus=ray_cpus,
                             settle=erase_settler(settings) if replace else None,
                             on_line=progress.counter("importing turns"),
                             on_embedded=progress.counter("embedding rows"),
                             on_partition=progress.partitions("building indexes"),
                             on_embedded_partition=progress.partitions("embedding on Ray"))
        problems = [Quarantined(p.source, _line(p.location), f"{p.location}: {p.reason}", p.raw)
                    for p in stream.problems]
        if problems:
            Ingestor(settings).quarantine(problems)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    for p in stream.problems[:20]:
        console.print(styled(("quarantined", "yellow"), f" {p.source} {p.location}: {p.reason}"))
    for q in job.ingest.conflicts[:20]:
        console.print(styled(("conflict", "yellow"), f" {advised_reason(q)}"))
    skipped = ", ".join(f"{n} {reason}" for reason, n in stream.skipped.most_common())
    counted = ", ".join(f"{n} {what}" for what, n in stream.counted.most_common())
    report = job.ingest
    out.print(literal(f"imported {report.accepted} turns, {report.duplicates} already there, "
              f"{len(stream.problems) + len(report.quarantined)} quarantined"
              + (f", {len(report.conflicts)} conflicts" if report.conflicts else "")
              + (f", {report.replaced} replaced" if report.replaced else "")
              + (f"; skipped: {skipped}" if skipped else "")
              + (f"; recorded as: {counted}" if counted else "")))
    # Nothing usable came out of the input, and something was wrong with it (a file that is
    # not an export, the wrong importer): a script must be able to tell. A run that found
    # every turn already there read turns, and exits 0.
    turns_read = (report.accepted + report.duplicates + report.replaced
                  + len(report.conflicts))
    if not turns_read and (stream.problems or report.quarantined):
        console.print(styled(("error:", "bold red"), " the input yielded no turn; its "
                             "problems are quarantined (`turnlake quarantine` lists them)"))
        raise typer.Exit(1)


def _line(location: str) -> int:
    """The first number in an importer's location ("line 12", "conversation 3 ..."), or 0."""
    match = re.search(r"\d{1,18}", location)
    return int(match.group()) if match else 0


@import_app.command("claude-code", cls=RayFlagCommand)
def import_claude_code(
    tenant: TenantOpt,
    user: UserOpt,
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Session .jsonl files or project folders.")] = None,
    app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = "claude-code",
    embed: Annotated[bool, typer.Option(help="Embed new rows.")] = True,
    index: Annotated[bool, typer.Option(help="Build touched partitions.")] = True,
    replace: ReplaceOpt = True,
    watch: Annotated[Path | None, typer.Option(
        "--watch", help="Keep capturing the sessions of this folder as they change.")] = None,
    interval: Annotated[float, typer.Option(
        help="Seconds between two looks at the --watch folder.")] = 2.0,
    settle: Annotated[float, typer.Option(
        help="Seconds a --watch session stays unchanged before its open turn is recorded "
             "as final.")] = 300.0,
    server: ServerOpt = None,
    key: KeyOpt = None,
    runtime: RuntimeOption = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    lake: LakeOption = None,
) -> None:
    """Import Claude Code session transcripts (one session = one conversation)."""
    if watch is not None:
        _watch(watch, tenant, user, app_name, (interval, settle), server, key, lake)
        return
    if not paths:
        raise fail(TurnlakeError("give transcript files or folders, or --watch FOLDER"))
    from pipeline.importers import iter_claude_code

    try:
        stream = iter_claude_code(paths, tenant=tenant, user_id=user, app=app_name)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _run(stream, lake, embed, index, replace=replace, runtime=runtime, ray=ray,
         ray_cpus=ray_cpus)


def _watch(folder: Path, tenant: str, user: str, app_name: str, timing: tuple[float, float],
           server: str | None, key: str | None, lake: str | None) -> None:
    from pipeline.importers.common import Identity
    from pipeline.importers.live import watch

    interval, settle = timing
    try:
        identity = Identity(tenant=tenant, user_id=user, app=app_name, agent="claude-code")
        target = _server(server, key)
        settings = None if target is not None else settings_from(lake)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    if not folder.is_dir():
        raise fail(TurnlakeError(f"--watch folder {folder} does not exist"))

    def captured(path: Path, report: CaptureReport) -> None:
        if report.records or report.problems:
            out.print(literal(f"{path.name}: {_summary(report)}"))

    def failed(path: Path, exc: Exception) -> None:
        console.print(styled((f"{path.name}: {exc} (retried next round)", "yellow")))

    console.print(literal(f"watching {folder} (Ctrl-C stops)"))
    try:
        watch(settings, folder, identity, interval_s=interval, settle_s=settle, server=target,
              on_capture=captured, on_error=failed)
    except KeyboardInterrupt:
        console.print("stopped")


def _server(url: str | None, key: str | None) -> ServerTarget | None:
    from pipeline.importers.live import ServerTarget

    if url is None:
        if key is not None:
            raise TurnlakeError("--key needs --server URL")
        return None
    if not key:
        raise TurnlakeError("--server needs --key KEY (the hook also reads "
                            "$TURNLAKE_RECORDER_KEY, else $TURNLAKE_KEY)")
    return ServerTarget(url, key)


def _summary(report: CaptureReport) -> str:
    return (f"{report.records} turns read, {report.accepted} new, {report.duplicates} "
            f"unchanged, {report.replaced} replaced, {report.conflicts} conflicts, "
            f"{report.embedded} rows embedded, {len(report.problems)} problems"
            f"{', open turn held' if report.held else ''} "
            f"({'resumed' if report.resumed else 'from the start'}, {report.seconds:.2f}s)")


@hook_app.command("claude-code")
def hook_claude_code(
    tenant: TenantOpt,
    user: UserOpt,
    app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = "claude-code",
    server: ServerOpt = None,
    key: HookKeyOpt = None,
    log: Annotated[Path | None, typer.Option(
        "--log", help="Log file (default: $TURNLAKE_HOOK_LOG, else "
                      "~/.cache/turnlake/hook-claude-code.log).")] = None,
    embed: Annotated[bool, typer.Option(
        help="Embed the recorded turns' rows (lake mode; a server embeds its own).")] = True,
    index: Annotated[bool, typer.Option(
        help="Give the touched partitions a delta segment, so the turns are searchable at "
             "once (lake mode).")] = True,
    lake: LakeOption = None,
) -> None:
    """Claude Code Stop and SessionEnd hook: record the session's turns that are final (hook
    JSON on stdin).

    A turn is recorded once the next prompt closed it, or the session ended (SessionEnd), so
    the lines Claude Code writes after its hooks never change a recorded turn. Capture state
    lives in ~/.cache/turnlake/capture ($XDG_CACHE_HOME). With --server, no lake is needed.
    Never blocks the session: any error goes to the log file and exits 1 (non-blocking)."""
    log_path = log or _hook_log("hook-claude-code.log")
    session = "?"
    try:
        from pipeline.importers.common import Identity
        from pipeline.importers.live import HookInput, capture_transcript

        hook = HookInput.parse(sys.stdin.buffer.read())
        session = hook.session_id
        # A key in the environment (for the MCP server, say) means nothing to a lake capture.
        target = _server(server, key if server is not None else None)
        settings = None if target is not None else _hook_lake(lake)
        identity = Identity(tenant=tenant, user_id=user, app=app_name, agent="claude-code")
        report = capture_transcript(settings, hook.session_id, hook.transcript_path, identity,
                                    server=target, final=hook.final, embed=embed, index=index)
        _log(log_path, f"session {session} ({hook.event}): {_summary(report)}"
             + "".join(f"\n  problem {p}" for p in report.problems))
    except Exception as exc:
        log_failure(log_path, f"session {session}", exc)
        raise typer.Exit(1) from None


@hook_app.command("claude-code-recall")
def hook_claude_code_recall(
    tenant: TenantOpt,
    user: UserOpt,
    server: RecallServerOpt = None,
    key: RecallKeyOpt = None,
    budget: RecallBudgetOpt = 600,
    min_relevance: RecallFloorOpt = 0.8,
    turns: RecallTurnsOpt = 3,
    log: Annotated[Path | None, typer.Option(
        "--log", help="Log file (default: $TURNLAKE_HOOK_LOG, else "
                      "~/.cache/turnlake/hook-claude-code-recall.log).")] = None,
    lake: LakeOption = None,
) -> None:
    """Claude Code UserPromptSubmit hook: add your relevant past turns (from other sessions)
    to the prompt, with their ids for the MCP get_turn tool (hook JSON on stdin).

    Prints nothing when nothing passes the relevance floor. Never blocks the prompt: an
    error goes to the log and exits 1 (non-blocking)."""
    run_recall("claude-code", tenant, user, server=server, key=key, budget=budget,
               min_relevance=min_relevance, turns=turns, log=log, lake=lake)


def run_recall(agent: str, tenant: str, user: str, *, server: str | None, key: str | None,
               budget: int, min_relevance: float, turns: int, log: Path | None,
               lake: str | None) -> None:
    """Run ``agent``'s recall hook (pipeline.recall.main, which the console script also
    reaches without the CLI's imports) with the command's options; exits with its code."""
    from pipeline.recall import main

    argv = ["--tenant", tenant, "--user", user, "--budget", str(budget),
            "--min-relevance", str(min_relevance), "--turns", str(turns)]
    for name, value in (("--server", server), ("--key", key), ("--lake", lake),
                        ("--log", str(log) if log else None)):
        if value is not None:
            argv += [name, value]
    code = main(argv, agent=agent)
    if code:
        raise typer.Exit(code)


def log_failure(log_path: Path, what: str, exc: Exception) -> None:
    """A hook's failure in its log: our own errors by their message, anything else with its
    traceback (a hook never shows one to the agent)."""
    detail = (str(exc) if isinstance(exc, TurnlakeError)
              else "".join(traceback.format_exception(exc)))
    _log(log_path, f"{what}: error: {detail}")


def _hook_log(name: str) -> Path:
    """A hook's log: $TURNLAKE_HOOK_LOG, else ``name`` in turnlake's cache folder."""
    from pipeline.cache import cache_dir

    return Path(os.environ.get(HOOK_LOG_ENV) or cache_dir() / name)


def _hook_lake(lake: str | None) -> Settings:
    """The lake a hook writes: --lake or $TURNLAKE_LAKE, never the relative default (a hook
    runs in the user's project, which must not get a ./data/lake)."""
    if lake is None and not os.environ.get("TURNLAKE_LAKE"):
        raise TurnlakeError("give --lake or $TURNLAKE_LAKE, or --server URL (a hook runs in "
                            "the user's project and never writes ./data/lake there)")
    return Settings.from_env(lake)


def _log(path: Path, message: str) -> None:
    """Append a line to the hook's log; a log that cannot be written is not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"{datetime.now(UTC).isoformat(timespec='seconds')} {message}\n")
    except OSError:
        pass


@import_app.command("chatgpt", cls=RayFlagCommand)
def import_chatgpt(
    path: Annotated[Path, typer.Argument(help="conversations.json (or the export .zip).")],
    tenant: TenantOpt,
    user: UserOpt,
    app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = "chatgpt",
    embed: Annotated[bool, typer.Option(help="Embed new rows.")] = True,
    index: Annotated[bool, typer.Option(help="Build touched partitions.")] = True,
    replace: ReplaceOpt = True,
    runtime: RuntimeOption = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    lake: LakeOption = None,
) -> None:
    """Import a ChatGPT data export (the branch ending at each current_node)."""
    from pipeline.importers import iter_chatgpt

    try:
        stream = iter_chatgpt(path, tenant=tenant, user_id=user, app=app_name)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _run(stream, lake, embed, index, replace=replace, runtime=runtime, ray=ray,
         ray_cpus=ray_cpus)
