"""Commands that write the lake: ingest, demo, schema, quarantine."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table as RichTable

from lake.errors import TurnlakeError
from lake.records import json_schema
from pipeline.commands.common import (
    LakeOption,
    advised_reason,
    app,
    console,
    erase_settler,
    existing_lake,
    fail,
    literal,
    out,
    settings_from,
    styled,
)
from pipeline.commands.embedding_opts import RuntimeOption, with_runtime
from pipeline.commands.index import RayCpusOption, RayFlagCommand, RayOption
from pipeline.progress import job_progress

_SKIPPED_SHOWN = 5  # names listed in the note on a folder's skipped files


@app.command(cls=RayFlagCommand)
def ingest(
    paths: Annotated[list[Path], typer.Argument(
        help="Record files (.jsonl, .json or .ndjson, each optionally .gz) or folders of "
             "them.")],
    lake: LakeOption = None,
    strict: Annotated[bool, typer.Option(
        help="Exit 1 if any line was quarantined or a folder held no record file.")] = False,
    embed: Annotated[bool, typer.Option(help="Embed new rows (best effort).")] = True,
    index: Annotated[bool, typer.Option(help="Build the touched partitions' indexes.")] = True,
    workers: Annotated[int, typer.Option(
        help="Processes that parse and validate large inputs (default: one per core).")] = 0,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Supersede stored turns whose content changed (else: conflict).")
    ] = False,
    runtime: RuntimeOption = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
) -> None:
    """Ingest turnlake.turn.v1 records; bad lines are quarantined, duplicates skipped, changed
    turns quarantined as conflicts (or superseded with --replace)."""
    from pipeline.ray_ingest import ingest_job

    settings = with_runtime(settings_from(lake), runtime)
    empty_folders = _say_what_folders_skip(paths)
    try:
        if ray_cpus is not None and ray is None:
            raise TurnlakeError("--ray-cpus needs --ray")
        with job_progress() as progress:
            job = ingest_job(settings, paths, embed=embed, index=index, ray=ray,
                             ray_cpus=ray_cpus, workers=workers or min(4, os.cpu_count() or 1),
                             replace=replace, settle=erase_settler(settings) if replace else None,
                             on_line=progress.counter("reading records"),
                             on_embedded=progress.counter("embedding rows"),
                             on_partition=progress.partitions("building indexes"),
                             on_embedded_partition=progress.partitions("embedding on Ray"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    report = job.ingest
    for q in report.quarantined[:20]:
        console.print(styled(("quarantined", "yellow"),
                             f" {q.source_file}:{q.line}: {advised_reason(q)}"))
    if len(report.quarantined) > 20:
        console.print(styled((f"... and {len(report.quarantined) - 20} more quarantined lines",
                              "yellow")))
    if report.recovered:
        console.print(literal(f"recovered interrupted batches: {', '.join(report.recovered)}"))
    for unresolved in report.unresolved_refs[:20]:
        console.print(styled(("unresolved ref", "yellow"), f" {unresolved}"), soft_wrap=True)
    if len(report.unresolved_refs) > 20:
        console.print(styled((f"... and {len(report.unresolved_refs) - 20} more unresolved "
                              "refs", "yellow")))
    for error in job.embedding.errors[:1]:
        console.print(styled(("embedding failed, rows kept for text search:", "yellow"),
                             f" {error}"))
    out.print(literal(f"accepted {report.accepted}, duplicate {report.duplicates}, "
              f"quarantined {len(report.quarantined)} "
              f"({report.rows_written} search rows, {job.embedding.embedded} embedded "
              f"[{job.embedding.reused} reusing a vector], "
              f"{job.embedding.failed} embedding failed, {report.files_stored} files, "
              f"{report.seconds:.2f}s) into {settings.lake}"))
    if report.conflicts:
        out.print(f"conflict {len(report.conflicts)}: stored turns with other content, "
                  "quarantined (--replace supersedes them)")
    if report.replaced:
        out.print(f"replaced {report.replaced} stored turn(s) with their new content")
    if job.build is not None:
        out.print(f"indexed {len(job.build.built)} partition(s)")
    if strict and (report.quarantined or empty_folders):
        raise typer.Exit(1)


def _say_what_folders_skip(paths: list[Path]) -> int:
    """Note the files each folder holds that are not read as records, and the folders that hold
    no record file at all (a folder of .txt exports would otherwise ingest nothing without a
    word). Returns how many folders held no record file."""
    from pipeline.sources import survey

    kinds = ".jsonl, .json or .ndjson, optionally gzipped as .gz"
    empty = 0
    for folder in (p for p in paths if p.is_dir()):
        found = survey(folder)
        if found.skipped:
            names = ", ".join(str(p.relative_to(folder)) for p in found.skipped[:_SKIPPED_SHOWN])
            more = len(found.skipped) - _SKIPPED_SHOWN
            console.print(styled(
                ("note:", "yellow"),
                f" skipped {len(found.skipped)} file(s) of {folder} that are not record files "
                f"({kinds}): {names}" + (f" and {more} more" if more > 0 else "")))
        if not found.records:
            empty += 1
            console.print(styled(("note:", "yellow"),
                                 f" {folder} holds no record file ({kinds}): nothing read "
                                 "from it"))
    return empty


@app.command()
def demo(
    lake: LakeOption = None,
    users: Annotated[int, typer.Option(help="Number of demo users.")] = 12,
    turns: Annotated[int, typer.Option(help="Number of demo turns.")] = 600,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same lake).")] = 7,
    embed: Annotated[bool, typer.Option(help="Embed the demo rows.")] = True,
    index: Annotated[bool, typer.Option(help="Build the partition indexes.")] = True,
) -> None:
    """Write a realistic demo lake (several tenants, apps, writers, files, expired turns).

    Again into the same lake (say after an interrupted run), the demo's turns already there
    are left as they are: the history ends at the current minute, so a turn written by an
    earlier run has the same id with other times, which is the same demo turn, not a
    conflict to quarantine."""
    from pipeline.demo import generate_lines
    from pipeline.jobs import run_ingest

    settings = settings_from(lake)
    try:
        lines = list(generate_lines(users=users, turns=turns, seed=seed))
        with job_progress() as progress:
            job = run_ingest(settings, records=lines, embed=embed, index=index,
                             keep_stored=True,
                             on_line=progress.counter("writing demo turns"),
                             on_embedded=progress.counter("embedding rows"),
                             on_partition=progress.partitions("building indexes"))
    except (TurnlakeError, ValueError) as exc:
        raise fail(TurnlakeError(str(exc))) from exc
    report = job.ingest
    earlier = len(report.held)
    there = report.duplicates + earlier
    out.print(literal(f"demo lake at {settings.lake}: {report.accepted} turns written "
                      f"({there} already there"
                      + (f", {earlier} of them from a demo written at another time"
                         if earlier else "")
                      + f"), {report.rows_written} search rows, {job.embedding.embedded} "
                      f"embedded, {report.files_stored} hosted files"))
    if report.quarantined:
        console.print(styled(("note:", "yellow"),
                             f" {len(report.quarantined)} demo line(s) quarantined: "
                             "`turnlake quarantine` lists them"))


@app.command()
def schema() -> None:
    """Print the JSON Schema of the turnlake.turn.v1 record."""
    out.print_json(json.dumps(json_schema()))


@app.command()
def quarantine(
    lake: LakeOption = None,
    limit: Annotated[int, typer.Option(help="Show at most this many lines.")] = 50,
) -> None:
    """List quarantined input lines with file, line number and reason."""
    from lake.store import LakeStore
    from lake.tables import Table

    store = LakeStore(existing_lake(lake).lake)
    rows = store.read(Table.QUARANTINE, columns=["quarantined_at", "source_file", "line", "reason"])
    table = RichTable("when", "file", "line", "reason")
    for row in rows.sort_by([("quarantined_at", "descending")]).slice(0, limit).to_pylist():
        table.add_row(f"{row['quarantined_at']:%Y-%m-%d %H:%M}", literal(row["source_file"]),
                      str(row["line"]), literal(row["reason"]))
    out.print(table)
    out.print(f"{rows.num_rows} quarantined lines in all")
