"""How much of the query a lexical match holds: a per-turn weight for its vote in fusion.

Fixed generator weights carry one data set's balance. On LoCoMo's questions the lexical arm
is the stronger one (people ask with the words they used), so it votes twice as much as the
dense arm. Asked in other words, the lexical arm still returns a full list, of turns that share
some incidental word with the query, and at double weight those outvote the dense arm's right
answers: on the LoCoMo tune questions with each content word swapped for its nearest MiniLM
vocabulary word of another stem, fused recall@10 was .362 (minimal records) and .478 (rich)
against the dense arm's .465 and .612 alone.

How good a lexical match is shows in how much of the query it holds: a turn's ``coverage =
Σ idf(t)^1.5 over the query's stems t in the turn / Σ idf(t)^1.5 over all of them`` (IDF among the
user's rows in a user scope, the searched partitions' otherwise; the turn's text is every row
of it, as the lexical arm matches a turn's exchange too). Each lexical turn votes with
``weight × max((gain × coverage)², MIN_SHARE)`` (gain 2: a turn holding half the query's weight
votes as the fixed weight, one holding all of it four times, one holding a quarter a quarter).
Squaring makes the vote a soft AND: a turn sharing one incidental word with a paraphrased
question counts for little, one holding the question's rare words for much.

History of the choice, all on the tune split (conversations 0-4) and its reworded questions
only. First the vote followed the best lexical turn's coverage for the whole list (``weight ×
gain × coverage``): LoCoMo recall@5/10/25 .730/.789/.865 → .725/.790/.867 (minimal) and
.759/.819/.878 → .757/.822/.881 (rich); reworded .253/.362/.517 → .319/.427/.593 (minimal) and
.315/.478/.652 → .436/.569/.705 (rich), still under the dense arm alone (.343/.458/.631 and
.501/.611/.720 with neighbour smoothing). A per-query signal could not close that gap: within
every band of best-turn coverage, and of the share of query words the user never wrote, the
lexical arm beat the dense arm on LoCoMo's questions and lost on the reworded ones. Weighing
each turn by its own coverage closes most of it (as search computes it, over the lexical arm's
first 20 turns, lake.search.service): LoCoMo .714/.787/.869 (minimal) and .753/.827/.882
(rich); reworded .345/.457/.642 (minimal; the dense arm .343/.458/.631) and .484/.602/.733
(rich; dense .501/.611/.720). Powers 1-3, gains 1.5-4, floors 0-0.2 and a dense weight raised
where the best turn's coverage is low were measured: power 1 kept the reworded losses, higher
powers or lower gains cost LoCoMo minimal up to .05 at 10.

Then the IDFs were raised to the power 1.5 (``IDF_POWER``) before summing: a name that fills
a person's history (in the rich records' anchors, "Caroline attended…") still has some IDF,
and a turn holding it and one more common word of a reworded question held a third of it,
enough to push the dense arm's answers out. Weighing rare words more, the tune split's
reworded questions went from .518/.637/.765 to .538/.650/.767 on rich records (the dense arm
.528/.647/.751) and from .387/.503/.675 to .387/.514/.679 on minimal ones (dense
.385/.507/.670), with LoCoMo's own questions within .001 at every k (simulated on the captured
generator lists, with the named-time lift of lake.search.named_time). Powers 1.25 (rich
reworded still under the dense arm at 5 and 10), 1.75 (as 1.5), 2 (LoCoMo rich recall@10
.843 → .838, minimal recall@5 .748 → .736) and 3 were measured.

A query none of whose words stem to anything (only stop words, only CJK) has no coverage; its
lexical weight stays as given. Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from lake.index.codes import codes_held
from lake.index.lexical import code_words, held_stems, parsed_query
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


def turn_stems(stems: Collection[str], texts: Sequence[str], query: str = ""
               ) -> list[frozenset[str]]:
    """Per turn text, the ones of the query's ``stems`` it holds: the stems its words make
    (lake.index.lexical.held_stems), and the stems of each code word of ``query`` that it
    writes in another spelling (lake.index.codes), whose words make other stems: a turn
    writing "INC-3147" holds the "inc3147" of "what happened with INC3147", one writing
    "INC3147" the "inc" and "3147" of "INC-3147". Without this, "what happened with INC3147"
    left the turn naming INC-3147 at a fraction of its lexical vote, and an incident of the
    same shape the dense arm liked came first in three of four searches on the demo lake's
    tickets."""
    held = held_stems(stems, texts)
    wanted = frozenset(stems)
    codes = {code.word: made for code in code_words(parsed_query(query).terms)
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
