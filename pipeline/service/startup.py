"""A starting server's way to readiness: commit what dead servers acknowledged, make it
searchable, warm the write steps — then answer ``/readyz`` with 200.

Until then ``/healthz`` answers (the process is alive) and recordings queue (the group writer
starts deciding them once the dead servers' spools are committed, so a new recording never
races an acknowledged one of the same turn), while ``/readyz`` answers 503 with the phase and
its progress. Readiness promises what an agent that was told "accepted" expects: every turn
any server of this lake acknowledged before the start is searchable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lake.store import Partition
from pipeline.service.failures import log_failure
from pipeline.service.spool import Recovered

log = logging.getLogger(__name__)

# Between two tries of a failed recovery or index step (a full disk, a child that died).
RETRY_S = 2.0
_T = TypeVar("_T")


@dataclass(frozen=True)
class Readiness:
    """Where the start-up stands; ``ready`` once every acknowledged turn is searchable."""

    phase: str  # starting, recovering, indexing, warming, ready
    ready: bool = False
    recovered_groups: int = 0
    partitions_to_index: int = 0  # recovered ones and those whose index is behind
    seconds: float = 0.0  # of the start-up so far (or in all, once ready)
    problem: str | None = None  # the last failure a retry is waiting out

    def as_json(self) -> dict[str, object]:
        """The readiness as ``/readyz`` and ``/healthz`` show it."""
        out: dict[str, object] = {"phase": self.phase, "ready": self.ready,
                                  "recovered_groups": self.recovered_groups,
                                  "partitions_to_index": self.partitions_to_index,
                                  "seconds": round(self.seconds, 3)}
        if self.problem is not None:
            out["problem"] = self.problem
        return out


class StartUp:
    """Runs the start-up steps in order, retrying each until it succeeds or ``stopped()``.

    ``recover`` commits the dead servers' spools (None: no spool on this lake), ``index``
    brings partitions up to date (None: the server does not index), with those ``behind``
    names (partitions whose index is older than their rows: a server killed between a commit
    and its index step leaves such), ``warm`` loads what the first recording and the first
    index step need, so the first turn after a start is found as fast as the others."""

    def __init__(self, *, recover: Callable[[], Recovered] | None,
                 index: Callable[[set[Partition]], None] | None,
                 warm: Callable[[], None], stopped: Callable[[], bool],
                 behind: Callable[[], set[Partition]] = set) -> None:
        self._recover = recover
        self._index = index
        self._behind = behind
        self._warm = warm
        self._stopped = stopped
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._state = Readiness("starting")
        self._recovered = Recovered()

    @property
    def readiness(self) -> Readiness:
        """The start-up's state now."""
        with self._lock:
            state = self._state
        if state.ready:
            return state
        return Readiness(**{**state.__dict__, "seconds": time.monotonic() - self._started})

    def _set(self, **changes: object) -> None:
        with self._lock:
            self._state = Readiness(**{**self._state.__dict__, **changes})

    def recover(self) -> bool:
        """Commit the dead servers' spools; False when stopped first."""
        if self._recover is None:
            return True
        self._set(phase="recovering")
        done, recovered = self._retrying("recovering the spools of stopped servers",
                                         self._recover)
        if not done or recovered is None:
            return False
        self._recovered = recovered
        self._set(recovered_groups=recovered.groups,
                  partitions_to_index=len(recovered.partitions))
        return True

    def finish(self) -> None:
        """Index what the recovery committed, warm the steps, and become ready."""
        partitions = set(self._recovered.partitions)
        if self._index is not None:
            done, behind = self._retrying("finding the partitions whose index is behind",
                                          self._behind)
            if not done:
                return
            partitions |= behind or set()
            self._set(partitions_to_index=len(partitions))
        if self._index is not None and partitions:
            self._set(phase="indexing")
            index = self._index
            done, _ = self._retrying(f"indexing the {len(partitions)} partition(s) the "
                                     "recovery committed", lambda: index(partitions))
            if not done:
                return
        self._set(phase="warming")
        try:
            self._warm()
        except Exception:  # a cold first turn is slower, not wrong
            log.warning("warming the write steps failed", exc_info=True)
        seconds = time.monotonic() - self._started
        self._set(phase="ready", ready=True, seconds=seconds, problem=None)
        if self._recover is not None:
            state = self.readiness
            log.info("ready after %.2f s: %d recovered group(s) in %d partition(s) searchable",
                     seconds, state.recovered_groups, state.partitions_to_index)

    def _retrying(self, what: str, step: Callable[[], _T]) -> tuple[bool, _T | None]:
        """``step()``'s result, tried until it succeeds; (False, None) when stopped first."""
        while not self._stopped():
            try:
                result = step()
                self._set(problem=None)
                return True, result
            except Exception as exc:
                log_failure(log, "%s failed (trying again in %.0f s)", exc, what, RETRY_S)
                self._set(problem=f"{what} failed: {type(exc).__name__}: {exc}")
                deadline = time.monotonic() + RETRY_S
                while time.monotonic() < deadline and not self._stopped():
                    time.sleep(0.05)
        return False, None
