"""A hit's relevance: how likely the turn is a real match for the query, in [0, 1].

Fused scores rank turns but say nothing absolute: a query of punctuation or of words the
user never wrote still gets k turns, each with an RRF value. Relevance reads the evidence
each generator has for the turn on absolute scales instead:

* ``semantic`` - the semantic arm's value of the turn: the query's cosine with its exchange
  (lake.search.exchange), or with its best row of another role where that is higher. A turn
  outside the arm's candidates is given the lowest value among them (an upper bound of its
  own);
* ``lexical``  - ``log1p`` of its BM25 score (0 when no query word matched);
* ``trigram``  - its trigram similarity (0 below the threshold).

A logistic model without a free intercept maps the three to a score in [0, 1]:
``z = w_s * (cosine - c) + w_l * lexical + w_t * trigram``, relevance ``1 / (1 + e^-z)``. A
turn with no text evidence scores 0.5 at cosine ``c``, the boundary; each unit of evidence
multiplies the odds by ``e^w``. ``python -m bench.relevance --fit`` chose them on the tuning
half of LoCoMo alone (conversations 0-4, minimal records, all-MiniLM-L6-v2): positives are
the evidence turns of its questions, negatives every hit of 200 generated queries that match
nothing (dictionary words absent from the history, shuffled letters, other-language text,
punctuation), the classes weighted equally; ``c`` is the lowest on a 0.01 grid at which 99 %
of those queries come back empty at the default floor 0.5 while recall@5/10/25 stays within
0.01 of no floor. Each trial model is judged by the relevance the search would serve with
it, the neighbour lift (lake.search.neighbours) included.

Refitted 2026-12-04 with the ranking of that day (exchange values, a user's own word
statistics, per-turn coverage weights, named-time lift): c = 0.42 as before, the slopes a
little shallower (semantic 6.93 from 7.80, lexical 2.52 from 2.40); fused searches under the
default floor kept the same hits on both splits, and searches by the semantic arm alone lost
.001-.004 of recall@k (a neighbour now lends a turn enough relevance from cosine .494 up, not
.485). Recall@25 on the tuning split costs .007 from c = 0.39 up, and the
no-match queries come back empty 97.5 % at 0.39, 99 % from 0.42: the turns the floor loses
are evidence of list questions ("what items has Melanie bought?") that share no word with the
question and sit at cosines .25-.37, as high as the best turn of a no-match query (.41).
Earlier fits (before 2026-12-04) left the neighbour lift out and asked for 0.005; on today's
ranking no boundary meets 0.005 with 99 % empty.

A query that has found something is judged more leniently (2026-12-05). The turns the floor
cost were turns of queries that had already found sure matches: list questions whose other
evidence shares no word with the question, and questions asked in other words, whose evidence
sits at lower cosines all along. No cosine boundary tells those from the best turn of a query
that matches nothing; the query's own list does. So once one turn of the list reaches relevance
0.5 on its own evidence, every turn's cosine is judged ``found_shift`` nearer the boundary. A
list that found nothing is untouched, so the no-match queries the floor left empty stay empty,
and the false-empty rate cannot move. ``--fit`` takes the smallest shift on a 0.01 grid that
keeps recall@5/10/25 within 0.005 of no floor on the tuning split, for its questions as asked
and for the same questions reworded (bench.reworded; the reworded ones were added to the fit
the same day). Fitted on the questions as asked alone, the shift was 0.11 (turns passed from
cosine .31 up), and the floor still cost the reworded questions .016/.028/.059 on the tuning
split; with them it was 0.30 (turns passed from cosine .12 up; 0.16 since the refit below) and
cost them .004/.004/.005 there. On the report split, looked at only afterwards, the floor's
cost went from .006/.006/.010 (0.11) to .000/.000/.000 for the questions as asked, and from
.017/.032/.057 to .000/.000/.004 reworded. The price is that a found list keeps most of its
turns (112 of 121 on average on the tuning split with today's model; 89.7 at 0.11): the
relevance of a found list's weak turns says "the query found its subject", and a stricter
``min_relevance`` (0.8: cosine .33 up without text evidence, in a found list) is the way to see
only its strong ones.

A query without a word is judged by its text alone (2026-12-05). all-MiniLM-L6-v2 reads a query
of digits, codes or punctuation as a shape, not a meaning, and puts it near every row of the
same shape: on the demo lake "#4471" sat at cosine .47 with "PR #4560", "1234567" at .47 with
"INV-56907", and 11 of 15 codes the history does not hold ("#4471", "9876", "42", "x7y9z1",
"QWERTY123", "INV-11111", ...) came back with 10 hits each, the first at relevance .64-1.0. A
query that :func:`reads_as_meaning` finds no word in (no CJK character, and no
whitespace-separated token with three letters in a row and no digit) is judged by
:func:`literal_relevance`: 1 for a turn that holds it whole (trigram word similarity 1: its
words, in order, as the turn writes them), half its word similarity for a turn that holds it in
part, so that only a whole match passes the default floor (and a neighbour of one, by the
neighbour lift). A code written with other separators or none is the same code: a turn that
holds its runs of letters and of digits in order, separators aside (lake.index.codes),
holds it whole too, since people type "INC3147" for INC-3147 (none of 72 such probes of
``bench.codes`` was found before, all are now; their near misses, "INC3148", stay empty). A
query of several codes ("mk0 mk100") is judged by the best of them (:func:`code_terms`). The
search works the similarities out from the rows the lexical and trigram arms found
(lake.search.service), so a code held by more rows than the trigram arm keeps is found in each
of them. Its ranking is unchanged. The arms find a code in its other spellings: the lexical arm
looks for "INC3147" as the phrase "inc 3147" and for "INC-3147" as the token "inc3147"
(lake.index.lexical), and the trigram arm keeps a turn from word similarity 0.5 up ("INC3147"
is .55 of "INC-3147", "PR4560" .50 of "PR #4560"). A first version (the same day) judged
such a turn by the model's value of its BM25 and trigram evidence, or its word similarity where
higher; that left a code the history holds part of found by that part: "INC-9999" came back
with 10 hits at relevance .98, each another incident (INC-9124, ...) by the shared "INC", and
so did "PR #9999" by PR and "INV-11111" by INV. An identifier names one thing: a different
number is a different ticket, so a part is not a match (``python -m bench.codes`` measures
codes the demo lake holds against codes of the same shape it does not). The punctuation queries
among the fit's no-match probes are such queries, and they had held the boundary up (a run of
punctuation sits near every short turn, ";)" at .63): refitted with their cosines counted as 0,
``c`` is 0.33 (from 0.42; semantic 8.49, lexical 2.36) and the found shift 0.16 (a found list's
turns pass from cosine .17 up, as from .12 before). Tuning split, at the default floor: recall
as with no floor, as asked (was -.001 at each k); reworded -.001/-.001/-.005; questions left
with no hit 0 (was 2 of 760); no-match queries empty 99.5 % (one of 50 dictionary queries finds
a turn; 99 % before, when two punctuation runs did). Report split, looked at afterwards: recall
as with no floor, as asked; reworded .000/.000/-.006 (was -.004 at 25); no-match queries empty
99.5 % (one of 50 other-language queries finds a turn; 100 % before).

A search without a query vector (semantic arm off, or no model) has only text evidence, and
on the tuning split every such hit was a real one (no no-match query found any): its turns
are scored as if their cosine sat at the floor's boundary, so any word or trigram match
passes the default floor and more of them score higher.

The weights hold for that embedding model; another model's cosines sit on another scale, so
its relevance is only roughly calibrated (the floor can be set per request).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from lake.index.lexical import cjk_grams
from lake.search.defaults import DEFAULT_MIN_RELEVANCE as DEFAULT_MIN_RELEVANCE


@dataclass(frozen=True)
class RelevanceModel:
    """Logistic weights over a turn's evidence; every weight is >= 0, so more evidence of
    any kind never lowers a turn's relevance."""

    bias: float
    semantic: float
    lexical: float
    trigram: float
    # cosine added to every turn's semantic value in a list that has found a turn (see
    # :func:`relevance`): the boundary a found query's turns are judged against is this lower
    found_shift: float = 0.0

    def __post_init__(self) -> None:
        if min(self.semantic, self.lexical, self.trigram, self.found_shift) < 0:
            raise ValueError(f"relevance weights must be >= 0: {self}")

    @property
    def boundary_cosine(self) -> float:
        """The cosine at which a turn without text evidence scores 0.5."""
        return -self.bias / self.semantic if self.semantic > 0 else 0.0

    def __call__(self, semantic: np.ndarray, lexical: np.ndarray,
                 trigram: np.ndarray) -> np.ndarray:
        """Relevance per turn from its features (see :func:`features`)."""
        z = self.bias + self.semantic * semantic + self.lexical * lexical \
            + self.trigram * trigram
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


# Fitted by bench/relevance.py (see the module docstring); the README gives the figures.
MODEL = RelevanceModel(bias=-2.802, semantic=8.492, lexical=2.363, trigram=0.004,
                       found_shift=0.16)
# A list with a turn this relevant on its own evidence has found something (the default floor:
# a query that floor leaves a hit is a found one).
FOUND_RELEVANCE = 0.5


_LETTERS = re.compile(r"[^\W\d_]{3,}")  # three letters in a row, of any script
_DIGIT = re.compile(r"\d")


def reads_as_meaning(query: str) -> bool:
    """Whether the query holds a word: a CJK character, or a whitespace-separated token with
    three letters in a row and no digit. A query of numbers, codes and punctuation ("#4471",
    "9876", "INC-9999", "x7y9z1", "cp1252") holds none, and the embedding model's cosine says
    nothing about it (see the module notes)."""
    return any(_LETTERS.search(token) and not _DIGIT.search(token)
               for token in query.split()) or bool(cjk_grams(query))


MAX_CODE_TERMS = 32  # a query of more codes is judged as one (bounds the work per search)


def code_terms(query: str) -> list[str]:
    """The codes of a query without a word that a turn holding one of whole is found by
    (:func:`literal_relevance`): each whitespace-separated token that holds a digit, when
    several do ("mk0 mk100", "INC-3147 #4560"), up to :data:`MAX_CODE_TERMS`; none when fewer
    than two (or more than that many) do: "PR #4560" and "INC-9999" are one code each, held
    whole or not at all."""
    coded = [token for token in query.split() if _DIGIT.search(token)]
    return coded if 1 < len(coded) <= MAX_CODE_TERMS else []


def features(semantic: np.ndarray | None, lexical: np.ndarray, trigram: np.ndarray,
             *, meaning: bool = True) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The model's inputs from raw generator scores per turn, NaN where a generator did not
    find the turn (``semantic`` None: the semantic arm did not run). ``meaning`` False (a
    query :func:`reads_as_meaning` finds no word in): every cosine counts as 0, no evidence."""
    sem = None
    if semantic is not None:
        found = ~np.isnan(semantic)
        bound = float(semantic[found].min()) if found.any() else 0.0
        sem = np.where(found, semantic, bound) if meaning else np.zeros_like(semantic)
    lex = np.log1p(np.where(np.isnan(lexical), 0.0, np.maximum(lexical, 0.0)))
    tri = np.where(np.isnan(trigram), 0.0, trigram)
    return sem, lex, tri


def literal_relevance(trigram: np.ndarray) -> np.ndarray:
    """The relevance of each turn to a query without a word (:func:`reads_as_meaning`), from
    its trigram word similarity to the query (NaN: no text of the turn was found, 0; 1 also
    for a turn that holds one of the query's :func:`code_terms` whole): 1 where the turn
    holds it whole, half the similarity where it holds it in part, which stays under the
    default floor: "INC-9999" is not found in "INC-9124"."""
    similarity = np.where(np.isnan(trigram), 0.0, np.asarray(trigram, np.float64))
    return np.where(similarity >= 1.0, 1.0, 0.5 * similarity)


def relevance(semantic: np.ndarray | None, lexical: np.ndarray, trigram: np.ndarray,
              *, model: RelevanceModel = MODEL, meaning: bool = True) -> np.ndarray:
    """Each turn's relevance from its raw generator scores (NaN: not found by that generator;
    ``semantic`` None: no semantic arm ran), the turns being one query's list: when one of
    them reaches :data:`FOUND_RELEVANCE`, every turn's cosine is judged ``model.found_shift``
    nearer the boundary. A list that found nothing is scored turn by turn, unchanged.
    ``meaning`` False: the query holds no word (:func:`reads_as_meaning`), and its turns are
    judged by :func:`literal_relevance` alone."""
    if not meaning:
        return literal_relevance(trigram)
    sem, lex, tri = features(semantic, lexical, trigram)
    if sem is None:
        return model(np.full_like(lex, model.boundary_cosine), lex, tri)
    own = model(sem, lex, tri)
    if model.found_shift > 0 and own.size and own.max() >= FOUND_RELEVANCE:
        return model(sem + model.found_shift, lex, tri)
    return own
