"""Changed content under a known turn id: tell a conflict from a duplicate, and supersede.

A record whose ``(tenant, conversation_id, turn_id)`` is already stored is a *duplicate* when
its TurnLog payload (the canonical record without hosted bytes) is byte for byte the stored
one, and a *conflict* otherwise: ingest quarantines it with a reason naming the fields that
differ, so a re-export that changed a turn is never dropped in silence. With ``--replace`` the
stored turn is superseded instead: erased exactly as ``turnlake erase --turn C/T`` would (rows,
events, files, bytes, indexes, timelines), then the new record is ingested.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import orjson
import pyarrow.dataset as ds

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from lake.timelines import conversation_filter
from pipeline.prepare import Quarantined, differences, differing_field, raw_text
from pipeline.sources import SourceLine

REPLACE_ACTOR = "turnlake ingest --replace"
REPLACE_ADVICE = "; re-run with --replace to supersede it"  # the CLI's way out of a conflict
# The library's: LiveWriter has no replace option, but a turn erased is recorded anew.
LIBRARY_ADVICE = ("; LiveWriter does not replace a recorded turn: erase it first "
                  "(pipeline.retention.erase) to record this version")


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
            f"{', '.join(self.differs)}){REPLACE_ADVICE}"),
            raw_text(c.line.raw), differing_field(self.differs))


def with_advice(entry: Quarantined, advice: str) -> Quarantined:
    """``entry`` with the CLI's advice (:data:`REPLACE_ADVICE`) swapped for ``advice``, for
    callers that have no ``--replace``; any other entry as it is."""
    if not entry.reason.endswith(REPLACE_ADVICE):
        return entry
    return replace(entry, reason=entry.reason.removesuffix(REPLACE_ADVICE) + advice)


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


def supersede(settings: Settings, conflicts: Sequence[Conflict],
              ingest: Callable[[list[SourceLine]], None]) -> int:
    """Erase each conflicting turn's stored version, then ``ingest`` the new lines; returns
    how many turns were superseded. The caller must not hold the writer lock (each erase
    takes it). A crash in between leaves the turn erased: re-running the same ingest then
    simply accepts the new version."""
    from lake.retention import ErasureTarget
    from pipeline.retention import erase

    done: set[tuple[str, str, str]] = set()
    lines: list[SourceLine] = []
    for conflict in conflicts:
        c = conflict.candidate
        key = (c.tenant, c.conversation_id, c.turn_id)
        if key in done:
            continue  # the same turn twice in the input: its first version wins, as ingest's
        done.add(key)
        erase(settings, ErasureTarget(c.tenant, conversation_id=c.conversation_id,
                                      turn_id=c.turn_id), actor=REPLACE_ACTOR)
        lines.append(c.line)
    if lines:
        ingest(lines)
    return len(done)
