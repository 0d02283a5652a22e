"""How much of the query a lexical match holds: a per-turn weight for its vote in fusion.

A turn's coverage is the share of the query's stems it holds, each weighed by its IDF to the
power 1.5; its lexical vote is ``weight × max((gain × coverage)², MIN_SHARE)``, a soft AND. Asked
in the history's own words the right turns hold most of the query and the lexical arm votes as
much as before; asked in other words its matches hold incidental words and yield to the dense
arm. Why these choices, and what each measured: docs/design/coverage.md. Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from lake.index.codes import codes_held
from lake.index.lexical import CodeWord, held_stems
from lake.search.defaults import DEFAULT_COVERAGE_GAIN as DEFAULT_COVERAGE_GAIN

__all__ = ["DEFAULT_COVERAGE_GAIN", "IDF_POWER", "MIN_SHARE", "coverage", "coverage_weight",
           "coverages", "turn_stems"]

MIN_SHARE = 0.01  # the least share of its weight a lexical turn keeps
IDF_POWER = 1.5  # each query stem weighs idf ** IDF_POWER in a coverage


def coverage(query_idf: Mapping[str, float], turn_stems: Collection[str]) -> float | None:
    """The share, in [0, 1], of the query stems' summed weight (``idf ** IDF_POWER``) held by
    the stems of a turn's text; None when the query has no stem (or none with weight)."""
    shares = coverages(query_idf, [turn_stems])
    return None if shares is None else shares[0]


def coverages(query_idf: Mapping[str, float], turns_stems: Sequence[Collection[str]]
              ) -> list[float] | None:
    """:func:`coverage` of each turn's stems, the query's weights worked out once; None when
    the query has no stem (or none with weight), whatever the turns."""
    for stem, weight in query_idf.items():
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"IDF of {stem!r} must be a finite number >= 0, got {weight!r}")
    weights = {stem: idf ** IDF_POWER for stem, idf in query_idf.items()}
    total = math.fsum(weights.values())
    if not weights or total <= 0:
        return None
    return [min(1.0, math.fsum(w for stem, w in weights.items() if stem in stems) / total)
            for stems in turns_stems]


def turn_stems(stems: Collection[str], texts: Sequence[str], code_words: Sequence[CodeWord] = ()
               ) -> list[frozenset[str]]:
    """Per turn text, the ones of the query's ``stems`` it holds: the stems its words make
    (lake.index.lexical.held_stems), and the stems of each of the query's ``code_words``
    (lake.search.query.Query.code_words) that it
    writes in another spelling (lake.index.codes), whose words make other stems: a turn
    writing "INC-3147" holds the "inc3147" of "what happened with INC3147", one writing
    "INC3147" the "inc" and "3147" of "INC-3147". Without this, "what happened with INC3147"
    left the turn naming INC-3147 at a fraction of its lexical vote, and an incident of the
    same shape the dense arm liked came first in three of four searches on the demo lake's
    tickets."""
    held = held_stems(stems, texts)
    wanted = frozenset(stems)
    codes = {code.word: made for code in code_words
             if (made := wanted.intersection(code.stems))}
    if not codes:
        return held
    return [h.union(*(codes[word] for word in found))
            for h, found in zip(held, codes_held(list(codes), list(texts)), strict=True)]


def coverage_weight(covered: float | None, gain: float) -> float:
    """The multiplier of the lexical arm's weight for one turn holding ``covered`` of the
    query: ``max((gain × covered)², MIN_SHARE)``; 1 when the query has no coverage or
    ``gain`` is 0 (adaptation off). The floor keeps a turn that holds no query stem (it
    matched an identifier or an exact word form) in the fusion: alone it still ranks, beside
    others it yields."""
    if not math.isfinite(gain) or gain < 0:
        raise ValueError(f"coverage gain must be a finite number >= 0, got {gain!r}")
    if covered is None or gain == 0:
        return 1.0
    return max((gain * covered) ** 2, MIN_SHARE)
