"""Scored questions asked of a lake: the recall bench's common ground (LoCoMo, LongMemEval).

A question belongs to one user; its evidence is the turns that hold the answer. Asking
returns, per configuration, each question's recall at each k (the share of its evidence turns
in the top k) and all@k (1 when every evidence turn is there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from lake.search.access import Principal
from lake.search.relevance import DEFAULT_MIN_RELEVANCE
from lake.search.request import DEFAULT_WEIGHTS, FusionSettings, SearchRequest
from lake.search.service import SearchService

KS = (5, 10, 25)

# Each generator alone, and all of them fused.
CONFIGS: dict[str, dict[str, bool]] = {
    "semantic": {"semantic": True, "lexical": False, "trigram": False},
    "lexical": {"semantic": False, "lexical": True, "trigram": False},
    "trigram": {"semantic": False, "lexical": False, "trigram": True},
    "fused": {"semantic": True, "lexical": True, "trigram": True},
}


@dataclass(frozen=True)
class Question:
    """A scored question: whose history, what, which (conversation, turn) hold the evidence."""

    user_id: str
    text: str
    evidence: frozenset[tuple[str, str]]
    kind: str = ""  # the set's question type, for figures by type
    asked_at: datetime | None = None  # None: the caller's as_of


@dataclass(frozen=True)
class Asking:
    """How questions are asked: the search settings every configuration shares."""

    fusion: FusionSettings = field(default_factory=FusionSettings)
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    min_relevance: float = DEFAULT_MIN_RELEVANCE
    time_weight: float | None = None  # None: the search default


@dataclass(frozen=True)
class Found:
    """Per question (rows, in the order asked) and k (columns, :data:`KS`): recall and all@k."""

    recall: np.ndarray
    every: np.ndarray


def ask(service: SearchService, tenant: str, questions: Sequence[Question], as_of: datetime,
        *, asking: Asking | None = None,
        configs: Mapping[str, Mapping[str, bool]] | None = None) -> dict[str, Found]:
    """Each configuration's :class:`Found` for ``questions``, asked as their users (scope
    user), recency off, no per-conversation cap, at each question's own time or ``as_of``."""
    how = asking or Asking()
    out: dict[str, Found] = {}
    for name, enabled in (configs or CONFIGS).items():
        recall = np.zeros((len(questions), len(KS)))
        every = np.zeros((len(questions), len(KS)))
        for i, q in enumerate(questions):
            request = SearchRequest(
                q.text, Principal(tenant, q.user_id), k=max(KS), enabled=dict(enabled),
                weights=dict(how.weights), recency_weight=0.0, as_of=q.asked_at or as_of,
                max_per_conversation=0, snippets="none", fusion=how.fusion,
                min_relevance=how.min_relevance)
            if how.time_weight is not None:
                request = replace(request, time_weight=how.time_weight)
            ranked = [(h.conversation_id, h.turn_id) for h in service.search(request).hits]
            for j, k in enumerate(KS):
                held = len(q.evidence & set(ranked[:k]))
                recall[i, j] = held / len(q.evidence)
                every[i, j] = float(held == len(q.evidence))
        out[name] = Found(recall, every)
    return out


def mean_recalls(recalls: np.ndarray) -> dict[int, float]:
    """Recall@k for each k of :data:`KS`: the mean of per-question recalls (questions × ks)."""
    if recalls.shape[0] == 0:
        raise ValueError("no question was asked: recall has no mean")
    return {k: float(v) for k, v in zip(KS, recalls.mean(axis=0), strict=True)}
