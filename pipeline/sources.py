"""Reading record files: ``.jsonl`` and ``.jsonl.gz`` files, or folders of them, line by line."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from lake.errors import RecordError

RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".ndjson")


class SourceLine(NamedTuple):
    """One raw line of an input file, with where it came from.

    A named tuple: ingest makes one per line, and a tuple is made in half the time of a frozen
    dataclass."""

    path: Path
    line: int
    raw: bytes


class SourceProblem(NamedTuple):
    """A file-level problem (unreadable, truncated gzip) found while reading."""

    path: Path
    line: int
    reason: str


def discover(paths: Sequence[Path]) -> list[Path]:
    """Expand folders into the record files they hold (sorted); refuse paths that do not exist."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*")
                                if p.is_file() and p.name.endswith(RECORD_SUFFIXES)))
        elif path.is_file():
            found.append(path)
        else:
            raise RecordError(f"input path {path} does not exist")
    return found


def read_lines(path: Path) -> Iterator[SourceLine | SourceProblem]:
    """Yield each non-blank line of a (possibly gzipped) file; a truncated or corrupt file ends
    with a SourceProblem after the lines that could be read."""
    opener = gzip.open if path.name.endswith(".gz") else open
    line_no = 0
    try:
        with opener(path, "rb") as fh:
            for line_no, raw in enumerate(fh, start=1):
                stripped = raw.strip()
                if stripped:
                    yield SourceLine(path, line_no, stripped)
    except (OSError, EOFError, zlib.error) as exc:
        yield SourceProblem(path, line_no + 1, f"file could not be read past line {line_no}: {exc}")
