"""Superseding (``--replace``): the turns an ingest held as conflicts replace the stored ones.

The ingestor only tells a conflict from a duplicate (:mod:`pipeline.conflicts`); a run asked to
hold its conflicts (``hold_conflicts=True``) leaves them out and reports them. This job then
erases each stored version exactly as ``turnlake erase --turn C/T`` would (rows, events,
files, bytes, indexes, timelines), and ingests the held lines as a run of their own. A crash in
between leaves the turn erased: re-running the same ingest then simply accepts the new version.
"""

from __future__ import annotations

from lake.deletion.target import ErasureTarget
from lake.settings import Settings
from pipeline.ingest import Ingestor, IngestReport
from pipeline.retention import Settle, erase
from pipeline.sources import SourceLine

# Who the erasures' audit entries name.
REPLACE_ACTOR = "turnlake ingest --replace"


def supersede(settings: Settings, ingestor: Ingestor, report: IngestReport, *,
              settle: Settle | None, actor: str = REPLACE_ACTOR) -> IngestReport:
    """Supersede the turns ``report`` (a run of ``ingestor`` that held its conflicts) holds:
    erase each stored version, then ingest the new lines through ``ingestor``; ``report``
    with what that run did added, ``replaced`` counting the turns superseded and nothing
    left held. ``settle`` is given to each erasure (:func:`pipeline.retention.erase`). The
    caller must not hold the writer lock (each erase takes it)."""
    keys: set[tuple[str, str, str]] = set()
    lines: list[SourceLine] = []
    for conflict in report.held:
        c = conflict.candidate
        key = (c.tenant, c.conversation_id, c.turn_id)
        if key in keys:
            continue  # the same turn twice in the input: its first version wins, as ingest's
        keys.add(key)
        erase(settings, ErasureTarget(c.tenant, conversation_id=c.conversation_id,
                                      turn_id=c.turn_id), actor=actor, settle=settle)
        lines.append(c.line)
    report.held = []
    if lines:
        again = ingestor.ingest_lines(lines)
        report.accepted += again.accepted
        report.duplicates += again.duplicates
        report.files_stored += again.files_stored
        report.batches += again.batches
        report.rows_written += again.rows_written
        report.partitions |= again.partitions
        report.quarantined.extend(again.quarantined)
        report.conflicts.extend(again.conflicts)
        report.unresolved_refs.extend(again.unresolved_refs)
    report.replaced = len(keys)
    return report
