"""Changed content under a known turn id: tell a conflict from a duplicate.

A record whose ``(tenant, conversation_id, turn_id)`` is already stored is a *duplicate* when
its TurnLog payload (the canonical record without hosted bytes) is byte for byte the stored
one, and a *conflict* otherwise: ingest quarantines it with a reason naming the fields that
differ, so a re-export that changed a turn is never dropped in silence, or holds it for the
job that supersedes the stored turn (:mod:`pipeline.supersede`, ``--replace``). What to do
about a conflict is each front end's advice (the CLI's ``--replace``, the HTTP API's, the
library's), added where the entry is shown, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import orjson
import pyarrow.dataset as ds

from lake.store import LakeStore
from lake.tables import Table
from lake.timelines import conversation_filter
from pipeline.prepare import Quarantined, differences, differing_field, raw_text
from pipeline.sources import SourceLine


@dataclass(frozen=True)
class Candidate:
    """A turn ingest dropped because its key is stored: its key, new payload and line."""

    tenant: str
    conversation_id: str
    turn_id: str
    payload: str
    line: SourceLine


@dataclass(frozen=True)
class Conflict:
    """A candidate whose content differs from the stored turn's."""

    candidate: Candidate
    differs: tuple[str, ...]

    @property
    def entry(self) -> Quarantined:
        """The quarantine entry: where the line was, and what differs."""
        c = self.candidate
        return Quarantined(str(c.line.path), c.line.line, (
            f"conflict: turn {c.turn_id} of conversation {c.conversation_id} (tenant "
            f"{c.tenant}) is stored with different content (differs in: "
            f"{', '.join(self.differs)})"),
            raw_text(c.line.raw), differing_field(self.differs), conflict=True)


def advised(entry: Quarantined, advice: str) -> Quarantined:
    """``entry`` with a front end's ``advice`` on a conflict appended; any other entry as it
    is."""
    return replace(entry, reason=entry.reason + advice) if entry.conflict else entry


def find_conflicts(store: LakeStore, candidates: Sequence[Candidate]) -> list[Conflict]:
    """The candidates whose payload is not the stored one, with what differs."""
    if not candidates:
        return []
    pairs = {(c.tenant, c.conversation_id) for c in candidates}
    where = conversation_filter(pairs)
    assert where is not None  # candidates is not empty
    stored_rows = store.read(
        Table.TURN_LOGS, columns=["tenant", "conversation_id", "turn_id", "payload"],
        filter=where & ds.field("turn_id").isin(sorted({c.turn_id for c in candidates})))
    stored = {(r["tenant"], r["conversation_id"], r["turn_id"]): r["payload"]
              for r in stored_rows.to_pylist()}
    conflicts = []
    for c in candidates:
        old = stored.get((c.tenant, c.conversation_id, c.turn_id))
        if old is None or old == c.payload:
            continue
        conflicts.append(Conflict(c, differences(orjson.loads(old), orjson.loads(c.payload))))
    return conflicts
