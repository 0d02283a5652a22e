"""Group commit: recordings that arrive within a few milliseconds become one ingest.

Request handlers ``submit`` their turns' JSON lines and wait on the returned future. One
writer thread takes the first waiting submission, gathers whatever else arrives within
``Settings.commit_window_ms`` (and up to ``commit_expect_ms`` while fewer submissions than
the previous group held have come, see ``_gather``), up to ``commit_max_turns`` turns, and
ingests them all as one run — under the lake's writer lock, one Delta commit per table —
then answers each submission with the outcome of each of its lines. The futures resolve
only after the commit returned, so an answer means the accepted turns are durable.

Index updates lag on purpose: a second thread brings the partitions each commit touched up
to date (several commits' worth at once when it falls behind) and records, per commit, the
time from its answer to the publication of its index (``turnlake_ack_to_searchable_seconds``).

Both steps are those of :class:`pipeline.live.LiveWriter`, the one write path of a warm host:
its ingest (with vector reuse) for the writer thread, its index step (delta segments,
compaction past the thresholds) for the indexer thread, behind one interface
(pipeline/service/steps.py). ``turnlake serve`` runs each step in
a child process of its own (pipeline/service/child_writer.py), so neither competes with the
searches for the interpreter lock; in-process (``child=False``, with an embedder object the
caller chose) full rebuilds still go to a child (pipeline/service/builder.py). This module is
the one place the service writes turns.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field

from lake.embedding.base import Embedder
from lake.errors import LakeError, TurnlakeError
from lake.settings import Settings
from lake.store import Partition
from pipeline.conflicts import with_advice
from pipeline.contract import TurnStatus
from pipeline.prepare import Quarantined
from pipeline.service.child_writer import ChildWriter
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.steps import InProcessSteps, TurnKey, WriteSteps

log = logging.getLogger(__name__)
_INDEX_RETRY_S = 2.0


@dataclass(frozen=True)
class LineOutcome:
    """What became of one submitted line."""

    status: TurnStatus
    reason: str | None = None
    field: str | None = None


@dataclass
class _Submission:
    lines: list[str]
    keys: list[TurnKey | None]  # each line's turn identity, when the line names one
    future: Future[list[LineOutcome]] = field(default_factory=Future)


class GroupWriter:
    """Commits concurrent submissions together; see the module docstring."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None,
                 index: bool = True, metrics: ServiceMetrics | None = None,
                 child: bool = False) -> None:
        self._settings = settings
        self._metrics = metrics or ServiceMetrics()
        # With ``child`` each step runs in a child process of its own (so the two overlap),
        # which embeds with the settings' model: ``embedder`` must be that model's.
        self._ingester: WriteSteps
        self._indexer: WriteSteps | None
        if child:
            self._ingester = ChildWriter(settings, embed=embedder is not None)
            # The indexer rebases a partition in the background: no delta (and no turn's
            # time until searchable) waits behind a full build of its partition.
            self._indexer = (ChildWriter(settings, embed=False, background_rebase=True)
                             if index else None)
        else:
            self._ingester = InProcessSteps(settings, embedder, index=index)
            self._indexer = self._ingester if index else None
        self._kept: set[TurnKey] = set()
        self._expected = 1  # submissions the last group held: as many are waited for
        self._queue: queue.Queue[_Submission | None] = queue.Queue()
        self._index = index
        self._to_index: queue.Queue[tuple[set[Partition], float] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def start(self) -> None:
        """Start the writer (and indexer) threads."""
        self._threads = [threading.Thread(target=self._write_loop, name="turnlake-writer",
                                          daemon=True)]
        if self._index:
            self._threads.append(threading.Thread(target=self._index_loop,
                                                  name="turnlake-indexer", daemon=True))
        for thread in self._threads:
            thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        """Commit what was submitted, then stop both threads."""
        self._closed = True
        self._queue.put(None)
        self._threads[0].join(timeout_s)
        self._to_index.put(None)
        for thread in self._threads[1:]:
            thread.join(timeout_s)
        self._ingester.close()
        if self._indexer is not None and self._indexer is not self._ingester:
            self._indexer.close()

    def submit(self, lines: list[str], keys: list[TurnKey | None]) -> Future[list[LineOutcome]]:
        """Queue turns' JSON lines; the future gives one outcome per line once durable."""
        if self._closed:
            raise LakeError("the service is shutting down; record again on another server")
        submission = _Submission(lines, keys)
        self._queue.put(submission)
        return submission.future

    # -- the writer thread ----------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group, stop = self._gather(first)
            self._commit(group)
            if stop:
                return

    def _gather(self, first: _Submission) -> tuple[list[_Submission], bool]:
        """The first submission plus those arriving within the window, and, until as many
        submissions as the previous group had are in, up to ``commit_expect_ms`` (bounded by
        ``commit_max_turns``).

        Hosts that wait for their answers come back together when a commit answers them, but
        not within a few milliseconds of each other: with 8 such clients recording one turn a
        request, a 5 ms window caught half of them (4 turns a commit, the rest waiting for
        the commit after, 330 ms ack p50, 23 turns/s); waiting for the previous group's
        count caught all 8 (205 ms, 37 turns/s). A lone host adds no wait: its group was 1."""
        group, turns = [first], len(first.lines)
        started = time.monotonic()
        least = started + self._settings.commit_window_ms / 1000
        most = max(least, started + self._settings.commit_expect_ms / 1000)
        while turns < self._settings.commit_max_turns:
            deadline = least if len(group) >= self._expected else most
            left = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return group, True
            group.append(item)
            turns += len(item.lines)
        self._expected = len(group)
        return group, False

    def _commit(self, group: list[_Submission]) -> None:
        started = time.perf_counter()
        lines = [line for s in group for line in s.lines]
        try:
            report, self._kept = self._ingester.ingest(lines,
                                                       source=f"<api {uuid.uuid4().hex}>")
            outcomes = self._outcomes(group, lines, report.accepted,
                                      {q.line: q for q in report.quarantined})
        except Exception as exc:  # every waiting request must hear of the failure
            failure = exc if isinstance(exc, TurnlakeError) else LakeError(
                f"recording failed: {type(exc).__name__}: {exc}")
            log.exception("group commit of %d turns failed", len(lines))
            for s in group:
                s.future.set_exception(failure)
            return
        acked = time.monotonic()
        for s, answer in zip(group, outcomes, strict=True):
            s.future.set_result(answer)
        m = self._metrics
        m.commit_seconds.observe(time.perf_counter() - started)
        m.commit_turns.observe(len(lines))
        m.commit_requests.observe(len(group))
        if self._index and report.partitions:
            self._to_index.put((set(report.partitions), acked))

    def _outcomes(self, group: list[_Submission], lines: list[str], accepted: int,
                  quarantined: dict[int, Quarantined]) -> list[list[LineOutcome]]:
        """Each submission's outcomes: a quarantined line is rejected; of the others, the first
        line of each turn the ingest kept is accepted and every other one a duplicate."""
        # Every kept turn has content rows (its assistant row at least), so the hook saw it.
        if len(self._kept) != accepted:
            raise LakeError(f"the ingest kept {accepted} turns but wrote rows of "
                            f"{len(self._kept)}; the outcomes cannot be told apart")
        answered: set[TurnKey] = set()
        out: list[list[LineOutcome]] = []
        number = 0
        for s in group:
            mine: list[LineOutcome] = []
            for key in s.keys:
                number += 1  # ingest numbers lines from 1
                if number in quarantined:
                    mine.append(_rejected(quarantined[number]))
                elif key is not None and key in self._kept and key not in answered:
                    answered.add(key)
                    mine.append(LineOutcome("accepted"))
                else:
                    mine.append(LineOutcome("duplicate", "this turn is recorded already"))
            out.append(mine)
        assert number == len(lines)
        return out

    # -- the indexer thread ---------------------------------------------------------------

    def _index_loop(self) -> None:
        indexer = self._indexer
        assert indexer is not None  # the thread runs only with index=True
        waiting: list[tuple[set[Partition], float]] = []
        stop = False
        while waiting or not stop:
            if not waiting:
                item = self._to_index.get()
                if item is None:
                    return
                waiting.append(item)
            stop = self._drain(waiting) or stop
            partitions: set[Partition] = set().union(*(p for p, _ in waiting))
            try:
                indexer.index(partitions)
            except Exception:  # the partitions stay stale (search says so); try again soon
                log.exception("index build of %d partitions failed", len(partitions))
                self._metrics.index_failures.inc()
                if stop:
                    return
                time.sleep(_INDEX_RETRY_S)
                continue
            published = time.monotonic()
            for _, acked in waiting:
                self._metrics.ack_to_searchable.observe(published - acked)
            waiting = []

    def _drain(self, waiting: list[tuple[set[Partition], float]]) -> bool:
        """Move every queued commit into ``waiting``; True when close() was asked for."""
        while True:
            try:
                item = self._to_index.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            waiting.append(item)


def _rejected(refused: Quarantined) -> LineOutcome:
    """A rejected line's outcome: the ingest's reason and the field it names. A conflict's
    advice is the CLI's (``--replace``); over HTTP a recorded turn cannot be replaced."""
    return LineOutcome("rejected", with_advice(refused, _NO_REPLACE).reason, refused.field)


_NO_REPLACE = "; the HTTP API cannot replace a recorded turn"
