"""The group writer's two steps — ingest a group's lines, index the partitions it touched —
behind one interface, run in the serving process or in child processes
(pipeline/service/child_writer.py).

Both are the steps of :class:`pipeline.live.LiveWriter`. A group answered from the spool
comes prepared (parsed, validated and projected by its decision, pipeline/service/
acceptor.py) and sealed (:class:`pipeline.prepare.SealedGroup`), so its commit does not
prepare it again; each report names the turns it kept (``IngestReport.kept``), from which
the group writer tells each request's lines accepted from duplicates.
"""

from __future__ import annotations

from typing import Protocol

from lake.embedding.base import Embedder
from lake.settings import Settings
from lake.store import Partition
from pipeline.ingest import IngestReport, TurnKey
from pipeline.live import LiveWriter, Vectors
from pipeline.prepare import SealedGroup
from pipeline.service.builder import ChildBuilder
from pipeline.service.spool import Recovered, recover_orphans, through


class WriteSteps(Protocol):
    """Where the group writer's steps run."""

    def ingest(self, lines: list[str], *, source: str) -> IngestReport:
        """Ingest ``lines`` as one batch; its report names the turns it kept."""

    def ingest_prepared(self, groups: list[SealedGroup], *,
                        vectors: Vectors | None = None) -> IngestReport:
        """Ingest groups prepared by their decisions as one run, with ``vectors`` computed
        ahead (:meth:`embed_ahead`) if any; its report names the turns it kept."""

    def embed_ahead(self, group: SealedGroup) -> Vectors:
        """The vectors of the texts ``group`` would store (LiveWriter.embed_ahead)."""

    def recover(self) -> Recovered:
        """Commit the spools that stopped servers left; what was committed."""

    def index(self, partitions: set[Partition], *, defer: bool = True) -> set[TurnKey]:
        """Bring the partitions' indexes up to date; the turns whose rows (in large new data
        files) are still being indexed in the background (``defer=False``: none, everything
        is indexed now; see LiveWriter.index)."""

    def warm(self) -> None:
        """Load what the first ingest or index step needs (LiveWriter.warm)."""

    def close(self) -> None:
        """Stop what the steps started."""


class InProcessSteps:
    """The steps in the serving process, with ``embedder`` (an object the caller chose);
    full partition rebuilds still go to a child process (pipeline/service/builder.py)."""

    def __init__(self, settings: Settings, embedder: Embedder | None, *, index: bool) -> None:
        self._live = LiveWriter(settings, embedder, embed=embedder is not None)
        self._builder = ChildBuilder() if index else None

    def ingest(self, lines: list[str], *, source: str) -> IngestReport:
        """LiveWriter.ingest."""
        return self._live.ingest(lines, source=source).ingest

    def ingest_prepared(self, groups: list[SealedGroup], *,
                        vectors: Vectors | None = None) -> IngestReport:
        """LiveWriter.ingest_prepared of the opened groups."""
        return self._live.ingest_prepared((g.opened() for g in groups), vectors=vectors).ingest

    def embed_ahead(self, group: SealedGroup) -> Vectors:
        """LiveWriter.embed_ahead of the opened group."""
        return self._live.embed_ahead(group.opened())

    def recover(self) -> Recovered:
        """recover_orphans through this process's LiveWriter."""
        return recover_orphans(self._live.settings, through(self._live))

    def index(self, partitions: set[Partition], *, defer: bool = True) -> set[TurnKey]:
        """LiveWriter.index, full rebuilds in the builder child; the turns it deferred."""
        assert self._builder is not None, "made without index=True"
        live = self._live
        return live.deferred_turns(live.index(partitions, builder=self._builder, defer=defer))

    def warm(self) -> None:
        """LiveWriter.warm."""
        self._live.warm()

    def close(self) -> None:
        """Stop the builder child."""
        if self._builder is not None:
            self._builder.close()
