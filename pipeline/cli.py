"""The ``turnlake`` command line (typer). Every command takes ``--lake``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table as RichTable

from lake.errors import TurnlakeError
from lake.records import json_schema
from lake.settings import Settings
from pipeline.progress import line_progress

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="turnlake: a conversation context database that builds itself.")
console = Console(stderr=True)
out = Console()

LakeOption = Annotated[Path | None, typer.Option(
    "--lake", help="Lake root (default: $TURNLAKE_LAKE, else ./data/lake).")]


def _settings(lake: Path | None) -> Settings:
    return Settings.from_env(lake)


def _fail(exc: TurnlakeError) -> typer.Exit:
    console.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(2)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Record files (.jsonl, .jsonl.gz) or folders.")],
    lake: LakeOption = None,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any line was quarantined.")] = False,
) -> None:
    """Ingest turnlake.turn.v1 records; bad lines are quarantined, duplicates skipped."""
    from pipeline.ingest import Ingestor

    settings = _settings(lake)
    try:
        with line_progress("ingesting", enabled=sys.stderr.isatty()) as advance:
            report = Ingestor(settings, progress=advance).ingest_paths(paths)
    except TurnlakeError as exc:
        raise _fail(exc) from exc
    for q in report.quarantined[:20]:
        console.print(f"[yellow]quarantined[/] {q.source_file}:{q.line}: {q.reason}")
    if len(report.quarantined) > 20:
        console.print(f"[yellow]... and {len(report.quarantined) - 20} more quarantined lines[/]")
    if report.recovered:
        console.print(f"recovered interrupted batches: {', '.join(report.recovered)}")
    out.print(f"accepted {report.accepted}, duplicate {report.duplicates}, "
              f"quarantined {len(report.quarantined)} "
              f"({report.rows_written} search rows, {report.files_stored} files, "
              f"{report.seconds:.2f}s) into {settings.lake}")
    if strict and report.quarantined:
        raise typer.Exit(1)


@app.command()
def demo(
    lake: LakeOption = None,
    users: Annotated[int, typer.Option(help="Number of demo users.")] = 12,
    turns: Annotated[int, typer.Option(help="Number of demo turns.")] = 600,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same lake).")] = 7,
) -> None:
    """Write a realistic demo lake (several tenants, apps, writers, files, expired turns)."""
    from pipeline.demo import write_demo

    settings = _settings(lake)
    try:
        report = write_demo(settings, users=users, turns=turns, seed=seed)
    except TurnlakeError as exc:
        raise _fail(exc) from exc
    out.print(f"demo lake at {settings.lake}: {report.accepted} turns "
              f"({report.duplicates} already there), {report.rows_written} search rows, "
              f"{report.files_stored} hosted files")


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

    store = LakeStore(_settings(lake).lake)
    rows = store.read(Table.QUARANTINE, columns=["quarantined_at", "source_file", "line", "reason"])
    table = RichTable("when", "file", "line", "reason")
    for row in rows.sort_by([("quarantined_at", "descending")]).slice(0, limit).to_pylist():
        table.add_row(f"{row['quarantined_at']:%Y-%m-%d %H:%M}", row["source_file"],
                      str(row["line"]), row["reason"])
    out.print(table)
    out.print(f"{rows.num_rows} quarantined lines in all")


def main() -> None:
    """Entry point for ``python -m pipeline.cli``."""
    app()


if __name__ == "__main__":
    main()
