"""Shared pieces of the ``turnlake`` commands: the typer app, consoles, options, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from lake.errors import TurnlakeError
from lake.settings import Settings

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="turnlake: a conversation context database that builds itself.")
console = Console(stderr=True)
out = Console()

# A str, not a Path: Path("s3://bucket/x") would collapse the scheme's double slash.
LakeOption = Annotated[str | None, typer.Option(
    "--lake", help="Lake root: a folder or s3://bucket/prefix (default: $TURNLAKE_LAKE, else "
                   "./data/lake).")]


def settings_from(lake: str | Path | None) -> Settings:
    """Settings for a command: ``--lake``, else ``$TURNLAKE_LAKE``, else ``./data/lake``.

    An unusable root (an unsupported scheme, an unreadable policy) exits with a clear error.
    """
    try:
        return Settings.from_env(lake)
    except TurnlakeError as exc:
        raise fail(exc) from exc


def fail(exc: TurnlakeError) -> typer.Exit:
    """Print a turnlake error plainly (no traceback) and return the exit to raise."""
    console.print(f"[bold red]error:[/] {escape(str(exc))}")
    return typer.Exit(2)


