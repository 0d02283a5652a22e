"""The group writer's two steps — ingest a group's lines, index the partitions it touched —
behind one interface, run in the serving process or in child processes
(pipeline/service/child_writer.py).

Both are the steps of :class:`pipeline.live.LiveWriter`; what the service adds is which turns
a batch kept (the rows of every kept turn pass the ingest's rows hook), from which the group
writer tells each request's lines accepted from duplicates.
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from lake.embedding.base import Embedder
from lake.settings import Settings
from lake.store import Partition
from pipeline.ingest import IngestReport
from pipeline.live import LiveWriter, Vectors
from pipeline.service.builder import ChildBuilder
from pipeline.service.spool import Recovered, recover_orphans, through

TurnKey = tuple[str, str, str]


class WriteSteps(Protocol):
    """Where the group writer's steps run."""

    def ingest(self, lines: list[str], *, source: str) -> tuple[IngestReport, set[TurnKey]]:
        """Ingest ``lines`` as one batch: its report and the turns it kept."""

    def ingest_groups(self, groups: list[tuple[str, list[str]]], *,
                      vectors: Vectors | None = None) -> tuple[IngestReport, set[TurnKey]]:
        """Ingest spooled groups (source name, lines) as one run, with ``vectors`` computed
        ahead (:meth:`embed_ahead`) if any: its report and the turns it kept."""

    def embed_ahead(self, lines: list[str], *, source: str) -> Vectors:
        """The vectors of the texts ``lines`` would store (LiveWriter.embed_ahead)."""

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


class KeptTurns:
    """The identities of the turns whose rows a batch wrote (an ingest rows hook)."""

    def __init__(self) -> None:
        self._kept: set[TurnKey] = set()

    def note(self, rows: pa.Table) -> None:
        """The rows hook: note the turns of the rows."""
        self._kept.update(zip(rows["tenant"].to_pylist(), rows["conversation_id"].to_pylist(),
                              rows["turn_id"].to_pylist(), strict=True))

    def take(self) -> set[TurnKey]:
        """The turns noted since the last take."""
        kept, self._kept = self._kept, set()
        return kept


class InProcessSteps:
    """The steps in the serving process, with ``embedder`` (an object the caller chose);
    full partition rebuilds still go to a child process (pipeline/service/builder.py)."""

    def __init__(self, settings: Settings, embedder: Embedder | None, *, index: bool) -> None:
        self._kept = KeptTurns()
        self._live = LiveWriter(settings, embedder, embed=embedder is not None,
                                on_rows=self._kept.note)
        self._builder = ChildBuilder() if index else None

    def ingest(self, lines: list[str], *, source: str) -> tuple[IngestReport, set[TurnKey]]:
        """LiveWriter.ingest, and the turns it kept."""
        self._kept.take()
        report = self._live.ingest(lines, source=source).ingest
        return report, self._kept.take()

    def ingest_groups(self, groups: list[tuple[str, list[str]]], *,
                      vectors: Vectors | None = None) -> tuple[IngestReport, set[TurnKey]]:
        """LiveWriter.ingest_groups, and the turns it kept."""
        self._kept.take()
        report = self._live.ingest_groups(groups, vectors=vectors).ingest
        return report, self._kept.take()

    def embed_ahead(self, lines: list[str], *, source: str) -> Vectors:
        """LiveWriter.embed_ahead."""
        return self._live.embed_ahead(lines, source=source)

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
