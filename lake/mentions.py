"""``conv:*`` refs written in a turn's text: "Produced the final forecast at
conv:fi:conv_c.turn_t.files/forecast.xlsx" (spec section 06).

The completion and the working summary are where an agent names the objects it made; the refs
found there are listed with the turn, each with whether it leads to an object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from lake.errors import RefError
from lake.refs import NAMESPACES, parse_ref

MentionStatus = Literal["found", "missing", "expired", "invalid"]

# A ref runs to the next white space; the punctuation that ends a sentence or closes a
# bracket or quote around it is not part of it.
_CANDIDATE = re.compile(rf"conv:(?:{'|'.join(sorted(NAMESPACES))}):\S+")
_TRAILING = ".,;:!?)]}>'\"`*"


@dataclass(frozen=True)
class Mention:
    """A ref written in a turn's text: where, the ref as written, and what it leads to
    (``address``: the canonical address of the object found, with its edition)."""

    source: str  # "completion" or "summary"
    ref: str
    status: MentionStatus
    address: str | None = None
    reason: str | None = None


def refs_in(text: str) -> list[str]:
    """The ``conv:*`` refs written in ``text``, in order, each once (malformed ones too:
    :func:`well_formed` tells them apart)."""
    found: list[str] = []
    for match in _CANDIDATE.finditer(text):
        ref = match.group(0).rstrip(_TRAILING)
        if ref not in found:
            found.append(ref)
    return found


def well_formed(ref: str) -> str | None:
    """None when ``ref`` parses, else what is wrong with it."""
    try:
        parse_ref(ref)
    except RefError as exc:
        return str(exc)
    return None


def written_refs(texts: Iterable[tuple[str, str | None]]) -> list[tuple[str, str]]:
    """(source, ref) for each ref written in the (source, text) pairs, in order."""
    return [(source, ref) for source, text in texts if text for ref in refs_in(text)]
