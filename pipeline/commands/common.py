"""Shared pieces of the ``turnlake`` commands: the typer app, consoles, options, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lake.errors import TurnlakeError
from lake.settings import Settings

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="turnlake: a conversation context database that builds itself.")
console = Console(stderr=True)
out = Console()

LakeOption = Annotated[Path | None, typer.Option(
    "--lake", help="Lake root (default: $TURNLAKE_LAKE, else ./data/lake).")]


def settings_from(lake: Path | None) -> Settings:
    """Settings for a command: ``--lake``, else ``$TURNLAKE_LAKE``, else ``./data/lake``."""
    return Settings.from_env(lake)


def fail(exc: TurnlakeError) -> typer.Exit:
    """Print a turnlake error plainly (no traceback) and return the exit to raise."""
    console.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(2)


