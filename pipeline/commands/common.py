"""Shared pieces of the ``turnlake`` commands: the typer app, consoles, options, errors.

What the lake holds (turn text, ids, file names, reasons) and what a user typed is data:
it is printed literally, never read as Rich markup or emoji codes (a prompt holding
``a[0][/i]`` would crash the print, ``:smile:`` would turn into a picture). The consoles
therefore have emoji codes off, and data reaches them as :class:`rich.text.Text` (see
:func:`literal` and :func:`styled`); only the tool's own labels carry styles.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from lake.errors import LakeError, TurnlakeError
from lake.settings import DEFAULT_LAKE, Settings

if TYPE_CHECKING:
    from pipeline.prepare import Quarantined
    from pipeline.retention import Settle

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="turnlake: a conversation context database that builds itself.")
# soft_wrap: a line is written whole, never broken at a width a pipe or a log file does not
# have (rich assumes 80 columns there); a terminal wraps it itself. Tables still fit the width.
console = Console(stderr=True, emoji=False, soft_wrap=True)
out = Console(emoji=False, soft_wrap=True)

# A str, not a Path: Path("s3://bucket/x") would collapse the scheme's double slash.
LakeOption = Annotated[str | None, typer.Option(
    "--lake", help="Lake root: a folder or s3://bucket/prefix (default: $TURNLAKE_LAKE, else "
                   "./data/lake).")]

__all__ = ["LakeOption", "app", "console", "existing_lake", "fail", "literal", "out",
           "settings_from", "styled"]


def literal(value: object) -> Text:
    """``value`` as text Rich prints exactly as it is: no markup, no emoji codes."""
    return Text(str(value))


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain strings and ``(text, style)`` pairs; no part is read as markup.

    ``styled(("quarantined", "yellow"), f" {path}: {reason}")`` colours the label and prints
    the data literally.
    """
    return Text.assemble(*parts)


def settings_from(lake: str | Path | None) -> Settings:
    """Settings for a command: ``--lake``, else ``$TURNLAKE_LAKE``, else ``./data/lake``.

    An unusable root (an unsupported scheme, an unreadable policy, a regular file) exits with
    a clear error.
    """
    try:
        _refuse_file(lake)
        return Settings.from_env(lake)
    except TurnlakeError as exc:
        raise fail(exc) from exc


def _refuse_file(lake: str | Path | None) -> None:
    """A local lake root that is a regular file is said plainly (reading its policy would
    otherwise fail with "Not a directory")."""
    root = _root_of(lake)
    if root is not None and root.is_file():
        raise LakeError(f"lake path {root} is a file, not a folder")


def _root_of(lake: str | Path | None) -> Path | None:
    """The local folder ``--lake`` (or ``$TURNLAKE_LAKE``, or the default) names; None for s3://."""
    text = str(lake if lake is not None else os.environ.get("TURNLAKE_LAKE") or DEFAULT_LAKE)
    if "://" in text:
        return None  # s3:// lakes (and unsupported schemes, which Settings refuses)
    return Path(text).expanduser()


def existing_lake(lake: str | Path | None) -> Settings:
    """Settings of a lake that must already exist: for the commands that only read or maintain
    one. A mistyped local ``--lake`` would otherwise answer like an empty lake (or, for index
    builds, create folders there); it exits 2 instead. s3:// lakes are not checked.
    """
    settings = settings_from(lake)
    root = settings.lake
    if isinstance(root, Path) and not root.exists():
        raise fail(LakeError(f"no lake at {root} (the folder does not exist; check --lake or "
                             "$TURNLAKE_LAKE, or write one with `turnlake ingest`)"))
    return settings


# The CLI's way out of a conflict (a turn stored with other content), told with each one.
REPLACE_ADVICE = "; re-run with --replace to supersede it"


def advised_reason(entry: Quarantined) -> str:
    """Why a line was refused, as the CLI says it: a conflict with :data:`REPLACE_ADVICE`."""
    return entry.reason + REPLACE_ADVICE if entry.conflict else entry.reason


def erase_settler(settings: Settings) -> Settle:
    """What an erasure run from the CLI first settles: the recordings this lake's servers
    acknowledged (:func:`pipeline.service.spool.settler`). The service package loads only
    when an erasure runs (a hook that supersedes nothing never pays for it)."""
    def settle() -> None:
        from pipeline.service.spool import settler

        settler(settings)()
    return settle


def fail(exc: TurnlakeError) -> typer.Exit:
    """Print a turnlake error plainly (no traceback) and return the exit to raise."""
    # soft_wrap: one line however long, so that the message is grep-able and never cut.
    console.print(styled(("error:", "bold red"), f" {exc}"), soft_wrap=True)
    return typer.Exit(2)
