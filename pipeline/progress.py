"""Rich progress for long jobs, handed to the jobs as plain callables."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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


class JobProgress:
    """A set of progress lines; each ``counter``/``partitions`` call adds one lazily."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}

    def _task(self, label: str, total: int | None = None) -> TaskID | None:
        if self._progress is None:
            return None
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total)
        return self._tasks[label]

    def counter(self, label: str) -> Callable[[int], None]:
        """``advance(n)`` for a count without a known total."""
        pending = 0

        def advance(n: int) -> None:
            nonlocal pending
            pending += n
            # Refreshing per record would cost more than the work itself.
            if pending >= 1000 and self._progress is not None:
                task = self._task(label)
                assert task is not None
                self._progress.advance(task, pending)
                pending = 0

        return advance

    def total(self, label: str) -> Callable[[int, int], None]:
        """``update(done, total)`` for work with a known total."""
        def update(done: int, total: int) -> None:
            task = self._task(label, total)
            if task is not None and self._progress is not None:
                self._progress.update(task, completed=done, total=total)
        return update

    def partitions(self, label: str) -> Callable[[str, int, int], None]:
        """``update(name, done, total)`` for per-partition work."""
        def update(name: str, done: int, total: int) -> None:
            task = self._task(label, total)
            if task is not None and self._progress is not None:
                self._progress.update(task, completed=done, total=total,
                                      description=f"{label} ({name})")
        return update


@contextmanager
def job_progress(enabled: bool | None = None) -> Iterator[JobProgress]:
    """Progress bars on stderr (only when it is a terminal, unless told otherwise)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield JobProgress(None)
        return
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True))
    with progress:
        yield JobProgress(progress)
