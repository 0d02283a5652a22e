"""Rare words the model does not know: planted in one turn, or absent from the history.

``python -m bench.rare_words`` plants pronounceable made-up words (a product, a project's code
name, a surname) each in one turn of a LoCoMo history (minimal records), then asks, as that
turn's user:

* planted: the word alone, and inside an ordinary question. Right when the planted turn is the
  first hit and at most one other hit comes with it.
* absent: made-up words no history holds, alone and inside a question. Right when no hit comes
  back.

Words are drawn from a seeded syllable generator and kept only when no history holds them or
their stems. The LoCoMo data is read from ../shared at run time and never copied.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.locomo import TENANT, build, ingested_lake, samples
from bench.relevance import _absent, history_words
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.store import LakeStore

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gr", "kr", "pl", "tr", "st", "sk")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_ENDINGS = ("", "n", "r", "x", "l", "s", "te", "ne", "ko", "via")
_PLANTED = (
    "We finally picked a name for the new project: {word}.",
    "My cousin swears by {word}, that new tea shop near the station.",
    "I met a guy called Tom {word} at the workshop, he builds furniture.",
    "The app I use for budgeting is called {word} and it is great.",
)
_ASKED = (
    "{word}",
    "what did we say about {word}?",
    "do you remember {word}",
    "tell me about {word} again",
)


@dataclass(frozen=True)
class RareProbe:
    """A query of one user, and the turn it must find first (None: it must find nothing)."""

    user_id: str
    query: str
    turn: tuple[str, str] | None


def made_up_words(rng: random.Random, n: int, avoid: set[str]) -> list[str]:
    """``n`` distinct pronounceable words of 2–3 syllables absent from ``avoid``."""
    out: list[str] = []
    while len(out) < n:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS)
                       for _ in range(rng.randint(2, 3))) + rng.choice(_ENDINGS)
        if len(word) >= 6 and _absent(word, avoid) and word not in out:
            out.append(word)
    return out


def planted_lake(per_user: int = 2, absent_per_user: int = 2, seed: int = 7
                 ) -> tuple[list[dict[str, Any]], list[RareProbe], Any]:
    """LoCoMo's records with words planted, the probes, and the time to ask at."""
    records, _, last = build(samples("all"), rich=False)
    words = history_words(records)
    every_word = set().union(*words.values())
    rng = random.Random(seed)
    by_user: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_user.setdefault(r["user_id"], []).append(i)
    probes: list[RareProbe] = []
    for user in sorted(by_user):
        fresh = made_up_words(rng, per_user + absent_per_user, every_word)
        for word, at in zip(fresh[:per_user], rng.sample(by_user[user], per_user),
                            strict=True):
            r = records[at]
            sentence = rng.choice(_PLANTED).format(word=word.capitalize())
            r["completion"] = {**r["completion"],
                               "text": f"{r['completion']['text']} {sentence}".strip()}
            turn = (r["conversation_id"], r["turn_id"])
            probes += [RareProbe(user, q.format(word=word), turn)
                       for q in rng.sample(_ASKED, 2)]
        for word in fresh[per_user:]:
            probes += [RareProbe(user, q.format(word=word), None)
                       for q in rng.sample(_ASKED, 2)]
    return records, probes, last


def measure(service: SearchService, probes: Sequence[RareProbe], as_of: Any,
            min_relevance: float | None = None) -> dict[str, Any]:
    """Shares of planted probes answered right (their turn first, at most one other hit) and
    of absent probes left empty, with the hit counts seen."""
    planted_right, absent_empty = [], []
    extra: list[int] = []
    for p in probes:
        request = SearchRequest(p.query, Principal(TENANT, p.user_id), k=10, recency_weight=0.0,
                                as_of=as_of, snippets="none")
        if min_relevance is not None:
            request = replace(request, min_relevance=min_relevance)
        hits = [(h.conversation_id, h.turn_id) for h in service.search(request).hits]
        if p.turn is None:
            absent_empty.append(not hits)
        else:
            planted_right.append(bool(hits) and hits[0] == p.turn and len(hits) <= 2)
            extra.append(len(hits) - 1 if hits and hits[0] == p.turn else len(hits))
    return {"planted": len(planted_right),
            "planted_right": round(sum(planted_right) / max(len(planted_right), 1), 3),
            "planted_other_hits_mean": round(sum(extra) / max(len(extra), 1), 2),
            "absent": len(absent_empty),
            "absent_empty": round(sum(absent_empty) / max(len(absent_empty), 1), 3)}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the measurement as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.rare_words")
    parser.parse_args(argv)
    from bench.cache import CachedEmbedder
    from bench.run import CACHE
    from lake.embedding.sentence import SentenceTransformerEmbedder

    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    records, probes, last = planted_lake()
    root = CACHE / "locomo-planted"
    ingested_lake(root, records, embedder)
    embedder.save()
    service = SearchService(LakeStore(root), embedder=embedder)
    out = {"rule": measure(service, probes, last)}
    from bench.ablation import lenient_on_any_find

    with lenient_on_any_find():  # the rule before the meaning gate
        out["before"] = measure(service, probes, last)
    out["no floor"] = measure(service, probes, last, min_relevance=0.0)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
