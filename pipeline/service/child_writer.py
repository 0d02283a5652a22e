"""The group writer's ingest and index steps, each run in a child process of the server.

An ingest is mostly Python (validation, projection, the commit's bookkeeping) between native
calls. In the serving process it took turns at the interpreter lock with every search and
request handler, and under search load a group commit of ~230 turns took ~0.7 s where the
same commit alone took ~0.3 s. ``ChildWriter`` keeps one :class:`pipeline.live.LiveWriter`
warm in one long-lived child process (spawned, not forked: the server runs threads) and
sends it each group's lines; the answer comes back once the commit returned, so an
acknowledged turn is as durable as in-process. The index step (delta segments, compaction)
runs the same way in a second child, so that recording and indexing overlap as they did as
threads, and neither takes the lock from the searches.

The child dies with the server (as the index builder child does). If the child itself dies,
the group being written fails (its requests get an error, and the batch manifest lets the
next writer finish or roll back the half-written batch), and the next group starts a new
child.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from lake.embedding.factory import embedder_from
from lake.errors import LakeError
from lake.settings import Settings
from lake.store import Partition
from pipeline.ingest import IngestReport, TurnKey
from pipeline.live import LiveWriter, Vectors
from pipeline.prepare import SealedGroup
from pipeline.service.spool import Recovered, recover_orphans, through
from pipeline.workers import server_child

_T = TypeVar("_T")

# The child's writer.
_live: LiveWriter | None = None


def _start(settings: Settings, embed: bool, rebase: bool) -> None:
    global _live
    # One intra-op thread (embed_query_threads), as the server's own embedder: a long text's
    # passages embedded on every core took the searches' core too.
    embedder = embedder_from(settings, "query") if embed else None
    _live = LiveWriter(settings, embedder, embed=embed, background_rebase=rebase)


def _ingest(lines: list[str], source: str) -> IngestReport:
    assert _live is not None  # set by the pool's initializer
    return _live.ingest(lines, source=source).ingest


def _ingest_prepared(groups: list[SealedGroup], vectors: Vectors | None) -> IngestReport:
    assert _live is not None
    return _live.ingest_prepared((g.opened() for g in groups), vectors=vectors).ingest


def _embed_ahead(group: SealedGroup) -> Vectors:
    assert _live is not None
    return _live.embed_ahead(group.opened())


def _recover() -> Recovered:
    assert _live is not None
    return recover_orphans(_live.settings, through(_live))


def _index(partitions: set[Partition], defer: bool) -> set[TurnKey]:
    assert _live is not None
    return _live.deferred_turns(_live.index(partitions, defer=defer))


def _warm() -> None:
    assert _live is not None
    _live.warm()


class ChildWriter:
    """The group writer's steps (pipeline.service.steps.WriteSteps) in a child process:
    :meth:`ingest` groups of JSON lines, or :meth:`index` partitions (use one instance per
    step, so the two overlap); ``close()`` stops it. ``embed`` embeds the rows with the
    settings' model, loaded in the child; ``background_rebase`` lets the index step rebase
    a partition in a thread of the child while its next steps publish deltas
    (LiveWriter)."""

    def __init__(self, settings: Settings, *, embed: bool,
                 background_rebase: bool = False) -> None:
        self._settings = settings
        self._embed = embed
        self._rebase = background_rebase
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return server_child(_start, self._settings, self._embed, self._rebase)

    def ingest(self, lines: list[str], *, source: str) -> IngestReport:
        """Ingest ``lines`` as one batch in the child; its report names the turns it kept.
        Raises LakeError when the child died on the way."""
        return self._call(_ingest, lines, source)

    def _call(self, step: Callable[..., _T], *args: object) -> _T:
        with self._lock:
            pool = self._pool
        try:
            return pool.submit(step, *args).result()
        except BrokenProcessPool as exc:
            self._replace(pool)
            raise LakeError("the writer process died while recording; record the turns "
                            "again (accepted ones are reported as duplicates)") from exc

    def ingest_prepared(self, groups: list[SealedGroup], *,
                        vectors: Vectors | None = None) -> IngestReport:
        """Ingest groups prepared by their decisions as one run in the child, with
        ``vectors`` computed ahead; its report names the turns it kept. Raises LakeError
        when the child died on the way."""
        return self._call(_ingest_prepared, groups, vectors)

    def embed_ahead(self, group: SealedGroup) -> Vectors:
        """LiveWriter.embed_ahead in the child (which embeds: ``embed=True``)."""
        return self._call(_embed_ahead, group)

    def recover(self) -> Recovered:
        """Commit the spools of servers that died (:func:`recover_orphans`) in the child;
        what was committed."""
        return self._call(_recover)

    def index(self, partitions: set[Partition], *, defer: bool = True) -> set[TurnKey]:
        """Bring the partitions' indexes up to date in the child (LiveWriter.index); the
        turns whose rows (large new files) it indexes in the background. Raises LakeError when
        the child died on the way (the partitions stay stale until the next build)."""
        with self._lock:
            pool = self._pool
        try:
            return pool.submit(_index, set(partitions), defer).result()
        except BrokenProcessPool as exc:
            self._replace(pool)
            raise LakeError("the index process died while building") from exc

    def warm(self) -> None:
        """Start the child and load what its first step needs (LiveWriter.warm)."""
        self._call(_warm)

    def _replace(self, pool: ProcessPoolExecutor) -> None:
        """A new child for the next call, unless another caller made one already."""
        with self._lock:
            if self._pool is pool:
                self._pool = self._new_pool()

    def close(self) -> None:
        """Stop the child process."""
        with self._lock:
            self._pool.shutdown(wait=True, cancel_futures=True)
