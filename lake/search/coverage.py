"""How much of the query the lexical arm found: a per-query weight for its vote in fusion.

Fixed generator weights carry one data set's balance. On LoCoMo's questions the lexical arm
is the stronger one (people ask with the words they used), so it votes twice as much as the
dense arm. Asked in other words, the lexical arm still returns a full list, of turns that share
some incidental word with the query, and at double weight those outvote the dense arm's right
answers: on the LoCoMo tune questions with each content word swapped for its nearest MiniLM
vocabulary word of another stem, fused recall@10 was .362 (minimal records) and .478 (rich)
against the dense arm's .465 and .612 alone.

How good the lexical list is shows in its best turn: the share of the query's weight that turn
holds, ``coverage = Σ idf(t) over the query's stems t in the turn / Σ idf(t) over all of them``
(IDF among the user's rows in a user scope, the searched partitions' otherwise; the turn's text
is every row of it, as the lexical arm matches a turn's exchange too). Its vote is then
``weight × gain × coverage`` (gain 2: a best turn holding half the query's weight votes as
before, one holding all of it twice, one holding nothing not at all). Median coverage was .62
for LoCoMo's questions and .25 for the reworded ones.

Chosen on the tune split (conversations 0-4) and its reworded questions only, gains 1-3 and an
intercept 0-0.5: LoCoMo recall@5/10/25 .730/.789/.865 → .725/.790/.867 (minimal) and
.759/.819/.878 → .757/.822/.881 (rich); reworded .253/.362/.517 → .319/.427/.593 (minimal) and
.315/.478/.652 → .436/.569/.705 (rich). Gain 1 followed the dense arm on the reworded rich set
(.609 at 10) but cost LoCoMo minimal .02 at 10.

A query none of whose words stem to anything (only stop words, only CJK) has no coverage; its
lexical weight stays as given. Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

__all__ = ["DEFAULT_COVERAGE_GAIN", "MIN_SHARE", "coverage", "lexical_weight"]

DEFAULT_COVERAGE_GAIN = 2.0
MIN_SHARE = 0.05  # the least share of its weight the lexical arm keeps


def coverage(query_idf: Mapping[str, float], turn_stems: Collection[str]) -> float | None:
    """The share, in [0, 1], of the query stems' summed IDF held by the stems of a turn's text;
    None when the query has no stem (or none with weight)."""
    total = math.fsum(query_idf.values())
    if not query_idf or total <= 0:
        return None
    for stem, weight in query_idf.items():
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"IDF of {stem!r} must be a finite number >= 0, got {weight!r}")
    held = math.fsum(w for stem, w in query_idf.items() if stem in turn_stems)
    return min(1.0, held / total)


def lexical_weight(weight: float, covered: float | None, gain: float) -> float:
    """The lexical arm's weight for one query: ``weight × max(gain × covered, MIN_SHARE)``;
    ``weight`` as it is when the query has no coverage or ``gain`` is 0 (adaptation off).
    The floor keeps a list whose best turn holds no query stem (it matched an identifier or
    an exact word form) in the fusion: alone it still ranks, beside others it yields."""
    if not math.isfinite(gain) or gain < 0:
        raise ValueError(f"coverage gain must be a finite number >= 0, got {gain!r}")
    if covered is None or gain == 0:
        return weight
    return weight * max(gain * covered, MIN_SHARE)
