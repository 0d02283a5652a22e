"""Reading record files: ``.jsonl``, ``.json`` and ``.ndjson`` files, each possibly gzipped
(``.gz``), or folders of them, line by line."""

from __future__ import annotations

import gzip
import io
import itertools
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple

from lake.errors import RecordError

# What a folder's record files are named (matched case-insensitively): the reader takes any
# of them plain or gzipped, so a folder must pick up exactly those.
PLAIN_SUFFIXES = (".jsonl", ".json", ".ndjson")
RECORD_SUFFIXES = PLAIN_SUFFIXES + tuple(f"{suffix}.gz" for suffix in PLAIN_SUFFIXES)
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark, which some editors and exporters write first
_RUN_LINES = 1024  # lines per run when reading line by line
_READ_BUFFER = 1 << 20
# Plain files at least this large are located in spans (see read_spans) rather than read.
SPAN_MIN_BYTES = 4 << 20
_SCAN_BLOCK = 4 << 20


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


class LineRun(NamedTuple):
    """Consecutive lines of one file exactly as read: line ends, surrounding white space and
    blank lines included (:meth:`items` drops them)."""

    path: Path
    first: int  # the number of the first line
    lines: list[bytes]

    def items(self) -> list[SourceLine]:
        """The run's non-blank lines, stripped, with their line numbers."""
        return _stripped(self.path, self.first, self.lines)


def _stripped(path: Path, first: int, lines: list[bytes]) -> list[SourceLine]:
    """Lines numbered from ``first``, stripped of surrounding white space; blank ones dropped."""
    items = []
    for number, raw in enumerate(lines, start=first):
        stripped = raw.strip()
        if stripped:
            items.append(SourceLine(path, number, stripped))
    return items


class FileSpan(NamedTuple):
    """Consecutive lines of a plain file, located rather than read: ``line_count`` lines from line
    ``first``, the ``length`` bytes from byte ``offset`` (see read_spans)."""

    path: Path
    first: int
    offset: int
    length: int
    line_count: int

    def items(self) -> list[SourceLine | SourceProblem]:
        """The span's non-blank lines, stripped, with their line numbers, as read_lines gives
        them; a file that can no longer be read, or has shrunk, ends them with a problem."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(self.length)
        except OSError as exc:
            return [SourceProblem(self.path, self.first,
                                  f"file could not be read from line {self.first}: {exc}")]
        short = self.length - len(data)  # before the BOM goes: that is not a shrunk file
        if self.offset == 0:
            data = _without_bom(data)  # the span holds the file's first line
        lines = data.split(b"\n")
        if not lines[-1]:
            lines.pop()  # what follows the span's last line end
        items: list[SourceLine | SourceProblem] = []
        items += _stripped(self.path, self.first, lines)
        if short > 0:
            items.append(SourceProblem(
                self.path, self.first + len(lines),
                f"file changed while being read: it ends {short} bytes "
                f"earlier than when ingest located line {self.first + self.line_count - 1}"))
        return items


class FolderSurvey(NamedTuple):
    """The files under a folder: the record files ingest reads and the others it skips."""

    folder: Path
    records: list[Path]
    skipped: list[Path]


def is_record_file(path: Path) -> bool:
    """Whether a file in a folder is read as records (by its suffix, in any letter case)."""
    return path.name.lower().endswith(RECORD_SUFFIXES)


def _gzipped(path: Path) -> bool:
    return path.name.lower().endswith(".gz")


def survey(folder: Path) -> FolderSurvey:
    """Sort the files under ``folder`` (recursively, in path order) into record files and
    skipped ones."""
    records: list[Path] = []
    skipped: list[Path] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        (records if is_record_file(path) else skipped).append(path)
    return FolderSurvey(folder, records, skipped)


def discover(paths: Sequence[Path]) -> list[Path]:
    """Expand folders into the record files they hold (sorted); refuse paths that do not exist.

    A file named directly is read whatever its name (gzipped when it ends in ``.gz``).
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(survey(path).records)
        elif path.is_file():
            found.append(path)
        else:
            raise RecordError(f"input path {path} does not exist")
    return found


def _without_bom(first_line: bytes) -> bytes:
    """A file's first line without a leading UTF-8 byte-order mark (JSON parsers refuse it)."""
    return first_line[len(BOM):] if first_line.startswith(BOM) else first_line


def read_lines(path: Path) -> Iterator[SourceLine | SourceProblem]:
    """Yield each non-blank line of a (possibly gzipped) file, stripped; a truncated or corrupt
    file ends with a SourceProblem after the lines that could be read."""
    for part in read_runs(path, _RUN_LINES):
        if isinstance(part, SourceProblem):
            yield part
        else:
            yield from part.items()


def _open(path: Path, buffer: int = io.DEFAULT_BUFFER_SIZE) -> gzip.GzipFile | BinaryIO:
    """A (possibly gzipped) file opened for reading; a plain file is read ``buffer`` bytes at
    a time (gzip decompresses in blocks of its own). The caller closes it."""
    if _gzipped(path):
        return gzip.open(path, "rb")
    return open(path, "rb", buffering=buffer)


def read_runs(path: Path, size: int) -> Iterator[LineRun | SourceProblem]:
    """A (possibly gzipped) file's lines in runs of up to ``size``, as read_lines reads them but
    leaving each line as it is: stripping and dropping blank lines is left to whoever uses the
    run (ingest has its worker processes do it, not the process that reads).

    A truncated or corrupt file ends with a SourceProblem after the lines that could be read.
    """
    done = 0
    try:
        # Large reads: with the default 8 kB buffer, reading 160 MB of records took 0.10 s of
        # the ingesting process, 0.03 s with a buffer of 1 MiB.
        with _open(path, _READ_BUFFER) as fh:
            # islice reads a run's lines in C; a Python loop per line cost three times as much.
            while lines := list(itertools.islice(fh, size)):
                if not done:
                    lines[0] = _without_bom(lines[0])
                yield LineRun(path, done + 1, lines)
                done += len(lines)
        return
    except (OSError, EOFError, zlib.error):
        pass  # the lines of the run being read went with the exception
    yield from _read_on(path, done, size)


def read_spans(path: Path, size: int) -> Iterator[FileSpan | LineRun | SourceProblem]:
    """read_runs, except that a large plain file's runs of exactly ``size`` lines are located,
    not read: whoever prepares a span reads it (:meth:`FileSpan.items`). Its last, shorter run
    is read, so that it can share a chunk with the next file's lines.

    Ingest reads records in the one process that commits them; locating a run there costs
    a scan for line ends, while reading it cost splitting, joining and sending every byte to
    a worker (a tenth of that process's time on 100k turns).
    """
    try:
        small = _gzipped(path) or path.stat().st_size < SPAN_MIN_BYTES
    except OSError:
        small = True  # read_runs reports it
    if small:
        yield from read_runs(path, size)
        return
    done, start = 0, 0  # lines located, and the byte where the next span starts
    try:
        with open(path, "rb") as fh:
            position, lines = 0, 0  # the block's first byte; line ends since start
            while block := fh.read(_SCAN_BLOCK):
                # find() runs memchr; count() of one byte walks every byte, 3x slower here.
                at = block.find(b"\n")
                while at >= 0:
                    lines += 1
                    if lines == size:
                        yield FileSpan(path, done + 1, start, position + at + 1 - start, size)
                        done, start, lines = done + size, position + at + 1, 0
                    at = block.find(b"\n", at + 1)
                position += len(block)
            fh.seek(start)
            tail = fh.readlines()
    except OSError:
        yield from _read_on(path, done, size)
        return
    if tail:
        if not done:
            tail[0] = _without_bom(tail[0])
        yield LineRun(path, done + 1, tail)


def _read_on(path: Path, done: int, size: int) -> Iterator[LineRun | SourceProblem]:
    """After a read error: the lines after line ``done``, read one at a time, and the problem."""
    # Keeping each line before the error: a corrupt or truncated file fails at the same place
    # again (read in small blocks, so that little is read past the last good line).
    run: list[bytes] = []
    line_no = done
    problem = None
    try:
        with _open(path) as fh:
            for line_no, raw in enumerate(fh, start=1):
                if line_no > done:
                    run.append(_without_bom(raw) if line_no == 1 else raw)
                    if len(run) == size:
                        yield LineRun(path, line_no - size + 1, run)
                        run = []
    except (OSError, EOFError, zlib.error) as exc:
        problem = SourceProblem(path, line_no + 1,
                                f"file could not be read past line {line_no}: {exc}")
    if run:
        yield LineRun(path, line_no - len(run) + 1, run)
    if problem is not None:
        yield problem
