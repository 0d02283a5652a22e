"""The committer: groups answered from the spool become Delta commits, several at a time.

With the spool (pipeline/service/spool.py), the group writer (pipeline/service/writer.py)
answers a group once it is decided and spooled (pipeline/service/acceptor.py) and hands it
here. One thread commits the answered groups in order, as many as wait in one run (up to
``commit_max_turns``), through the ingest step (pipeline/service/steps.py, which commits what
the decision prepared), retrying while the service runs: the groups are on disk, a failure
loses nothing. Then each group's spool forgets it, and the group writer hears of the commit
(its counts, the index lane).

A group holding a large request is committed alone: its rows are then a data file of their
own, which the index step indexes in the background (pipeline/service/index_lane.py) while
the other groups' turns are published. With the vector lane (child processes and an
embedder), such a group's texts are first embedded in a child of their own while the groups
answered after it are committed; it comes back with its vectors, and its commit embeds
nothing (so it is committed after those groups), so its embedding holds no other key's commit.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from lake.settings import Settings
from pipeline.ingest import IngestReport, TurnKey
from pipeline.live import Vectors
from pipeline.prepare import SealedGroup
from pipeline.service.acceptor import Acceptor
from pipeline.service.failures import log_failure
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.steps import WriteSteps

log = logging.getLogger(__name__)
_COMMIT_RETRY_S = 2.0


@dataclass(frozen=True)
class AnsweredGroup:
    """A group answered from the spool, waiting for its commit."""

    acceptor: Acceptor  # whose spool holds it
    seq: int  # its number in that spool
    prepared: SealedGroup  # its lines as its decision prepared them
    turns: int  # its lines
    kept: set[TurnKey]  # the turns its answer called accepted
    requests: int
    acked: float  # time.monotonic() of the answer
    number: int  # of the answered groups, from 1
    large: bool  # it holds a request past the fair share: committed alone
    vectors: Vectors | None = None  # its texts' vectors, computed ahead of its commit


# What the group writer hears of a commit: the groups, the run's report, and when it started
# (time.perf_counter()).
Committed = Callable[[list[AnsweredGroup], IngestReport, float], None]
# A step spent seconds on answered groups (by number): pipeline/service/fairness.py.
Spend = Callable[[list[int | None], float], None]


class Committer:
    """Commits answered groups on the thread that calls :meth:`run` until :meth:`stop`; see
    the module notes. ``vectors`` is the vector lane's step (None: no vector lane);
    ``committed`` hears of each commit, ``spend`` of each step's time, and ``closing`` says
    whether the service is closing (a failing commit is then not retried: its groups wait in
    the spool for the next start)."""

    def __init__(self, settings: Settings, ingester: WriteSteps, *,
                 vectors: WriteSteps | None, metrics: ServiceMetrics, committed: Committed,
                 spend: Spend, closing: Callable[[], bool]) -> None:
        self._max_turns = settings.commit_max_turns
        self._ingester = ingester
        self._vectors = vectors
        self._ahead = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnlake-vectors")
                       if vectors is not None else None)
        self._metrics = metrics
        self._committed = committed
        self._spend = spend
        self._closing = closing
        self._queue: queue.Queue[AnsweredGroup | None] = queue.Queue()
        self._ahead_pending = 0  # large groups in the vector lane
        # Per spool, the numbers of its groups in the vector lane or back from it and not
        # committed yet, and the highest number committed. A spool forgets every group up to
        # the number it is told, so it is told no number past a group still to be committed.
        self._lane_seqs: dict[Acceptor, set[int]] = {}
        self._done_seq: dict[Acceptor, int] = {}

    def put(self, group: AnsweredGroup) -> None:
        """Queue an answered group for its commit."""
        self._queue.put(group)

    def stop(self) -> None:
        """Commit what is queued (and in the vector lane), then let :meth:`run` return."""
        self._queue.put(None)

    def close(self) -> None:
        """Stop the vector lane (after :meth:`run` returned)."""
        if self._ahead is not None:
            self._ahead.shutdown(wait=True, cancel_futures=True)
        if self._vectors is not None:
            self._vectors.close()

    def run(self) -> None:
        """Commit the answered groups in order, as many as wait in one run, a group holding
        a large request alone (after its turn in the vector lane, when there is one)."""
        stop = False
        carried: AnsweredGroup | None = None  # taken from the queue, for the next run
        while carried is not None or not stop or self._ahead_pending:
            first = carried if carried is not None else self._queue.get()
            carried = None
            if first is None:
                stop = True  # the groups in the vector lane come back still
                continue
            if first.vectors is not None:
                self._ahead_pending -= 1
            elif first.large and self._ahead is not None and not (stop or self._closing()):
                self._ahead_pending += 1
                self._lane_seqs.setdefault(first.acceptor, set()).add(first.seq)
                self._ahead.submit(self._embed_ahead, first)
                continue
            batch, turns = [first], first.turns
            while not first.large and turns < self._max_turns:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                if item.large:
                    carried = item
                    break
                batch.append(item)
                turns += item.turns
            self._commit(batch, last_try=stop or self._closing())

    def _embed_ahead(self, item: AnsweredGroup) -> None:
        """The vector lane: embed a large group's texts, then queue it for its commit (with
        no vectors when that failed: its commit embeds them)."""
        assert self._vectors is not None
        started = time.perf_counter()
        vectors: Vectors = {}
        try:
            vectors = self._vectors.embed_ahead(item.prepared)
        except Exception:
            log.warning("embedding a large group ahead of its commit failed; its commit "
                        "embeds it", exc_info=True)
        self._spend([item.number], time.perf_counter() - started)
        self._queue.put(replace(item, vectors=vectors))

    def _commit(self, batch: list[AnsweredGroup], *, last_try: bool) -> None:
        """Commit answered groups in one run, retrying while the service runs; at shutdown,
        what still fails waits in the spool for the next start."""
        started = time.perf_counter()
        while True:
            try:
                report = self._ingester.ingest_prepared(
                    [s.prepared for s in batch],
                    vectors={tenant: known for s in batch for tenant, known in
                             (s.vectors or {}).items()} or None)
                break
            except Exception as exc:
                log_failure(log, "committing %d answered group(s) failed", exc, len(batch))
                self._metrics.commit_failures.inc()
                if last_try or self._closing():
                    return
                time.sleep(_COMMIT_RETRY_S)
        self._spend([s.number for s in batch], time.perf_counter() - started)
        answered = set().union(*(s.kept for s in batch))
        if report.kept != answered:
            self._metrics.spool_divergences.inc(len(report.kept ^ answered))
            log.warning("%d turn(s) answered as accepted were not kept by their commit, and "
                        "%d kept were answered otherwise: another writer recorded the same "
                        "turns meanwhile", len(answered - report.kept),
                        len(report.kept - answered))
        for s in batch:
            # Committed either way: a file the acceptor could not remove (its child died) is
            # committed again by a recovery, which finds its turns stored.
            upto = self._forgettable(s)
            try:
                s.acceptor.committed(upto)
            except Exception:
                log.warning("the spool could not forget committed group %d", s.seq,
                            exc_info=True)
        self._committed(batch, report, started)

    def _forgettable(self, item: AnsweredGroup) -> int:
        """The number up to which ``item``'s spool may forget its groups now that ``item``
        is committed: its own, or less while a group of the spool before it is still in the
        vector lane (a spool forgets every group up to the number, and a crash would lose
        that one). Such groups' files then wait for a later commit, or a recovery, which
        finds their turns stored."""
        lane = self._lane_seqs.get(item.acceptor, set())
        lane.discard(item.seq)
        done = self._done_seq[item.acceptor] = max(item.seq,
                                                   self._done_seq.get(item.acceptor, 0))
        return min(done, min(lane) - 1) if lane else done
