"""The lake's locks: table-mutating jobs (ingest, backfill, purge, erase) run one at a time, and
so do index builds.

Advisory ``flock`` s on ``<lake>/_locks/writer.lock`` and ``<lake>/_locks/index.lock``: the
kernel releases them when the holder dies, so a crashed job never leaves the lake locked.
Readers never take them.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lake.errors import ConcurrentWriteError


@contextmanager
def writer_lock(root: Path, *, timeout_s: float = 600.0, job: str = "writer") -> Iterator[None]:
    """Hold the lake's writer lock, waiting up to ``timeout_s`` for another writer to finish."""
    with _flock(root, "writer.lock", timeout_s=timeout_s, job=job, what="written"):
        yield


@contextmanager
def index_lock(root: Path, *, timeout_s: float = 600.0,
               job: str = "turnlake index build") -> Iterator[None]:
    """Hold the lake's index-build lock, waiting up to ``timeout_s`` for another build.

    Two builds of one partition at once would each publish and then delete the other's build
    folder, possibly while it is still being written.
    """
    with _flock(root, "index.lock", timeout_s=timeout_s, job=job, what="indexed"):
        yield


@contextmanager
def _flock(root: Path, name: str, *, timeout_s: float, job: str, what: str) -> Iterator[None]:
    lock_dir = Path(root) / "_locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / name
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = path.read_text(errors="replace").strip() or "another process"
                    raise ConcurrentWriteError(
                        f"{job}: the lake at {root} is being {what} by {holder}; "
                        f"gave up after {timeout_s:.0f}s, re-run when it has finished"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, f"{job} (pid {os.getpid()})".encode())
        yield
    finally:
        os.close(fd)  # closing releases the flock
