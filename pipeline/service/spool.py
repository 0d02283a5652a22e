"""The write-ahead spool: recordings a server acknowledged before committing them to the lake.

A server answers a recording once its group of turns is decided (accepted, duplicate or
rejected, as the ingest would decide them) and written here, flushed to disk; the Delta
commit of several such groups follows a moment later (pipeline/service/writer.py). Each
server keeps its own folder, ``<lake>/_spool/<id>/``, holding one file per group
(``g<seq>.json``: its source name and lines) and a ``lock`` file it holds an exclusive
``flock`` on while it lives. A group's file is written under a temporary name, flushed, then
renamed, and the folder flushed: a file with the final name is whole, and only whole files
were acknowledged. The file goes once its group is committed.

A server killed before committing leaves its folder behind with the lock released (the
kernel drops a dead process's locks). :func:`orphans` finds such folders, each with its lock
taken, so that one server (of any on the lake) commits their groups, in order, and removes
them (:meth:`Orphan.remove`, then :meth:`Orphan.release`). Replaying a group that was
committed just before the kill is harmless: the ingest recognises its turns as duplicates.

Local lakes only: an object-store lake has no local disk that outlives the machine.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from lake.errors import LakeError
from lake.location import LakeLocation

if TYPE_CHECKING:
    from lake.settings import Settings
    from lake.store import Partition
    from pipeline.ingest import IngestReport
    from pipeline.live import LiveWriter

log = logging.getLogger(__name__)

SPOOL_DIR = "_spool"
_LOCK = "lock"
_GROUP = re.compile(r"g(\d{12})\.json")


@dataclass(frozen=True)
class SpooledGroup:
    """One acknowledged group: its sequence number, source name and turn lines."""

    seq: int
    source: str
    lines: list[str]


class _Folder:
    """A spool folder whose lock this process holds."""

    def __init__(self, path: Path, lock: IO[bytes]) -> None:
        self.path = path
        self._lock = lock

    def groups(self) -> list[SpooledGroup]:
        """The whole group files, in sequence order. LakeError naming the file when one
        cannot be read as a group (the folder is then left for an operator)."""
        found, unreadable = self.sorted_out()
        if unreadable:
            raise LakeError(unreadable[0])
        return found

    def sorted_out(self) -> tuple[list[SpooledGroup], list[str]]:
        """The group files that read as groups, in sequence order, and a message naming
        each one that does not."""
        found, unreadable = [], []
        for entry in self.path.iterdir():
            match = _GROUP.fullmatch(entry.name)
            if match is None:
                continue  # the lock, or a temporary file never acknowledged
            try:
                data = json.loads(entry.read_bytes())
                found.append(SpooledGroup(int(match.group(1)), str(data["source"]),
                                          [str(line) for line in data["lines"]]))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                unreadable.append(f"spooled group {entry} cannot be read ({exc}); its turns "
                                  "were acknowledged but are not committed: move the file "
                                  "aside and record its lines again")
        return sorted(found, key=lambda g: g.seq), unreadable

    def remove_group(self, seq: int) -> None:
        """Remove the file of group ``seq`` (committed)."""
        (self.path / _group_file(seq)).unlink(missing_ok=True)

    def remove(self, upto: int) -> None:
        """Remove the group files numbered ``upto`` or lower (their groups are committed)."""
        for entry in self.path.iterdir():
            match = _GROUP.fullmatch(entry.name)
            if match is not None and int(match.group(1)) <= upto:
                entry.unlink(missing_ok=True)

    def release(self) -> None:
        """Remove the folder if no group is left in it, then let the lock go."""
        try:
            if not any(_GROUP.fullmatch(e.name) for e in self.path.iterdir()):
                for entry in self.path.iterdir():
                    entry.unlink(missing_ok=True)
                self.path.rmdir()
        finally:
            self.unlock()

    def unlock(self) -> None:
        """Let the lock go, leaving the folder as it is."""
        self._lock.close()


class Spool(_Folder):
    """This server's spool folder (see the module notes)."""

    @classmethod
    def create(cls, lake: Path) -> Spool:
        """A new spool folder under ``lake``, its lock held by this process."""
        path = Path(lake) / SPOOL_DIR / uuid.uuid4().hex
        path.mkdir(parents=True)
        lock = _locked(path / _LOCK)
        if lock is None:  # a fresh folder: nobody else can hold it
            raise LakeError(f"could not lock the new spool folder {path}")
        _sync_dir(path.parent)
        return cls(path, lock)

    def append(self, group: SpooledGroup) -> None:
        """Write ``group`` durably: when this returns, its file survives a crash."""
        final = self.path / _group_file(group.seq)
        temporary = final.with_suffix(".tmp")
        with temporary.open("wb") as out:
            out.write(json.dumps({"source": group.source, "lines": group.lines}).encode())
            out.flush()
            os.fsync(out.fileno())
        temporary.rename(final)
        _sync_dir(self.path)


class Orphan(_Folder):
    """The spool folder of a server that died: its lock is held by this process now."""


def orphans(lake: Path) -> Iterator[Orphan]:
    """The spool folders under ``lake`` whose server is gone, each locked for the caller
    (who commits its groups, removes them, and calls ``release``, which removes the folder
    once it holds no group)."""
    root = Path(lake) / SPOOL_DIR
    if not root.is_dir():
        return
    for path in sorted(root.iterdir()):
        if not path.is_dir():
            continue
        lock = _locked(path / _LOCK)
        if lock is not None:
            yield Orphan(path, lock)


@dataclass(frozen=True)
class Recovered:
    """What a recovery committed: the acknowledged groups, and the partitions their turns
    landed in (whose indexes must be brought up to date before those turns are findable)."""

    groups: int = 0
    partitions: frozenset[Partition] = frozenset()


# How recovered groups are ingested: (source name, lines) per group, in one run.
GroupIngest = Callable[[list[tuple[str, list[str]]]], "IngestReport"]


def through(live: LiveWriter) -> GroupIngest:
    """A serving writer's own ingest of spooled groups (its model is loaded already)."""
    return lambda groups: live.ingest_groups(groups).ingest


def recover_orphans(settings: Settings, ingest: GroupIngest | None = None) -> Recovered:
    """Commit the groups of every orphaned spool of ``settings``' lake, each spool's in order
    and in one run, then remove them; what was committed. The one way spools are recovered:
    a serving writer passes its own ``ingest`` (:func:`through`); maintain and an erasure pass
    none, and the groups go through an ingest run of their own
    (:func:`pipeline.jobs.ingest_groups`, whose model loads only when a spool holds a group).
    Nothing on an object-store lake, which has no spool. A group file that cannot be read
    stays where it is (:func:`orphaned` names it), and so does a spool whose commit failed,
    for the next try; both are logged."""
    location = LakeLocation.of(settings.lake)
    if location.remote:
        return Recovered()
    if ingest is None:
        from pipeline.jobs import ingest_groups

        def ingest(groups: list[tuple[str, list[str]]]) -> IngestReport:
            return ingest_groups(settings, groups)
    recovered = 0
    partitions: set[Partition] = set()
    for orphan in orphans(location.local):
        try:
            groups, unreadable = orphan.sorted_out()
            for problem in unreadable:
                log.warning("%s", problem)
            if groups:
                report = ingest([(g.source, g.lines) for g in groups])
                partitions |= report.partitions
                for group in groups:
                    orphan.remove_group(group.seq)
                recovered += len(groups)
                log.warning("committed %d acknowledged group(s) a stopped server left in %s",
                            len(groups), orphan.path)
        except LakeError as exc:
            log.warning("the spool %s could not be committed (%s); it stays for the next try",
                        orphan.path, exc)
        finally:
            orphan.release()
    return Recovered(recovered, frozenset(partitions))


@dataclass(frozen=True)
class Orphaned:
    """What the spools of dead servers hold, looked at without taking anything."""

    groups: int  # acknowledged groups the next recovery would commit
    problems: list[str]  # a message for each group file that cannot be read (for an operator)


def orphaned(lake: Path) -> Orphaned:
    """The groups and unreadable group files in the spools of dead servers under ``lake``,
    each file read once; the spools are left as they are."""
    groups, problems = 0, []
    for orphan in orphans(lake):
        try:
            found, unreadable = orphan.sorted_out()
            groups += len(found)
            problems += unreadable
        finally:
            orphan.unlock()  # look only: never remove a folder here
    return Orphaned(groups, problems)


def settle_spools(settings: Settings, *, timeout_s: float) -> None:
    """Make every recording a server of ``settings``' lake answered so far part of the
    tables, before an erasure reads them: commit the spools of dead servers
    (:func:`recover_orphans`) and wait (up to ``timeout_s``) until the living servers have
    committed every group they answered before this call. Otherwise a turn answered before
    the erasure could be committed after it, and outlive it. LakeError when a living server
    does not catch up."""
    started = time.time()
    lake = LakeLocation.of(settings.lake).local
    recover_orphans(settings)
    if not wait_for_answered(lake, before=started, timeout_s=timeout_s):
        raise LakeError(f"a server of this lake has answered recordings it has not "
                        f"committed within {timeout_s:.0f} s (see {lake / SPOOL_DIR}); "
                        "erase again once it caught up")
    recover_orphans(settings)  # a server that died meanwhile


def settler(settings: Settings) -> Callable[[], None]:
    """The step an erasure is given to run first (``settle`` of
    :func:`pipeline.retention.erase`): :func:`settle_spools` of ``settings``' lake, whose
    model loads only when a dead server's spool holds turns (as maintain and a starting
    server commit them); nothing on an object-store lake, which has no spool."""
    def settle() -> None:
        if LakeLocation.of(settings.lake).remote:
            return
        settle_spools(settings, timeout_s=settings.lock_timeout_s)
    return settle


def wait_for_answered(lake: Path, *, before: float, timeout_s: float) -> bool:
    """Wait until no living server's spool under ``lake`` holds a group written before
    ``before`` (a ``time.time()``): every recording answered by then, by any server or
    worker on this lake's machine, is committed. A dead server's spool is passed by (its
    groups wait for a recovery). False when ``timeout_s`` passed first."""
    root = Path(lake) / SPOOL_DIR
    deadline = time.monotonic() + timeout_s
    while _answered_before(root, before):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _answered_before(root: Path, before: float) -> bool:
    """Whether a living spool under ``root`` holds a group file written before ``before``."""
    if not root.is_dir():
        return False
    for folder in root.iterdir():
        try:
            old = [f for f in folder.iterdir()
                   if _GROUP.fullmatch(f.name) and f.stat().st_mtime < before]
        except (FileNotFoundError, NotADirectoryError):
            continue  # committed and removed meanwhile, or not a folder
        if not old:
            continue
        orphan = _locked(folder / _LOCK)
        if orphan is not None:  # its server is gone: nothing will commit it but a recovery
            orphan.close()
            continue
        return True
    return False


def _locked(path: Path) -> IO[bytes] | None:
    """``path`` opened (made if missing) with an exclusive lock; None when another process
    holds the lock."""
    try:
        handle = path.open("ab")
    except FileNotFoundError:
        return None  # the folder went: its owner discarded it meanwhile
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    if not path.exists():  # discarded between the open and the lock
        handle.close()
        return None
    return handle


def _group_file(seq: int) -> str:
    return f"g{seq:012d}.json"


def _sync_dir(path: Path) -> None:
    """Flush a folder's entries (a new or renamed file) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
