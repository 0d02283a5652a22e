"""``turnlake maintain``: compact small files, refresh indexes, vacuum, truncate the logs."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
from rich.table import Table as RichTable

from lake.analytics import lake_tenants
from lake.errors import TurnlakeError
from lake.store import LakeStore
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
from pipeline.maintain import DEFAULT_GRACE_S, MaintainReport, TableUpkeep, maintain
from pipeline.progress import job_progress


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _files(before: int, after: int | None) -> str:
    return str(before) if after is None else f"{before} -> {after}"


def _print_tables(report: MaintainReport) -> None:
    grid = RichTable("table", "partition", "files", "bytes")
    for upkeep in report.tables:
        for part in upkeep.compacted:
            after = part.after
            grid.add_row(upkeep.table.value, literal(part.name),
                         _files(part.before.files, after.files if after else None),
                         _size(part.before.bytes) if after is None
                         else f"{_size(part.before.bytes)} -> {_size(after.bytes)}")
    if grid.row_count:
        out.print(grid)


def _table_line(upkeep: TableUpkeep, dry_run: bool) -> str:
    before = upkeep.files_before
    if dry_run:
        return (f"{upkeep.table.value}: v{upkeep.version_before}, {before.files} data files "
                f"({_size(before.bytes)}), {upkeep.log_files_before} log entries; would "
                f"compact {len(upkeep.compacted)} partition(s) and vacuum up to "
                f"{upkeep.to_vacuum} file(s) ({upkeep.vacuumable} unreferenced now, the rest "
                f"replaced by the compaction)")
    after = upkeep.files_after
    assert after is not None
    return (f"{upkeep.table.value}: v{upkeep.version_before} -> v{upkeep.version_after}, "
            f"data files {before.files} -> {after.files} ({_size(before.bytes)} -> "
            f"{_size(after.bytes)}), log entries {upkeep.log_files_before} -> "
            f"{upkeep.log_files_after}, {upkeep.vacuumable} file(s) vacuumed")


@app.command("maintain")
def maintain_command(
    tenant: Annotated[str | None, typer.Option(
        help="Compact and re-index only this tenant's partitions (vacuum and log cleanup "
             "still act on whole tables).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print what would be compacted, vacuumed and re-indexed; write "
                          "nothing.")] = False,
    grace: Annotated[float, typer.Option(
        "--grace", min=0.0, metavar="SECONDS",
        help="Keep replaced files this long after the last commit, for searches still "
             "reading them.")] = DEFAULT_GRACE_S,
    lake: LakeOption = None,
) -> None:
    """Table upkeep: compact small Parquet files per partition, rebuild the indexes that
    went stale, vacuum unreferenced files and checkpoint the Delta logs."""
    settings = existing_lake(lake)

    def waiting(holder: str) -> None:
        console.print(literal(f"waiting for the writer lock held by {holder} (up to "
                              f"{settings.lock_timeout_s:.0f}s)"))

    # What the spool recovery logs for a server's log, this command prints itself (below).
    logging.getLogger("pipeline.service.spool").setLevel(logging.ERROR)
    try:
        with job_progress() as progress:
            report = maintain(settings, tenant=tenant, dry_run=dry_run, grace_s=grace,
                              on_wait=waiting, on_partition=progress.partitions("compacting"),
                              on_status=progress.partitions("filling completion status"),
                              on_index=progress.partitions("rebuilding indexes"),
                              on_table=progress.partitions("vacuuming"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    for pending in report.pending:
        console.print(styled((f"interrupted job {pending.job_id} ({pending.describe()}) will "
                              "be finished first by the next run", "yellow")))
    for done in report.resumed:
        console.print(literal(f"finished interrupted job {done.plan.job_id} "
                              f"({done.plan.describe()})"))
    if report.spooled:
        verb = "would commit" if report.dry_run else "committed"
        console.print(literal(f"{verb} {report.spooled} acknowledged group(s) of recordings "
                              "that stopped servers left in their spools"))
    for problem in report.spool_problems:
        console.print(styled((problem, "yellow")))
    if report.recovered is not None and report.recovered.rolled_back:
        console.print(f"rolled back {len(report.recovered.rolled_back)} interrupted ingest "
                      "batch(es)")
    if report.statuses_filled:
        verb = "would fill" if report.dry_run else "filled"
        console.print(literal(f"{verb} the completion status of {report.statuses_filled} "
                              "turn(s) ingested before turnlake recorded it, from their stored "
                              "records"))
    if not report.tables:
        out.print("nothing to maintain: the lake has no tables yet")
        return
    _print_tables(report)
    if tenant is not None and tenant not in lake_tenants(LakeStore(settings.lake)):
        console.print(literal(f"note: no partition of tenant {tenant} in this lake; vacuum and "
                              "log cleanup still act on whole tables"))
    for upkeep in report.tables:
        out.print(literal(_table_line(upkeep, report.dry_run)))
    verb = "would rebuild" if report.dry_run else "rebuilt"
    out.print(literal(f"{verb} {len(report.indexes)} partition index(es)"
                      + (f": {', '.join(report.indexes)}" if report.indexes else "")))
    if report.dry_run:
        out.print("dry run: nothing was changed")
    else:
        waited = f", {report.waited_s:.1f}s of it waiting for readers" if report.waited_s else ""
        out.print(f"maintained in {report.seconds:.2f}s{waited}")
