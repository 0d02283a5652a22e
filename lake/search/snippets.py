"""A hit's snippets: the opening of its turn's prompt and answer, or, where a text longer than a
snippet was found by one of its passages, that passage.

A long answer found by what its third passage says used to show its opening, which says
something else, so a reader (a person, or an agent reading its own history) could not tell why
the turn was found. A row with passages (lake.index.passage_index) is shown by the passage nearest
the query, cut again from its text by the same splitter that embedded it, and marked with a
leading "…" when it is not the text's first. Without a query vector, a splitter, or passages
(or when the splitter now cuts the text otherwise than when it was embedded), the snippet is the
opening, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lake.embedding.passages import PassageSplitter
from lake.search.request import SNIPPET_CHARS

if TYPE_CHECKING:
    from lake.index.partition import PartitionIndex

__all__ = ["snippets"]

_CUT = "…"
_ROLES = ("user", "assistant")


def snippets(part: PartitionIndex, start: int, roles: list[str], texts: list[str],
             choice: str, query: np.ndarray | None,
             splitter: PassageSplitter | None) -> dict[str, str]:
    """The snippets ``choice`` asks for (``user``, ``assistant``, ``both`` or ``none``) of the
    turn whose rows are docs ``start`` on (``roles``, ``texts``), each at most
    :data:`SNIPPET_CHARS` characters: a role's rows joined, or the passage of its rows
    nearest ``query`` (see the module notes)."""
    out: dict[str, str] = {}
    for wanted in _ROLES:
        if choice not in (wanted, "both"):
            continue
        mine = [i for i, role in enumerate(roles) if role == wanted]
        joined = "\n".join(texts[i] for i in mine)
        passage = None
        if len(joined) > SNIPPET_CHARS and query is not None and splitter is not None:
            passage = nearest_passage(part, [start + i for i in mine],
                                      [texts[i] for i in mine], query, splitter)
        out[wanted] = joined[:SNIPPET_CHARS] if passage is None else passage
    return out


def nearest_passage(part: PartitionIndex, docs: list[int], texts: list[str],
                    query: np.ndarray, splitter: PassageSplitter) -> str | None:
    """Among the passages of the rows ``docs`` (ascending; ``texts`` theirs), the one nearest
    ``query`` as a snippet; None when none of the rows has passages, or its text no longer
    cuts into as many."""
    index = part.passages
    if index is None or not docs:
        return None
    found = index.of_rows(np.asarray(docs, np.int64))
    if not found.rows.size or found.vectors.shape[1] != query.shape[0]:
        return None
    best = int(np.argmax(found.vectors @ np.asarray(query, found.vectors.dtype)))
    row, place = int(found.rows[best]), int(found.places[best])
    passages = splitter.split([texts[docs.index(row)]])[0]
    if len(passages) != int(found.counts[best]):
        return None
    return passage_snippet(passages[place], first=place == 0)


def passage_snippet(passage: str, *, first: bool) -> str:
    """A passage as a snippet of at most :data:`SNIPPET_CHARS` characters, "…" before one that
    does not open its text."""
    return passage[:SNIPPET_CHARS] if first else _CUT + passage[:SNIPPET_CHARS - len(_CUT)]
