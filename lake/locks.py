"""The lake's locks: table-mutating jobs (ingest, backfill, purge, erase) run one at a time, and
so do index builds. Readers never take them.

Local lakes use advisory ``flock`` s on ``<lake>/_locks/writer.lock`` and ``index.lock``: the
kernel releases them when the holder dies, so a crashed job never leaves the lake locked.

Object-store lakes have no kernel to do that, so a lock is a *lease*: the object
``_locks/<name>`` is created with a conditional PUT (``If-None-Match: *``, so only one of many
racing writers succeeds), renewed by the holder every few seconds with ``If-Match`` on its own
ETag, and deleted on release. A lease not renewed within ``LEASE_S`` belongs to a dead holder;
the next writer takes it over with ``If-Match`` on the stale ETag, which again only one
contender can win.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from lake.errors import ConcurrentWriteError, LakeError
from lake.location import LakeLocation, S3Blobs

Waiting = Callable[[str], None]  # told once who holds a lock that a job has to wait for
LEASE_S = 30.0  # an object-store lock not renewed for this long belongs to a dead holder
RENEW_S = 5.0


@contextmanager
def writer_lock(root: Path | str | LakeLocation, *, timeout_s: float = 600.0,
                job: str = "writer", on_wait: Waiting | None = None) -> Iterator[None]:
    """Hold the lake's writer lock, waiting up to ``timeout_s`` for another writer to finish.

    ``on_wait(holder)`` is called once, with the holder's description, when the lock is
    taken and the job has to wait.
    """
    with _lock(root, "writer.lock", timeout_s=timeout_s, job=job, what="written",
               on_wait=on_wait):
        yield


@contextmanager
def index_lock(root: Path | str | LakeLocation, *, timeout_s: float = 600.0,
               job: str = "turnlake index build") -> Iterator[None]:
    """Hold the lake's index-build lock, waiting up to ``timeout_s`` for another build.

    Two builds of one partition at once would each publish and then delete the other's build
    folder, possibly while it is still being written.
    """
    with _lock(root, "index.lock", timeout_s=timeout_s, job=job, what="indexed"):
        yield


def _lock(root: Path | str | LakeLocation, name: str, *, timeout_s: float, job: str,
          what: str, on_wait: Waiting | None = None) -> AbstractContextManager[None]:
    location = LakeLocation.of(root)
    if location.remote:
        blobs = location.blobs
        assert isinstance(blobs, S3Blobs)
        return _lease(blobs, location, name, timeout_s=timeout_s, job=job, what=what,
                      on_wait=on_wait)
    return _flock(location.local, name, timeout_s=timeout_s, job=job, what=what,
                  on_wait=on_wait)


def _busy(job: str, root: object, what: str, holder: str, timeout_s: float) -> Exception:
    return ConcurrentWriteError(
        f"{job}: the lake at {root} is being {what} by {holder}; "
        f"gave up after {timeout_s:.0f}s, re-run when it has finished")


@contextmanager
def _lease(blobs: S3Blobs, location: LakeLocation, name: str, *, timeout_s: float, job: str,
           what: str, on_wait: Waiting | None) -> Iterator[None]:
    key = f"_locks/{name}"
    holder = f"{job} (pid {os.getpid()} on {socket.gethostname()})"

    def body() -> bytes:
        return json.dumps({"holder": holder, "expires_at": time.time() + LEASE_S}).encode()

    deadline = time.monotonic() + timeout_s
    while True:
        etag = blobs.put_if(key, body(), etag=None)
        if etag is not None:
            break
        current = blobs.read_tagged(key)
        if current is not None:
            try:
                lease = json.loads(current[0])
                expired = float(lease["expires_at"]) < time.time()
                other = str(lease.get("holder", "another process"))
            except (ValueError, KeyError, TypeError):
                expired, other = True, "an unreadable lease"
            if expired:
                etag = blobs.put_if(key, body(), etag=current[1])
                if etag is not None:
                    break
            if time.monotonic() >= deadline:
                raise _busy(job, location, what, other, timeout_s)
            if on_wait is not None:
                on_wait(other)
                on_wait = None
        time.sleep(0.2)

    state: dict[str, str | bool] = {"etag": etag, "lost": False}
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_S):
            try:
                renewed = blobs.put_if(key, body(), etag=str(state["etag"]))
            except LakeError:
                continue  # a transient store error: the lease still has time left
            if renewed is None:
                state["lost"] = True  # taken over: this holder stalled past its lease
                return
            state["etag"] = renewed

    keeper = threading.Thread(target=renew, name=f"turnlake-lease-{name}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
        if not state["lost"]:
            blobs.delete_if(key, str(state["etag"]))
    if state["lost"]:
        raise ConcurrentWriteError(
            f"{job}: lost the lake lock {key} at {location} (stalled past its {LEASE_S:.0f}s "
            "lease); another job took it over — check the lake and re-run")


@contextmanager
def _flock(root: Path, name: str, *, timeout_s: float, job: str, what: str,
           on_wait: Waiting | None) -> Iterator[None]:
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
                    raise _busy(job, root, what, _holder(path), timeout_s) from None
                if on_wait is not None:
                    on_wait(_holder(path))
                    on_wait = None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, f"{job} (pid {os.getpid()})".encode())
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _holder(path: Path) -> str:
    """Who holds a local lock, as its holder wrote it into the lock file."""
    return path.read_text(errors="replace").strip() or "another process"
