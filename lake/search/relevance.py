"""A hit's relevance: how likely the turn is a real match for the query, in [0, 1].

Fused scores only rank, so a query nothing matches would still get k turns. Relevance reads each
generator's absolute evidence (the semantic arm's cosine, ``log1p`` of BM25, trigram similarity)
through a logistic model fitted by ``python -m bench.relevance --fit``; the search drops hits
under ``min_relevance``. A query that has found something judges its other turns more leniently
(``found_shift``), and a query without a word (codes, numbers, punctuation) is judged by its text
alone (:func:`literal_relevance`). The model, its fit and its measurements:
docs/design/relevance.md.
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


# A short query's list not found by meaning weighs each turn's lexical evidence by the share of
# the query it holds to this power (see :func:`relevance`)
COVERAGE_POWER = 2.0
# A query of at most this many weighed stems is short: each of its words is its subject. In a
# longer question the frame's words share the weight, and coverage reads a right answer as a
# partial one (tried on every query: the LongMemEval dev tune half lost .02-.06 of recall)
SHORT_QUERY_STEMS = 2


def relevance(semantic: np.ndarray | None, lexical: np.ndarray, trigram: np.ndarray,
              *, model: RelevanceModel = MODEL, meaning: bool = True,
              coverage: np.ndarray | None = None) -> np.ndarray:
    """Each turn's relevance from its raw generator scores (NaN: not found by that generator;
    ``semantic`` None: no semantic arm ran), the turns being one query's list: when one of
    them reaches :data:`FOUND_RELEVANCE`, every turn's cosine is judged ``model.found_shift``
    nearer the boundary. A list that found nothing is scored turn by turn, unchanged.
    ``meaning`` False: the query holds no word (:func:`reads_as_meaning`), and its turns are
    judged by :func:`literal_relevance` alone. The shift needs a list
    :func:`found_by_meaning`.

    ``coverage`` (per turn, the share of the query's weight its text holds,
    lake.search.coverage; NaN: unknown), given for a short query (:data:`SHORT_QUERY_STEMS`),
    is read only for a list the semantic arm ran on and did not find by meaning: each turn's
    lexical evidence is scaled by ``coverage ** COVERAGE_POWER``. Such a list was found by
    words alone, and a turn holding only the frame ("do you remember …", "tell me about …
    again") holds a small share of a query whose weight lies in a word the model does not
    know."""
    if not meaning:
        return literal_relevance(trigram)
    sem, lex, tri = features(semantic, lexical, trigram)
    if coverage is not None and semantic is not None and not found_by_meaning(semantic, model):
        held = np.where(np.isnan(coverage), 1.0, np.clip(coverage, 0.0, 1.0))
        lex = lex * held ** COVERAGE_POWER
    if sem is None:
        return model(np.full_like(lex, model.boundary_cosine), lex, tri)
    own = model(sem, lex, tri)
    if model.found_shift > 0 and own.size and own.max() >= FOUND_RELEVANCE \
            and found_by_meaning(semantic, model):
        return model(sem + model.found_shift, lex, tri)
    return own


def found_by_meaning(semantic: np.ndarray | None, model: RelevanceModel = MODEL) -> bool:
    """Whether the semantic arm on its own reaches the model's boundary for a turn of the
    list (``semantic``: cosines per turn, NaN where the arm did not find it): the model read
    the query as something the history holds. A query whose only match is a word the model
    does not know (a made-up product name, a rare surname) finds its turn by its text, and
    every other turn's cosine to it is noise: such a list earns no leniency, neither the
    found shift nor its neighbours' relevance (lake.search.neighbours)."""
    if semantic is None:
        return False
    found = semantic[~np.isnan(semantic)]
    return bool(found.size) and float(found.max()) >= model.boundary_cosine
