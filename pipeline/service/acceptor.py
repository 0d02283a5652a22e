"""Deciding a recording before it is committed, so that it can be answered at once.

With the spool on (local lakes), the group writer answers a group of recordings once
:class:`SpoolAcceptor` has decided it — which lines the ingest will refuse and why, which turns
it will keep, which are duplicates — and written it to the spool, flushed to disk
(pipeline/service/spool.py). Its Delta commit follows, with later groups. A decision counts
the turns of every group accepted and not yet committed as stored (``PendingTurns``): a
turn recorded twice within a moment is a duplicate the second time, and a different turn
under the same identity a conflict, as if the first had been committed.

The decision is the ingest's own (:meth:`pipeline.ingest.Ingestor.decide`), and its
prepared lines (sealed: :class:`pipeline.prepare.SealedGroup`) are what the commit ingests,
so a turn is parsed and projected once; the spool keeps the lines themselves, which a
recovery prepares again. The commit keeps exactly the turns the answer called accepted —
unless another writer (another server, a ``turnlake ingest``) commits one of the same turns
in between; the group writer counts such a divergence
(``turnlake_spool_divergences_total``) and logs it.

``turnlake serve`` runs the acceptor in a child process of its own (:class:`ChildAcceptor`),
beside the committing one, so deciding the next group overlaps the commit of the last.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, TypeVar

import pyarrow as pa

from lake.errors import LakeError
from lake.location import LakeLocation
from lake.settings import Settings
from pipeline.ingest import Ingestor, PendingTurns, TurnKey
from pipeline.prepare import Quarantined, SealedGroup
from pipeline.service.spool import Spool, SpooledGroup
from pipeline.workers import server_child

_T = TypeVar("_T")


class AcceptorDied(LakeError):
    """The acceptor's child process died (the group under way was not answered)."""


@dataclass(frozen=True)
class Accepted:
    """A decided and spooled group: its number, refused lines, kept turns, and its lines as
    the decision prepared them (for the commit)."""

    seq: int
    refused: list[Quarantined]
    kept: set[TurnKey]
    prepared: SealedGroup


class Acceptor(Protocol):
    """Where groups are decided and spooled (in the serving process or a child)."""

    def accept(self, lines: list[str], *, source: str) -> Accepted:
        """Decide ``lines`` and spool them; the answer once they are on disk."""

    def committed(self, upto: int) -> None:
        """Groups numbered ``upto`` or lower are committed: forget them."""

    def close(self) -> None:
        """Let the spool go (its folder too, when every group in it was committed)."""


class SpoolAcceptor:
    """Decides and spools groups in this process; see the module notes. The group writer
    decides on its writer thread and reports commits from its committer thread, so each call
    holds the acceptor's lock: a commit that rebuilt the pending turns while a decision added
    its own lost them, and a later group repeating one of those turns was answered
    `accepted` again (its commit then kept nothing; a test forces the interleaving)."""

    def __init__(self, settings: Settings) -> None:
        self._lock = threading.Lock()
        self._ingestor = Ingestor(settings)  # a store and known turns of its own: it only reads
        self._spool = Spool.create(LakeLocation.of(settings.lake).local)
        self._seq = 0
        # The kept turns of each group not committed yet, and all their payloads by key: a
        # key is kept by one pending group at most (a later one finds it pending), so the
        # payloads are added and dropped group by group rather than merged again per answer.
        self._groups: dict[int, tuple[pa.Table, list[str]]] = {}
        self._payloads: dict[str, str] = {}
        self._pending = PendingTurns.empty()

    def accept(self, lines: list[str], *, source: str) -> Accepted:
        """Decide ``lines`` (as the ingest would, counting the groups not yet committed as
        stored), write them to the spool, flushed; then the decision."""
        with self._lock:
            decision = self._ingestor.decide(lines, source=source, pending=self._pending)
            self._seq += 1
            self._spool.append(SpooledGroup(self._seq, source, lines))
            if decision.kept.num_rows:
                self._groups[self._seq] = (decision.kept, list(decision.payloads))
                self._payloads.update(decision.payloads)
                self._pending = self._pending_turns()
            return Accepted(self._seq, decision.refused, decision.kept_keys(),
                            decision.prepared.sealed())

    def committed(self, upto: int) -> None:
        """Forget the groups numbered ``upto`` or lower, and their spool files: their turns
        are in the tables now, where the next decision reads them."""
        with self._lock:
            done = [seq for seq in self._groups if seq <= upto]
            for seq in done:
                for key in self._groups.pop(seq)[1]:
                    self._payloads.pop(key, None)
            if done:
                self._pending = self._pending_turns()
            self._spool.remove(upto)

    def close(self) -> None:
        """Let the spool go."""
        with self._lock:
            self._spool.release()

    def _pending_turns(self) -> PendingTurns:
        if not self._groups:
            return PendingTurns.empty()
        # a view: decide() reads it before the next change, all on the group writer's thread
        return PendingTurns(pa.concat_tables([turns for turns, _ in self._groups.values()]),
                            MappingProxyType(self._payloads))


# -- in a child process ---------------------------------------------------------------------

_acceptor: SpoolAcceptor | None = None


def _start(settings: Settings) -> None:
    global _acceptor
    _acceptor = SpoolAcceptor(settings)


def _accept(lines: list[str], source: str) -> Accepted:
    assert _acceptor is not None  # set by the pool's initializer
    return _acceptor.accept(lines, source=source)


def _committed(upto: int) -> None:
    assert _acceptor is not None
    _acceptor.committed(upto)


def _close() -> None:
    if _acceptor is not None:
        _acceptor.close()


class ChildAcceptor:
    """A :class:`SpoolAcceptor` in a child process of the server (spawned: the server runs
    threads). If the child dies, the call under way raises :class:`AcceptorDied` and the group
    writer starts a new acceptor; the dead one's spool stays behind as an orphan, which the
    next recovery commits (again: the writer commits its groups from memory meanwhile)."""

    def __init__(self, settings: Settings) -> None:
        self._pool = server_child(_start, settings)

    def accept(self, lines: list[str], *, source: str) -> Accepted:
        """SpoolAcceptor.accept, in the child."""
        return self._call(_accept, lines, source)

    def committed(self, upto: int) -> None:
        """SpoolAcceptor.committed, in the child."""
        self._call(_committed, upto)

    def close(self) -> None:
        """Let the spool go, then stop the child."""
        with contextlib.suppress(LakeError):  # a dead child's spool waits for a recovery
            self._call(_close)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _call(self, step: Callable[..., _T], *args: object) -> _T:
        try:
            return self._pool.submit(step, *args).result()
        except BrokenProcessPool as exc:
            raise AcceptorDied("the process that accepts recordings died; record the turns "
                               "again (accepted ones are reported as duplicates)") from exc
