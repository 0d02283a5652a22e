"""Commands that maintain derived data: index build / status, embed --backfill."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table as RichTable

from lake.embedding.factory import embedder_for
from lake.errors import TurnlakeError
from lake.index.status import partition_statuses
from lake.store import LakeStore
from pipeline.commands.common import LakeOption, app, console, fail, out, settings_from
from pipeline.embed import backfill
from pipeline.index_build import build_indexes
from pipeline.progress import job_progress

index_app = typer.Typer(no_args_is_help=True, help="Build and inspect partition indexes.")
app.add_typer(index_app, name="index")


@index_app.command("build")
def index_build(
    full: Annotated[bool, typer.Option(help="Rebuild every partition, fresh or not.")] = False,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    month: Annotated[str | None, typer.Option(help="Only this month (YYYY-MM).")] = None,
    lake: LakeOption = None,
) -> None:
    """Rebuild the indexes of partitions whose tables changed since their manifest."""
    settings = settings_from(lake)
    try:
        with job_progress() as progress:
            report = build_indexes(LakeStore(settings.lake),
                                   model=embedder_for(settings.embedding_model).name,
                                   full=full, tenant=tenant, month=month,
                                   on_partition=progress.partitions("building indexes"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    for m in report.built:
        out.print(f"built {m.tenant}/{m.month}: {m.row_count} rows ({m.embedded_rows} "
                  f"embedded, {m.semantic_kind}) from content_rows v{m.content_version} "
                  f"in {m.build_seconds:.2f}s")
    for name in report.dropped:
        out.print(f"dropped index of {name} (no rows left)")
    out.print(f"{len(report.built)} built, {report.skipped_fresh} already fresh")


@index_app.command("status")
def index_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    lake: LakeOption = None,
) -> None:
    """Show each partition's index freshness, sizes and the command that rebuilds it."""
    statuses = partition_statuses(LakeStore(settings_from(lake).lake))
    if as_json:
        out.print_json(json.dumps([{
            "partition": s.name, "freshness": s.freshness,
            "rows": s.manifest.row_count if s.manifest else None,
            "embedded_rows": s.manifest.embedded_rows if s.manifest else None,
            "built_from_version": s.manifest.content_version if s.manifest else None,
            "table_version": s.content_version,
            "rebuild": s.rebuild_command if s.freshness != "fresh" else None,
        } for s in statuses.values()]))
        return
    table = RichTable("partition", "state", "rows", "embedded", "built from", "table", "fix")
    for s in statuses.values():
        m = s.manifest
        table.add_row(s.name, s.freshness, str(m.row_count) if m else "-",
                      str(m.embedded_rows) if m else "-",
                      f"v{m.content_version}" if m else "-", f"v{s.content_version}",
                      s.rebuild_command if s.freshness in ("stale", "missing") else "")
    out.print(table)


@app.command()
def embed(
    backfill_rows: Annotated[bool, typer.Option(
        "--backfill", help="Embed every row still pending or failed.")] = False,
    index: Annotated[bool, typer.Option(help="Rebuild the partitions that changed.")] = True,
    lake: LakeOption = None,
) -> None:
    """Embed rows that were written without an embedding (provider down, --no-embed)."""
    if not backfill_rows:
        raise fail(TurnlakeError("nothing to do: pass --backfill"))
    settings = settings_from(lake)
    embedder = embedder_for(settings.embedding_model)
    try:
        with job_progress() as progress:
            report = backfill(settings, embedder, on_progress=progress.total("embedding rows"))
            if index and report.partitions:
                build_indexes(LakeStore(settings.lake), model=embedder.name,
                              partitions=report.partitions,
                              on_partition=progress.partitions("building indexes"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    if report.error:
        console.print(f"[yellow]embedding failed:[/] {report.error}")
    out.print(f"embedded {report.embedded} rows, {report.failed} failed")
    if report.error:
        raise typer.Exit(1)
