"""``turnlake import``: bring third-party chat exports into the lake."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from lake.errors import TurnlakeError
from pipeline.commands.common import LakeOption, app, console, fail, out, settings_from
from pipeline.commands.embedding_opts import RuntimeOption, with_runtime
from pipeline.commands.index import RayCpusOption, RayFlagCommand, RayOption
from pipeline.importers import ImportStream, iter_chatgpt, iter_claude_code
from pipeline.ingest import Ingestor, Quarantined
from pipeline.progress import job_progress
from pipeline.ray_ingest import ingest_job

import_app = typer.Typer(no_args_is_help=True,
                         help="Import Claude Code transcripts or ChatGPT exports.")
app.add_typer(import_app, name="import")

TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant to import into.")]
UserOpt = Annotated[str, typer.Option("--user", help="User id the turns belong to.")]


def _run(stream: ImportStream, lake: str | None, embed: bool, index: bool, *,
         runtime: str | None = None, ray: str | None = None,
         ray_cpus: int | None = None) -> None:
    settings = with_runtime(settings_from(lake), runtime)
    try:
        if ray_cpus is not None and ray is None:
            raise TurnlakeError("--ray-cpus needs --ray")
        with job_progress() as progress:
            job = ingest_job(settings, records=stream, embed=embed, index=index,  # type: ignore[arg-type]
                             ray=ray, ray_cpus=ray_cpus,
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
        console.print(f"[yellow]quarantined[/] {p.source} {p.location}: {p.reason}")
    skipped = ", ".join(f"{n} {reason}" for reason, n in stream.skipped.most_common())
    report = job.ingest
    out.print(f"imported {report.accepted} turns, {report.duplicates} already there, "
              f"{len(stream.problems) + len(report.quarantined)} quarantined"
              + (f"; skipped: {skipped}" if skipped else ""))


def _line(location: str) -> int:
    """The first number in an importer's location ("line 12", "conversation 3 ..."), or 0."""
    match = re.search(r"\d{1,18}", location)
    return int(match.group()) if match else 0


@import_app.command("claude-code", cls=RayFlagCommand)
def import_claude_code(
    paths: Annotated[list[Path], typer.Argument(help="Session .jsonl files or project folders.")],
    tenant: TenantOpt,
    user: UserOpt,
    app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = "claude-code",
    embed: Annotated[bool, typer.Option(help="Embed new rows.")] = True,
    index: Annotated[bool, typer.Option(help="Build touched partitions.")] = True,
    runtime: RuntimeOption = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    lake: LakeOption = None,
) -> None:
    """Import Claude Code session transcripts (one session = one conversation)."""
    try:
        stream = iter_claude_code(paths, tenant=tenant, user_id=user, app=app_name)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _run(stream, lake, embed, index, runtime=runtime, ray=ray, ray_cpus=ray_cpus)


@import_app.command("chatgpt", cls=RayFlagCommand)
def import_chatgpt(
    path: Annotated[Path, typer.Argument(help="conversations.json (or the export .zip).")],
    tenant: TenantOpt,
    user: UserOpt,
    app_name: Annotated[str, typer.Option("--app", help="App id for the turns.")] = "chatgpt",
    embed: Annotated[bool, typer.Option(help="Embed new rows.")] = True,
    index: Annotated[bool, typer.Option(help="Build touched partitions.")] = True,
    runtime: RuntimeOption = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    lake: LakeOption = None,
) -> None:
    """Import a ChatGPT data export (the branch ending at each current_node)."""
    try:
        stream = iter_chatgpt(path, tenant=tenant, user_id=user, app=app_name)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _run(stream, lake, embed, index, runtime=runtime, ray=ray, ray_cpus=ray_cpus)
