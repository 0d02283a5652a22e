"""The group writer's indexer thread: brings the partitions each commit touched up to date,
several commits' worth at once when it falls behind, and says when each answered group
became searchable (``turnlake_ack_to_searchable_seconds``).

A commit whose data file is larger than ``index_defer_bytes`` (a large request: the writer
commits one alone) is indexed in the background by the index step (lake.index.deferred), so
the commits beside and after it are published without waiting for its lexical and trigram
indexing; the step answers which turns it left to the background. A commit holding one of
those becomes searchable once none of its turns is deferred: meanwhile this thread looks at
its partitions' live manifests every ``poll_s`` (their pointers and manifests only: no lock,
no write) and runs the index step again, to learn which turns are still deferred, when the
deferred files changed or ``kick_s`` passed (a step also starts a failed background build
again).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

from lake.errors import IndexUnavailable
from lake.index.manifest import read_current
from lake.store import Partition
from pipeline.ingest import TurnKey
from pipeline.service.failures import log_failure
from pipeline.service.metrics import ServiceMetrics

log = logging.getLogger(__name__)
RETRY_S = 2.0


@dataclass(frozen=True)
class Commit:
    """A commit to index: its partitions, its answer's time (time.monotonic()), the number
    of the answered group it holds (spooled groups; None otherwise) and the turns it kept."""

    partitions: frozenset[Partition]
    acked: float
    number: int | None
    turns: frozenset[TurnKey] = frozenset()


class IndexLane:
    """The indexer thread's loop (:meth:`run`); commits come in through :attr:`queue`
    (None stops it). ``index(partitions)`` is the index step (WriteSteps.index: the turns
    it left to the background); ``spend(numbers, seconds)`` charges a step's time to the
    groups in it, ``searchable(numbers)`` reports groups searchable, ``failing(bool)``
    whether the last step failed."""

    def __init__(self, index: Callable[[set[Partition]], set[TurnKey]], root: str,
                 metrics: ServiceMetrics, *,
                 spend: Callable[[list[int | None], float], None],
                 searchable: Callable[[list[int]], None],
                 failing: Callable[[bool], None],
                 poll_s: float = 0.2, kick_s: float = 5.0) -> None:
        self.queue: queue.Queue[Commit | None] = queue.Queue()
        self._index = index
        self._root = root
        self._metrics = metrics
        self._spend = spend
        self._searchable = searchable
        self._failing = failing
        self._poll_s = poll_s
        self._kick_s = kick_s
        self._deferred: list[Commit] = []  # commits with turns indexed in the background
        # The files the held commits' partitions defer, as seen after the last step.
        self._files: dict[Partition, list[str] | None] = {}
        self._kicked = 0.0

    def run(self) -> None:
        """Index commits until stopped (what waits is indexed first)."""
        waiting: list[Commit] = []
        stop = False
        while waiting or not stop:
            if not waiting:
                try:
                    item = self.queue.get(timeout=self._poll_s if self._deferred else None)
                except queue.Empty:
                    self._look_at_deferred()
                    continue
                if item is None:
                    return
                waiting.append(item)
            stop = self._drain(waiting) or stop
            # With the held commits' partitions: the step says which of their turns are
            # still deferred.
            partitions: set[Partition] = set().union(
                *(c.partitions for c in [*waiting, *self._deferred]))
            began = time.perf_counter()
            try:
                deferred = self._index(partitions)
            except Exception as exc:  # the partitions stay stale (search says so); try again
                log_failure(log, "index build of %d partitions failed", exc, len(partitions))
                self._metrics.index_failures.inc()
                self._failing(True)
                if stop:
                    return
                time.sleep(RETRY_S)
                continue
            self._spend([c.number for c in waiting], time.perf_counter() - began)
            self._failing(False)
            self._after_step(deferred, waiting)
            waiting = []

    def _after_step(self, deferred: set[TurnKey], commits: list[Commit]) -> None:
        """An index step said ``deferred``: report ``commits`` (and those it held before)
        searchable when none of their turns is deferred, hold the others."""
        self._kicked = time.monotonic()
        held = [*self._deferred, *commits]
        self._deferred = [c for c in held if c.turns & deferred]
        self._published([c for c in held if not c.turns & deferred])
        parts: set[Partition] = set().union(*(c.partitions for c in self._deferred))
        self._files = {part: self._deferred_files(part) for part in parts}

    def _published(self, commits: list[Commit]) -> None:
        now = time.monotonic()
        for commit in commits:
            self._metrics.ack_to_searchable.observe(now - commit.acked)
        self._searchable([c.number for c in commits if c.number is not None])

    def _look_at_deferred(self) -> None:
        """Run the index step of the held commits' partitions when their deferred files
        changed (or every ``kick_s``), and report those no longer deferred."""
        parts: set[Partition] = set().union(*(c.partitions for c in self._deferred))
        if time.monotonic() - self._kicked < self._kick_s and all(
                self._deferred_files(part) == self._files.get(part) for part in parts):
            return
        try:
            deferred = self._index(parts)
        except Exception as exc:
            log_failure(log, "index build of %d partitions failed", exc, len(parts))
            self._kicked = time.monotonic()
            return
        self._after_step(deferred, [])

    def _deferred_files(self, part: Partition) -> list[str] | None:
        """The files the partition's live build defers (None: unreadable)."""
        try:
            current = read_current(self._root, *part)
        except IndexUnavailable:
            return None
        return [] if current is None else current[1].deferred_content

    def _drain(self, waiting: list[Commit]) -> bool:
        """Move every queued commit into ``waiting``; True when a stop was asked for."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            waiting.append(item)
