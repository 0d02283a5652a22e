"""What became of each line a recording request sent: accepted, duplicate or rejected, told
apart from what one group commit's report (or decision) says it kept and refused."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.conflicts import advised
from pipeline.contract import TurnStatus
from pipeline.ingest import TurnKey
from pipeline.prepare import Quarantined

# The HTTP API's advice on a conflict: over HTTP a recorded turn cannot be replaced.
_NO_REPLACE = "; the HTTP API cannot replace a recorded turn"


@dataclass(frozen=True)
class LineOutcome:
    """What became of one submitted line."""

    status: TurnStatus
    reason: str | None = None
    field: str | None = None


def line_outcomes(keys: list[list[TurnKey | None]], lines: int, kept: set[TurnKey],
                  quarantined: dict[int, Quarantined]) -> list[list[LineOutcome]]:
    """Each submission's outcomes (``keys``: each submission's lines' turn identities, in the
    order the group's ``lines`` were ingested), from what the ingest (or its decision) says
    of them: a quarantined line is rejected; of the others, the first line of each turn it
    kept is accepted and every other one a duplicate."""
    answered: set[TurnKey] = set()
    out: list[list[LineOutcome]] = []
    number = 0
    for submission in keys:
        mine: list[LineOutcome] = []
        for key in submission:
            number += 1  # ingest numbers lines from 1
            if number in quarantined:
                mine.append(rejected(quarantined[number]))
            elif key is not None and key in kept and key not in answered:
                answered.add(key)
                mine.append(LineOutcome("accepted"))
            else:
                mine.append(LineOutcome("duplicate", "this turn is recorded already"))
        out.append(mine)
    assert number == lines
    return out


def rejected(refused: Quarantined) -> LineOutcome:
    """A rejected line's outcome: the ingest's reason, with the HTTP API's advice for a
    conflict, and the field it names."""
    return LineOutcome("rejected", advised(refused, _NO_REPLACE).reason, refused.field)
