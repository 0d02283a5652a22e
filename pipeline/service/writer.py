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
time from its answer to the publication of its index (``turnlake_ack_to_searchable_seconds``;
pipeline/service/index_lane.py). A large request's rows are committed alone and indexed in
the background, so the turns committed beside and after them are published first; with the
spool and child processes, its texts are embedded first in a child of their own (the vector
lane), while the groups answered after it are committed, so its embedding holds no other
key's commit either (it is then committed after them: pipeline/service/committer.py).

Both steps are those of :class:`pipeline.live.LiveWriter`, the one write path of a warm host:
its ingest (with vector reuse) for the writer thread, its index step (delta segments,
compaction past the thresholds) for the indexer thread, behind one interface
(pipeline/service/steps.py). ``turnlake serve`` runs each step in
a child process of its own (pipeline/service/child_writer.py), so neither competes with the
searches for the interpreter lock; in-process (``child=False``, with an embedder object the
caller chose) full rebuilds still go to a child (pipeline/service/builder.py). This module is
the one place the service writes turns.

With the spool (``Settings.record_spool``, local lakes; pipeline/service/spool.py), a group is
answered once it is decided and flushed to the spool (pipeline/service/acceptor.py), not once
committed: a third thread, the committer (pipeline/service/committer.py), commits the
answered groups, as many as are waiting in one run, while the writer thread already decides
the next ones. Hosts that wait for their answers then
wait for a decision (milliseconds) rather than for a Delta commit, and the commits grow with
the load instead of with the number of hosts. :meth:`GroupWriter.flush` waits until every
group answered so far is committed (the service's reads and erasures call it first, so a host
reads what it recorded); at start, the spools of servers that died are committed first.
Under more load than the machine commits and indexes within ``record_max_lag_s``, the writer
holds a key's next requests while one of its answered groups is still not searchable after
that long, so hosts wait for answers rather than for their turns to be found; that and the
rest of each key's fair share of the writer (a large request goes alone; a key that used the
writer for long waits while others record) are pipeline/service/fairness.py.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field

from lake.embedding.base import Embedder
from lake.errors import LakeError, TurnlakeError
from lake.index.status import partition_statuses
from lake.location import LakeLocation
from lake.settings import Settings
from lake.store import LakeStore, Partition
from pipeline.ingest import IngestReport, TurnKey
from pipeline.prepare import Quarantined
from pipeline.service.acceptor import Acceptor, AcceptorDied, ChildAcceptor, SpoolAcceptor
from pipeline.service.child_writer import ChildWriter
from pipeline.service.committer import AnsweredGroup, Committer
from pipeline.service.failures import log_failure
from pipeline.service.fairness import FairShare
from pipeline.service.index_lane import Commit, IndexLane
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.outcomes import LineOutcome, line_outcomes
from pipeline.service.startup import Readiness, StartUp
from pipeline.service.steps import InProcessSteps, WriteSteps

log = logging.getLogger(__name__)
# The longest the lag bound holds one group: past it, the index step is taken to be stuck.
_MOST_HOLD_S = 60.0


@dataclass
class _Submission:
    lines: list[str]
    keys: list[TurnKey | None]  # each line's turn identity, when the line names one
    sharer: str = ""  # whose fair share it counts against (the API key)
    future: Future[list[LineOutcome]] = field(default_factory=Future)

    @property
    def size(self) -> int:
        """Characters of its lines (about their bytes: what deciding and indexing cost)."""
        return sum(len(line) for line in self.lines)


class GroupWriter:
    """Commits concurrent submissions together; see the module docstring."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None,
                 index: bool = True, metrics: ServiceMetrics | None = None,
                 child: bool = False) -> None:
        self._settings = settings
        # An object-store lake has no local disk to spool on: there a group is answered once
        # committed.
        self._spooling = settings.record_spool and not LakeLocation.of(settings.lake).remote
        self._child = child
        self._acceptor: Acceptor | None = None
        self._counts = threading.Condition()
        self._answered = 0  # spooled groups answered
        self._committed = 0  # of those, committed
        self._uncommitted_turns = 0
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
        self._committer = self._new_committer(embedder) if self._spooling else None
        self._expected = 1  # submissions the last group held: as many are waited for
        self._queue: queue.Queue[_Submission | None] = queue.Queue()
        # Arrived submissions not decided yet, in arrival order (the writer thread's own):
        # those the fair share holds, and those that start the next group.
        self._held: list[_Submission] = []
        self._held_count = 0  # len(self._held), for the other threads
        self._stopping = False  # close() asked: decide what is held, then stop
        self._fair = FairShare(share_bytes=settings.record_fair_share_bytes,
                               lag_s=settings.record_max_lag_s if self._spooling else 0.0,
                               most_hold_s=_MOST_HOLD_S)
        self._shares: dict[int, dict[str, int]] = {}  # answered groups: bytes per key
        self._costs: dict[int, float] = {}  # answered groups: seconds the steps spent on them
        self._index = index
        self._lane = (IndexLane(self._index_step, str(settings.lake), self._metrics,
                                spend=self._spend, searchable=self._searchable,
                                failing=self._set_failing)
                      if self._indexer is not None else None)
        self._to_index: queue.Queue[Commit | None] = (self._lane.queue if self._lane is not None
                                                      else queue.Queue())
        self._unpublished: dict[int, float] = {}  # answered groups not searchable yet: ack
        self._index_failing = False  # the index step's last try failed
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._start_lock = threading.Lock()  # orders the start of the threads and close()
        self._startup = StartUp(
            recover=self._ingester.recover if self._spooling else None,
            # At start, everything recovered is indexed before readiness: nothing deferred.
            index=self._index_all if self._indexer is not None else None,
            warm=self._warm, stopped=lambda: self._closed, behind=self._behind)
        self._starter: threading.Thread | None = None
        self._up = threading.Event()  # the start-up finished or gave up
        self._release = threading.Event()  # close() is done with the children
        metrics = self._metrics
        metrics.writer_queue.set_function(lambda: self._queue.qsize() + self._held_count)
        metrics.held_keys.set_function(self._paused_keys)
        metrics.index_backlog.set_function(self._to_index.qsize)
        metrics.unsearchable_groups.set_function(lambda: len(self._unpublished))
        metrics.startup_seconds.set_function(lambda: self._startup.readiness.seconds)
        metrics.recovered_groups.set_function(
            lambda: self._startup.readiness.recovered_groups)

    def _new_committer(self, embedder: Embedder | None) -> Committer:
        """The committer of the answered groups (pipeline/service/committer.py), with the
        vector lane when the steps run in children and embed: a large group's texts are
        embedded in a child of their own while the groups after it are committed."""
        vectors = (ChildWriter(self._settings, embed=True)
                   if self._child and embedder is not None else None)
        return Committer(self._settings, self._ingester, vectors=vectors,
                         metrics=self._metrics, committed=self._committed_groups,
                         spend=self._spend, closing=lambda: self._closed)

    @property
    def spooling(self) -> bool:
        """Whether groups are answered once spooled (see the module notes)."""
        return self._spooling

    def start(self, *, wait: bool = False) -> None:
        """Start up in a thread of its own (pipeline/service/startup.py): commit what stopped
        servers left in their spools, start deciding the queued recordings, bring the
        recovered partitions up to date and warm the steps; :attr:`readiness` says how far it
        is. ``wait`` returns only once it is ready (or closed)."""
        self._starter = threading.Thread(target=self._start_up, name="turnlake-start",
                                         daemon=True)
        self._starter.start()
        if wait:  # not join(): the thread stays until close() (see _start_up)
            self._up.wait()

    @property
    def readiness(self) -> Readiness:
        """How far the start-up is; ready once every acknowledged turn is searchable."""
        return self._startup.readiness

    def backlog(self) -> dict[str, float]:
        """What waits in the writer: requests not decided yet, turns answered and not
        committed, commits not indexed yet, answered groups not searchable yet and the age of
        the oldest (seconds)."""
        with self._counts:
            oldest = min(self._unpublished.values(), default=None)
            return {"queued_requests": self._queue.qsize() + self._held_count,
                    "paused_keys": self._fair.paused_keys(time.monotonic()),
                    "uncommitted_turns": self._uncommitted_turns,
                    "commits_to_index": self._to_index.qsize(),
                    "unsearchable_groups": len(self._unpublished),
                    "oldest_unsearchable_s": 0.0 if oldest is None
                    else round(time.monotonic() - oldest, 3)}

    def _paused_keys(self) -> int:
        with self._counts:
            return self._fair.paused_keys(time.monotonic())

    def _start_up(self) -> None:
        try:
            if self._start_threads():
                self._startup.finish()
        finally:
            self._up.set()
            # The child processes this thread started are told to die with it (Linux's
            # parent-death signal follows the thread, not the process): it stays until
            # close() is done with them.
            self._release.wait()

    def _start_threads(self) -> bool:
        """Recover, then start the writer's threads; False when closed first."""
        if not self._startup.recover():
            return False
        with self._start_lock:
            if self._closed:
                return False
            if self._spooling:
                self._acceptor = self._new_acceptor()
                self._acceptor.committed(0)  # starts its child now, not in the first request
            self._threads = [threading.Thread(target=self._write_loop,
                                              name="turnlake-writer", daemon=True)]
            if self._committer is not None:
                self._threads.append(threading.Thread(target=self._committer.run,
                                                      name="turnlake-committer", daemon=True))
            if self._lane is not None:
                self._threads.append(threading.Thread(target=self._lane.run,
                                                      name="turnlake-indexer", daemon=True))
            for thread in self._threads:
                thread.start()
        return True

    def _behind(self) -> set[Partition]:
        """Partitions whose index is older than their rows, or missing (a server killed
        between a commit and its index step leaves such)."""
        statuses = partition_statuses(LakeStore(self._settings.lake))
        return {part for part, status in statuses.items()
                if status.freshness in ("stale", "missing")}

    def _index_step(self, partitions: set[Partition]) -> set[TurnKey]:
        """The indexer thread's step: the turns it left to the background."""
        assert self._indexer is not None
        return self._indexer.index(partitions)

    def _index_all(self, partitions: set[Partition]) -> None:
        """The start-up's index step: every row of the partitions, none deferred."""
        assert self._indexer is not None
        self._indexer.index(partitions, defer=False)

    def _set_failing(self, failing: bool) -> None:
        with self._counts:
            self._index_failing = failing
            if failing:
                self._counts.notify_all()

    def _warm(self) -> None:
        """Load what the first recording and its index step need (their child processes,
        the model, the index builder's modules) before the server says it is ready."""
        self._ingester.warm()
        if self._indexer is not None and self._indexer is not self._ingester:
            self._indexer.warm()
        # Not the vector lane's child: it starts with the first large request (its own
        # lane), not in every start-up before readiness.

    def close(self, timeout_s: float = 30.0) -> None:
        """Commit what was submitted, then stop the threads."""
        with self._start_lock:
            self._closed = True
        self._up.wait(timeout_s)
        threads = {thread.name: thread for thread in self._threads}
        self._queue.put(None)
        if "turnlake-writer" in threads:
            threads["turnlake-writer"].join(timeout_s)
        else:  # closed before the start-up got this far: nobody decides what is queued
            self._refuse_queued()
        if self._committer is not None:
            self._committer.stop()
            if "turnlake-committer" in threads:
                threads["turnlake-committer"].join(timeout_s)
            if self._acceptor is not None:
                self._acceptor.close()
        self._to_index.put(None)
        if "turnlake-indexer" in threads:
            threads["turnlake-indexer"].join(timeout_s)
        if self._committer is not None:
            self._committer.close()
        self._ingester.close()
        if self._indexer is not None and self._indexer is not self._ingester:
            self._indexer.close()
        self._release.set()
        if self._starter is not None:
            self._starter.join(timeout_s)

    def _refuse_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item.future.set_exception(LakeError(
                    "the service shut down before it started recording; record again"))

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every group answered so far is committed (at once without the spool);
        False when ``timeout_s`` (default: the lake's lock timeout) passed first."""
        if not self._spooling:
            return True
        with self._counts:
            target = self._answered
            return self._counts.wait_for(lambda: self._committed >= target,
                                         timeout_s if timeout_s is not None
                                         else self._settings.lock_timeout_s)

    def _new_acceptor(self) -> Acceptor:
        return ChildAcceptor(self._settings) if self._child else SpoolAcceptor(self._settings)

    def submit(self, lines: list[str], keys: list[TurnKey | None], *,
               sharer: str = "") -> Future[list[LineOutcome]]:
        """Queue turns' JSON lines; the future gives one outcome per line once durable.
        ``sharer`` names whose fair share of the writer they count against (the API key:
        pipeline/service/fairness.py)."""
        if self._closed:
            raise LakeError("the service is shutting down; record again on another server")
        submission = _Submission(lines, keys, sharer)
        with self._counts:
            self._fair.seen(sharer, time.monotonic())
        self._queue.put(submission)
        return submission.future

    # -- the writer thread ----------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            group = self._gather()
            if group:
                if self._spooling:
                    self._accept(group)
                else:
                    self._commit(group)
            if self._stopping and not self._held:
                return

    def _gather(self) -> list[_Submission]:
        """The next group: the first submission the fair share admits (pipeline/service/
        fairness.py), plus those it admits among the arrivals within the window and, until
        as many submissions as the previous group had are in, up to ``commit_expect_ms``
        (bounded by ``commit_max_turns``). Empty once close() asked and nothing is held.

        Hosts that wait for their answers come back together when a commit answers them, but
        not within a few milliseconds of each other: with 8 such clients recording one turn a
        request, a 5 ms window caught half of them (4 turns a commit, the rest waiting for
        the commit after, 330 ms ack p50, 23 turns/s); waiting for the previous group's
        count caught all 8 (205 ms, 37 turns/s). A lone host adds no wait: its group was 1."""
        group: list[_Submission] = []
        turns, closed = 0, False
        while not group:
            if not self._held:
                if self._stopping:
                    return []
                self._arrived(self._queue.get())
            group, turns, closed = self._admit(group, turns)
            if not group:  # all held: wait for an arrival, a searchable group, a pause's end
                with self._counts:
                    wait = self._fair.next_change(time.monotonic())
                with contextlib.suppress(queue.Empty):
                    self._arrived(self._queue.get(timeout=wait))
        started = time.monotonic()
        least = started + self._settings.commit_window_ms / 1000
        most = max(least, started + self._settings.commit_expect_ms / 1000)
        while not closed and not self._stopping and turns < self._settings.commit_max_turns:
            deadline = least if len(group) >= self._expected else most
            left = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            self._arrived(item)
            group, turns, closed = self._admit(group, turns)
        self._expected = len(group)
        return group

    def _arrived(self, item: _Submission | None) -> None:
        if item is None:
            self._stopping = True
        else:
            self._held.append(item)
        self._held_count = len(self._held)

    def _admit(self, group: list[_Submission], turns: int
               ) -> tuple[list[_Submission], int, bool]:
        """Move the held submissions the fair share admits into ``group`` (see
        pipeline/service/fairness.py; at close every one is, a large one still alone):
        the group, its turns, and whether it is closed (it holds a large request)."""
        share = self._fair.share_bytes
        closed = any(s.size > share for s in group)
        used: dict[str, int] = {}
        for s in group:
            used[s.sharer] = used.get(s.sharer, 0) + s.size
        blocked: set[str] = set()  # a key's held request holds its later ones
        keep: list[_Submission] = []
        now = time.monotonic()
        with self._counts:
            failing = self._index_failing
            for item in self._held:
                size, sharer = item.size, item.sharer
                heavy = size > share
                admit = (not closed and sharer not in blocked
                         and turns < self._settings.commit_max_turns
                         and not (heavy and group)
                         and not (not heavy and used.get(sharer, 0) + size > share
                                  and sharer in used)
                         and (self._stopping or self._fair.held(
                             sharer, now, index_failing=failing) is None))
                if not admit:
                    blocked.add(sharer)
                    keep.append(item)
                    continue
                group.append(item)
                self._fair.decided(sharer)
                turns += len(item.lines)
                used[sharer] = used.get(sharer, 0) + size
                closed = heavy
        self._held = keep
        self._held_count = len(keep)
        return group, turns, closed

    def _commit(self, group: list[_Submission]) -> None:
        started = time.perf_counter()
        lines = [line for s in group for line in s.lines]
        try:
            report = self._ingester.ingest(lines, source=f"<api {uuid.uuid4().hex}>")
            outcomes = self._outcomes(group, lines, report.kept,
                                      {q.line: q for q in report.quarantined})
        except Exception as exc:  # every waiting request must hear of the failure
            _fail(group, exc, f"group commit of {len(lines)} turns failed")
            return
        acked = time.monotonic()
        for s, answer in zip(group, outcomes, strict=True):
            s.future.set_result(answer)
        self._report_refs(report)
        self._observe_commit(started, len(lines), len(group))
        if self._index and report.partitions:
            self._to_index.put(Commit(frozenset(report.partitions), acked, None,
                                      frozenset(report.kept)))

    # -- the spool: the writer thread answers, the committer thread commits -----------------

    def _accept(self, group: list[_Submission]) -> None:
        began = time.monotonic()
        lines = [line for s in group for line in s.lines]
        source = f"<api {uuid.uuid4().hex}>"
        with self._counts:  # the spool holds at most spool_max_turns: beyond, wait for room
            self._counts.wait_for(lambda: self._uncommitted_turns == 0 or
                                  self._uncommitted_turns + len(lines)
                                  <= self._settings.spool_max_turns)
        acceptor = self._acceptor
        assert acceptor is not None  # made by start()
        try:
            accepted = acceptor.accept(lines, source=source)
            outcomes = self._outcomes(group, lines, accepted.kept,
                                      {q.line: q for q in accepted.refused})
        except Exception as exc:
            _fail(group, exc, f"deciding a group of {len(lines)} turns failed")
            if isinstance(exc, AcceptorDied):
                # What it spooled is committed from memory (below) or, failing that, by the
                # next recovery; new groups go to a new spool.
                acceptor.close()
                self._acceptor = self._new_acceptor()
            return
        acked = time.monotonic()
        with self._counts:
            self._answered += 1
            number = self._answered
            self._uncommitted_turns += len(lines)
            self._metrics.spool_turns.set(self._uncommitted_turns)
            if self._index:
                self._unpublished[number] = acked
                shares: dict[str, int] = {}
                for s in group:
                    shares[s.sharer] = shares.get(s.sharer, 0) + s.size
                self._shares[number] = shares
                self._costs[number] = acked - began
                self._fair.answered(number, shares, acked=acked,
                                    large=any(s.size > self._fair.share_bytes
                                              for s in group))
        large = any(s.size > self._fair.share_bytes for s in group)
        assert self._committer is not None  # made with the spool
        self._committer.put(AnsweredGroup(acceptor, accepted.seq, accepted.prepared,
                                          len(lines), accepted.kept, len(group), acked,
                                          number, large))
        for s, answer in zip(group, outcomes, strict=True):
            s.future.set_result(answer)

    def _committed_groups(self, batch: list[AnsweredGroup], report: IngestReport,
                          started: float) -> None:
        """The committer committed ``batch`` (in a run that started at ``started``,
        perf_counter): count it, and hand its partitions to the index lane."""
        with self._counts:
            self._committed += len(batch)
            self._uncommitted_turns -= sum(s.turns for s in batch)
            self._metrics.spool_turns.set(self._uncommitted_turns)
            self._counts.notify_all()
        self._report_refs(report)
        self._observe_commit(started, sum(s.turns for s in batch),
                             sum(s.requests for s in batch))
        if self._index and report.partitions:
            for s in batch:
                self._to_index.put(Commit(frozenset(report.partitions), s.acked, s.number,
                                          frozenset(s.kept & report.kept)))
        else:  # nothing to index: searchable as they are
            self._searchable([s.number for s in batch])

    def _report_refs(self, report: IngestReport) -> None:
        """Refs a committed turn's text names that lead nowhere: logged with their turn and
        counted, as `turnlake ingest` prints them (the turn lists them as ``mentions``)."""
        for unresolved in report.unresolved_refs:
            log.warning("unresolved ref: %s", unresolved)
        if report.unresolved_refs:
            self._metrics.unresolved_refs.inc(len(report.unresolved_refs))

    def _observe_commit(self, started: float, turns: int, requests: int) -> None:
        """A commit's metrics: its time since ``started`` (perf_counter), turns, requests."""
        m = self._metrics
        m.commit_seconds.observe(time.perf_counter() - started)
        m.commit_turns.observe(turns)
        m.commit_requests.observe(requests)

    def _searchable(self, numbers: list[int]) -> None:
        """The answered groups ``numbers`` are searchable (or have nothing to index)."""
        now = time.monotonic()
        with self._counts:
            for number in numbers:
                self._unpublished.pop(number, None)
                self._fair.searchable(number, self._shares.pop(number, {}),
                                      self._costs.pop(number, 0.0), now)
            self._counts.notify_all()

    def _spend(self, numbers: list[int | None], seconds: float) -> None:
        """A step spent ``seconds`` on the answered groups ``numbers``: each is charged its
        share by bytes (pipeline/service/fairness.py)."""
        with self._counts:
            sizes = {n: sum(self._shares.get(n, {}).values()) for n in numbers if n is not None}
            total = sum(sizes.values())
            for n, size in sizes.items():
                if n in self._costs and total:
                    self._costs[n] += seconds * size / total

    def _outcomes(self, group: list[_Submission], lines: list[str], kept: set[TurnKey],
                  quarantined: dict[int, Quarantined]) -> list[list[LineOutcome]]:
        """Each submission's outcomes (:func:`pipeline.service.outcomes.line_outcomes`)."""
        return line_outcomes([s.keys for s in group], len(lines), kept, quarantined)


def _fail(group: list[_Submission], exc: Exception, what: str) -> None:
    """Tell every waiting request of ``group`` of the failure."""
    failure = exc if isinstance(exc, TurnlakeError) else LakeError(
        f"recording failed: {type(exc).__name__}: {exc}")
    log_failure(log, what, exc)
    for s in group:
        s.future.set_exception(failure)
