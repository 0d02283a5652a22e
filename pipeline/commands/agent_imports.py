"""``turnlake import codex|gemini-cli|claude-ai|copilot-cli|aider`` and ``turnlake hook codex``:
bring other agents' sessions into the lake, once or as they change (``--watch``)."""

# No `from __future__ import annotations`: typer reads the annotations of the commands
# _command makes, which name its own arguments (help texts, default app).

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lake.errors import TurnlakeError
from pipeline.commands.common import (
    LakeOption,
    console,
    erase_settler,
    fail,
    literal,
    out,
    settings_from,
    styled,
)
from pipeline.commands.embedding_opts import RuntimeOption
from pipeline.commands.importers import (
    HookKeyOpt,
    KeyOpt,
    RecallBudgetOpt,
    RecallFloorOpt,
    RecallKeyOpt,
    RecallServerOpt,
    RecallTurnsOpt,
    ReplaceOpt,
    ServerOpt,
    TenantOpt,
    UserOpt,
    _hook_lake,
    _hook_log,
    _log,
    _run,
    _server,
    _summary,
    hook_app,
    import_app,
    log_failure,
    run_recall,
)
from pipeline.commands.index import RayCpusOption, RayFlagCommand, RayOption

if TYPE_CHECKING:
    from pipeline.importers.common import ImportStream
    from pipeline.importers.live import CaptureReport

CODEX_LOG_ENV = "TURNLAKE_CODEX_NOTIFY_LOG"
StreamFactory = Callable[..., "ImportStream"]


def _importer(agent: str) -> tuple[StreamFactory, Callable[[Path], bool]]:
    """The importer of an agent and the test telling its session files in a folder."""
    if agent == "codex":
        from pipeline.importers.codex import is_rollout, iter_codex
        return iter_codex, is_rollout
    if agent == "gemini-cli":
        from pipeline.importers.gemini_cli import is_session, iter_gemini_cli
        return iter_gemini_cli, is_session
    if agent == "copilot-cli":
        from pipeline.importers.copilot_cli import is_session as is_copilot
        from pipeline.importers.copilot_cli import iter_copilot_cli
        return iter_copilot_cli, is_copilot
    if agent == "aider":
        from pipeline.importers.aider import is_history, iter_aider
        return iter_aider, is_history
    from pipeline.importers.claude_ai import EXPORT_MEMBER, iter_claude_ai

    def one_file(paths: Sequence[Path], **identity: str) -> "ImportStream":
        return iter_claude_ai(paths[0], **identity)

    return one_file, lambda p: p.name == EXPORT_MEMBER


def _import(agent: str, paths: list[Path] | None, tenant: str, user: str, app_name: str,
            embed: bool, index: bool, replace: bool, watch: Path | None, interval: float,
            server: str | None, key: str | None, runtime: str | None, ray: str | None,
            ray_cpus: int | None, lake: str | None) -> None:
    stream_of, matches = _importer(agent)
    if watch is not None:
        _watch(agent, watch, stream_of, matches, tenant, user, app_name, interval, server, key,
               lake)
        return
    if not paths:
        raise fail(TurnlakeError("give session files or folders, or --watch FOLDER"))
    try:
        stream = stream_of(paths, tenant=tenant, user_id=user, app=app_name, agent=agent)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _run(stream, lake, embed, index, replace=replace, runtime=runtime, ray=ray,
         ray_cpus=ray_cpus)


def _watch(agent: str, folder: Path, stream_of: StreamFactory, matches: Callable[[Path], bool],
           tenant: str, user: str, app_name: str, interval: float, server: str | None,
           key: str | None, lake: str | None) -> None:
    from pipeline.importers.agent_files import find_files
    from pipeline.importers.agent_watch import watch_sessions
    from pipeline.importers.common import Identity

    settings = settings_from(lake)
    try:
        Identity(tenant=tenant, user_id=user, app=app_name, agent=agent)
        target = _server(server, key)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    if not folder.is_dir():
        raise fail(TurnlakeError(f"--watch folder {folder} does not exist"))

    def captured(path: Path, report: "CaptureReport") -> None:
        if report.records or report.problems:
            out.print(literal(f"{path.name}: {_summary(report)}"))

    def failed(path: Path, exc: Exception) -> None:
        console.print(styled((f"{path.name}: {exc} (retried next round)", "yellow")))

    console.print(literal(f"watching {folder} (Ctrl-C stops)"))
    try:
        watch_sessions(settings, folder, lambda f: find_files([f], matches, agent),
                       lambda files: stream_of(files, tenant=tenant, user_id=user,
                                               app=app_name, agent=agent),
                       interval_s=interval, server=target, settle=erase_settler(settings),
                       on_capture=captured, on_error=failed)
    except KeyboardInterrupt:
        console.print("stopped")


def _command(agent: str, paths_help: str, doc: str) -> None:
    """Register ``turnlake import AGENT``."""

    def command(
        tenant: TenantOpt,
        user: UserOpt,
        paths: Annotated[list[Path] | None, typer.Argument(help=paths_help)] = None,
        app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = agent,
        embed: Annotated[bool, typer.Option(help="Embed new rows.")] = True,
        index: Annotated[bool, typer.Option(help="Build touched partitions.")] = True,
        replace: ReplaceOpt = True,
        watch: Annotated[Path | None, typer.Option(
            "--watch", help="Keep capturing the sessions of this folder as they change.")
        ] = None,
        interval: Annotated[float, typer.Option(
            help="Seconds between two looks at the --watch folder.")] = 2.0,
        server: ServerOpt = None,
        key: KeyOpt = None,
        runtime: RuntimeOption = None,
        ray: RayOption = None,
        ray_cpus: RayCpusOption = None,
        lake: LakeOption = None,
    ) -> None:
        _import(agent, paths, tenant, user, app_name, embed, index, replace, watch, interval,
                server, key, runtime, ray, ray_cpus, lake)

    command.__doc__ = doc
    import_app.command(agent, cls=RayFlagCommand)(command)


_command("codex", "Rollout .jsonl files, or folders (~/.codex/sessions).",
         "Import Codex CLI rollouts (one session = one conversation).")
_command("gemini-cli", "Session .json/.jsonl files, or folders (~/.gemini/tmp).",
         "Import Gemini CLI chat sessions (JSON files and JSONL recordings).")
_command("claude-ai", "conversations.json of a Claude.ai export (or the export .zip).",
         "Import a Claude.ai data export (the current branch of each conversation).")
_command("copilot-cli", "events.jsonl files, or folders (~/.copilot/session-state).",
         "Import GitHub Copilot CLI sessions (their event logs).")
_command("aider", ".aider.chat.history.md files, or project folders.",
         "Import Aider chat histories (each 'aider chat started' is a conversation).")


@hook_app.command("codex")
def hook_codex(
    payload: Annotated[str, typer.Argument(help="The JSON Codex's notify appends.")],
    tenant: TenantOpt,
    user: UserOpt,
    app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = "codex",
    server: ServerOpt = None,
    key: HookKeyOpt = None,
    log: Annotated[Path | None, typer.Option(
        "--log", help="Log file (default: $TURNLAKE_CODEX_NOTIFY_LOG, else "
                      "~/.cache/turnlake/hook-codex.log).")] = None,
    index: Annotated[bool, typer.Option(
        help="Build the touched partitions' indexes after recording.")] = False,
    lake: LakeOption = None,
) -> None:
    """Codex notify program: record what is new in the thread's rollout.

    Capture state lives in ~/.cache/turnlake/capture/codex ($XDG_CACHE_HOME); with --server,
    no lake is needed. Never fails the session: every error goes to the log file, and the
    exit code is 0."""
    import os

    from pipeline.cache import cache_dir

    log_path = log or Path(os.environ.get(CODEX_LOG_ENV) or cache_dir() / "hook-codex.log")
    thread = "?"
    try:
        from pipeline.importers.codex_live import TURN_COMPLETE, Notification, capture_thread
        from pipeline.importers.common import Identity

        note = Notification.parse(payload)
        if note.kind != TURN_COMPLETE:
            _log(log_path, f"notification {note.kind}: not a turn, nothing to record")
            return
        thread = note.thread_id
        # A key in the environment (for the MCP server, say) means nothing to a lake capture.
        target = _server(server, key if server is not None else None)
        settings = None if target is not None else _hook_lake(lake)
        identity = Identity(tenant=tenant, user_id=user, app=app_name, agent="codex")
        report = capture_thread(settings, thread, identity, server=target,
                                settle=erase_settler(settings) if settings else None)
        if index and report.partitions and settings is not None:
            from pipeline.live import LiveWriter

            LiveWriter(settings, embed=False).index(report.partitions)
        _log(log_path, f"thread {thread}: {_summary(report)}"
             + "".join(f"\n  problem {p}" for p in report.problems))
    except Exception as exc:
        log_failure(log_path, f"thread {thread}", exc)
    sys.stdout.flush()


@hook_app.command("gemini-cli")
def hook_gemini_cli(
    tenant: TenantOpt,
    user: UserOpt,
    app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = "gemini-cli",
    server: ServerOpt = None,
    key: HookKeyOpt = None,
    log: Annotated[Path | None, typer.Option(
        "--log", help="Log file (default: $TURNLAKE_HOOK_LOG, else "
                      "~/.cache/turnlake/hook-gemini-cli.log).")] = None,
    lake: LakeOption = None,
) -> None:
    """Gemini CLI AfterAgent hook: record the session file's new turns (hook JSON on stdin).

    Never fails the session: it prints `{}` (the empty answer Gemini CLI expects), logs every
    outcome and exits 0."""
    log_path = log or _hook_log("hook-gemini-cli.log")
    session = "?"
    try:
        from pipeline.importers.agent_watch import record_stream
        from pipeline.importers.gemini_cli import iter_gemini_cli
        from pipeline.importers.live import HookInput

        hook = HookInput.parse(sys.stdin.buffer.read())
        session = hook.session_id
        stream = iter_gemini_cli([hook.transcript_path], tenant=tenant, user_id=user,
                                 app=app_name)
        target = _server(server, key if server is not None else None)
        settings = None if target is not None else _hook_lake(lake)
        report = record_stream(settings, stream, server=target,
                               settle=erase_settler(settings) if settings else None)
        _log(log_path, f"session {session}: {_summary(report)}"
             + "".join(f"\n  problem {p}" for p in report.problems))
    except Exception as exc:
        log_failure(log_path, f"session {session}", exc)
    sys.stdout.write("{}\n")


@hook_app.command("gemini-cli-recall")
def hook_gemini_cli_recall(
    tenant: TenantOpt,
    user: UserOpt,
    server: RecallServerOpt = None,
    key: RecallKeyOpt = None,
    budget: RecallBudgetOpt = 600,
    min_relevance: RecallFloorOpt = 0.8,
    turns: RecallTurnsOpt = 3,
    log: Annotated[Path | None, typer.Option(
        "--log", help="Log file (default: $TURNLAKE_HOOK_LOG, else "
                      "~/.cache/turnlake/hook-gemini-cli-recall.log).")] = None,
    lake: LakeOption = None,
) -> None:
    """Gemini CLI BeforeAgent hook: add your relevant past turns (from other sessions) to the
    prompt, with their ids for the MCP get_turn tool (hook JSON on stdin).

    Prints {} when nothing passes the relevance floor. Never blocks the prompt: an error goes
    to the log and exits 1 (a warning to Gemini CLI, which goes on)."""
    run_recall("gemini-cli", tenant, user, server=server, key=key, budget=budget,
               min_relevance=min_relevance, turns=turns, log=log, lake=lake)
