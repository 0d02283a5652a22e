"""The lake's writer lock: table-mutating jobs (ingest, backfill, purge, erase) run one at a time.

An advisory ``flock`` on ``<lake>/_locks/writer.lock``: the kernel releases it when the holder
dies, so a crashed job never leaves the lake locked. Readers never take it.
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
    lock_dir = Path(root) / "_locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / "writer.lock"
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
                        f"{job}: the lake at {root} is being written by {holder}; "
                        f"gave up after {timeout_s:.0f}s, re-run when it has finished"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, f"{job} (pid {os.getpid()})".encode())
        yield
    finally:
        os.close(fd)  # closing releases the flock
