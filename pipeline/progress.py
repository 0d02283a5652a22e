"""Rich progress bars for long jobs, as plain callables the jobs can be handed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)


@contextmanager
def line_progress(label: str, *, total: int | None = None,
                  enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; shows a bar (or a spinner with a count when total is unknown)."""
    if not enabled:
        yield lambda _n: None
        return
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=False)
    with progress:
        task = progress.add_task(label, total=total)
        pending = 0

        def advance(n: int) -> None:
            nonlocal pending
            pending += n
            # Refreshing per line would cost more than the ingest itself.
            if pending >= 2000:
                progress.advance(task, pending)
                pending = 0

        yield advance
        progress.advance(task, pending)
