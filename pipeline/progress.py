"""Progress for long jobs, handed to the jobs as plain callables: rich bars on a terminal,
and a plain line now and then when stderr is a file or a pipe (a job under nohup, cron or a
service manager), so a log shows a long job moving."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

# A job shorter than this prints no line at all: the command's own summary says enough.
LINE_EVERY_S = 30.0


class ProgressLines:
    """Where each progress count stands, written as one plain line a count at most every
    ``every_s`` seconds (the first after ``every_s``), and once more at the end for the counts
    that had a line: a log of a long job ends with where it finished."""

    def __init__(self, out: TextIO, every_s: float = LINE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._every_s = every_s
        self._clock = clock
        self._started = clock()
        self._state: dict[str, tuple[int, int | None, str]] = {}
        self._written: dict[str, tuple[float, tuple[int, int | None, str]]] = {}

    def update(self, label: str, done: int, total: int | None = None,
               detail: str = "") -> None:
        """Record ``done`` (of ``total``) for ``label``; write its line when one is due."""
        self._state[label] = (done, total, detail)
        now = self._clock()
        last = self._written.get(label)
        if now - (self._started if last is None else last[0]) >= self._every_s:
            self._write(label, now)

    def finish(self) -> None:
        """The last line of every count that has written one, if it moved since."""
        now = self._clock()
        for label, (_, state) in list(self._written.items()):
            if self._state[label] != state:
                self._write(label, now)

    def _write(self, label: str, now: float) -> None:
        done, total, detail = self._state[label]
        count = f"{done:,}" if total is None else f"{done:,}/{total:,}"
        where = f" ({detail})" if detail else ""
        self._out.write(f"{label}{where}: {count} after {now - self._started:.0f} s\n")
        self._out.flush()
        self._written[label] = (now, self._state[label])


class JobProgress:
    """A set of progress counts; each ``counter``/``total``/``partitions`` call adds one lazily,
    shown as a bar (``progress``), as lines (``lines``), or not at all."""

    def __init__(self, progress: Progress | None, lines: ProgressLines | None = None) -> None:
        self._progress = progress
        self._lines = lines
        self._tasks: dict[str, TaskID] = {}

    def _task(self, label: str, total: int | None = None) -> TaskID | None:
        if self._progress is None:
            return None
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total)
        return self._tasks[label]

    def _show(self, label: str, done: int, total: int | None = None, name: str = "") -> None:
        """Where ``label``'s count stands, on the bar and in the lines (whichever there is)."""
        if self._lines is not None:
            self._lines.update(label, done, total, name)
        task = self._task(label, total)
        if task is not None and self._progress is not None:
            self._progress.update(task, completed=done, total=total,
                                  description=f"{label} ({name})" if name else label)

    def counter(self, label: str) -> Callable[[int], None]:
        """``advance(n)`` for a count without a known total."""
        pending = 0
        done = 0

        def advance(n: int) -> None:
            nonlocal pending, done
            pending += n
            # Refreshing per record would cost more than the work itself.
            if pending >= 1000:
                done, pending = done + pending, 0
                self._show(label, done)

        return advance

    def total(self, label: str) -> Callable[[int, int], None]:
        """``update(done, total)`` for work with a known total."""
        def update(done: int, total: int) -> None:
            self._show(label, done, total)
        return update

    def partitions(self, label: str) -> Callable[[str, int, int], None]:
        """``update(name, done, total)`` for per-partition work."""
        def update(name: str, done: int, total: int) -> None:
            self._show(label, done, total, name)
        return update


@contextmanager
def job_progress(enabled: bool | None = None) -> Iterator[JobProgress]:
    """Progress bars on stderr when it is a terminal; otherwise (unless ``enabled`` is False)
    a plain line per count every :data:`LINE_EVERY_S` seconds of a job that lasts that long."""
    terminal = sys.stderr.isatty() if enabled is None else enabled
    if not terminal:
        lines = None if enabled is False else ProgressLines(sys.stderr, LINE_EVERY_S)
        yield JobProgress(None, lines)
        if lines is not None:
            lines.finish()
        return
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True))
    with progress:
        yield JobProgress(progress)
