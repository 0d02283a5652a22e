"""Each ranking stage switched off in turn, on both development sets: what it is worth.

``python -m bench.ablation [--lme-limit N] [--sets locomo,longmemeval]`` asks LoCoMo's questions
(minimal records) and the LongMemEval dev questions once with the ranking as it is and once per
stage switched off, and prints recall@5/10/25 of the fused list per set and split with the
paired bootstrap interval (bench.margins) of "stage on" minus "stage off". A stage pays on a
set when that interval, on the set's report half, lies wholly above zero.

Stages the request can switch off are switched off there; the others (the exchange value, the
user's own word statistics, a long row's best passage) are switched off by replacing the one
function that applies them for the length of a run: a measurement, never a product setting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.margins import paired_interval
from bench.questions import CONFIGS, KS, Asking, Found

FUSED = {"fused": CONFIGS["fused"]}
NO_TRIGRAM = {"fused": {**CONFIGS["fused"], "trigram": False}}


@contextlib.contextmanager
def _unchanged() -> Iterator[None]:
    yield


@contextlib.contextmanager
def _no_exchange() -> Iterator[None]:
    """A turn valued by its best found row alone, never by its prompt and answer together."""
    from lake.search import exchange, whole_scope

    original = exchange.ranked_turns

    def best_row(found: exchange.FoundRows, vectors: np.ndarray, vector_turns: np.ndarray,
                 query: np.ndarray, partitions: int) -> list[list[tuple[int, float]]]:
        return original(found._replace(alone=np.ones_like(found.alone)), vectors[:0],
                        vector_turns[:0], query, partitions)

    exchange.ranked_turns = best_row  # type: ignore[assignment]
    whole_scope.ranked_turns = best_row  # type: ignore[assignment]
    try:
        yield
    finally:
        exchange.ranked_turns = original  # type: ignore[assignment]
        whole_scope.ranked_turns = original  # type: ignore[assignment]


@contextlib.contextmanager
def _no_user_statistics() -> Iterator[None]:
    """The lexical arm's word weights from all rows of the partitions, not the user's own."""
    from lake.search import generators

    original = generators.QueryStatistics.of

    def tenant_wide(parts: Any, query: Any, user_id: str | None) -> Any:
        return original.__func__(generators.QueryStatistics, parts, query, None)  # type: ignore[attr-defined]

    generators.QueryStatistics.of = staticmethod(tenant_wide)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        generators.QueryStatistics.of = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _no_passages() -> Iterator[None]:
    """A long row scored by its pooled vector only, not raised by its best passage."""
    from lake.index.partition import PartitionIndex

    original = PartitionIndex.__dict__["passages"]
    PartitionIndex.passages = property(lambda self: None)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        PartitionIndex.passages = original  # type: ignore[method-assign]


@contextlib.contextmanager
def lenient_on_any_find() -> Iterator[None]:
    """The rule before the meaning gate: a list found by any evidence is judged leniently."""
    from lake.search import relevance, service

    originals = relevance.found_by_meaning, service.found_by_meaning
    relevance.found_by_meaning = service.found_by_meaning = lambda *_: True  # type: ignore[assignment]
    try:
        yield
    finally:
        relevance.found_by_meaning, service.found_by_meaning = originals  # type: ignore[assignment]


@dataclass(frozen=True)
class Stage:
    """How a run switches one stage off."""

    what: str
    asking: Callable[[Asking], Asking] = lambda a: a
    configs: Mapping[str, Mapping[str, bool]] = field(default_factory=lambda: FUSED)
    patch: Callable[[], contextlib.AbstractContextManager[None]] = _unchanged


def _fusion(**changes: Any) -> Callable[[Asking], Asking]:
    return lambda a: replace(a, fusion=replace(a.fusion, **changes))


STAGES: dict[str, Stage] = {
    "exchange values": Stage("a turn valued by its prompt and answer together",
                             patch=_no_exchange),
    "conversation neighbours": Stage("a turn lifted by its best neighbour",
                                     _fusion(neighbour_weight=0.0)),
    "coverage weights": Stage("the lexical vote scaled by the query's share a turn holds",
                              _fusion(coverage_gain=0.0)),
    "user's word statistics": Stage("BM25 word weights from the user's own rows",
                                    patch=_no_user_statistics),
    "named-time lift": Stage("turns in a time the query names lifted",
                             lambda a: replace(a, time_weight=0.0)),
    "trigram arm": Stage("the trigram generator", configs=NO_TRIGRAM),
    "long row's best passage": Stage("a long row raised by its best passage",
                                     patch=_no_passages),
    "relevance floor": Stage("hits under relevance .5 dropped",
                             lambda a: replace(a, min_relevance=0.0)),
    "meaning gate": Stage("leniency only for a list the dense arm found on its own",
                          patch=lenient_on_any_find),
}


Asker = Callable[[Asking, Mapping[str, Mapping[str, bool]]], dict[str, dict[str, Found]]]


def locomo_asker(typos: bool = False, reworded: bool = False, long: bool = False) -> Asker:
    """Asks LoCoMo's questions (minimal records), per split tune/report; ``typos``: each with
    a typo in its longest word (bench.typos); ``reworded``: each content word swapped for a
    near word of another stem (bench.reworded); ``long``: every other run of a session's
    turns joined into one long turn (bench.locomo.join_turns, mixed), long rows among short
    ones."""
    from bench.cache import CachedEmbedder
    from bench.locomo import TENANT as LOCOMO_TENANT
    from bench.locomo import build, ingested_lake, samples
    from bench.questions import ask
    from bench.run import CACHE, LONG_RUN
    from lake.embedding.sentence import SentenceTransformerEmbedder
    from lake.search.service import SearchService
    from lake.store import LakeStore

    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    records, questions, last = build(samples("all"), rich=False)
    root = CACHE / "locomo" / "minimal"
    if long:
        from bench.locomo import join_turns

        records, questions = join_turns(records, questions, LONG_RUN, mixed=True)
        root = CACHE / "locomo-long" / "passages" / f"minimal-joined{LONG_RUN}-mixed"
    if typos:
        from bench.typos import with_typos

        questions = with_typos(questions)
    if reworded:
        from bench.reworded import reword

        questions = reword(questions, embedder)
    ingested_lake(root, records, embedder)
    embedder.save()
    service = SearchService(LakeStore(root), embedder=embedder)

    def run(asking: Asking, configs: Mapping[str, Mapping[str, bool]]
            ) -> dict[str, dict[str, Found]]:
        out = {}
        for split in ("tune", "report"):
            users = {s["sample_id"] for s in samples(split)}
            asked = [q for q in questions if q.user_id in users]
            out[split] = ask(service, LOCOMO_TENANT, asked, last, asking=asking,
                             configs=configs)
        return out

    return run


def longmemeval_asker(limit: int | None) -> Asker:
    """Asks the LongMemEval dev questions (the first ``limit`` of the seeded order)."""
    from bench.cache import CACHE_DIR, CachedEmbedder
    from bench.longmemeval import question_recalls
    from lake.embedding.sentence import SentenceTransformerEmbedder

    inner = SentenceTransformerEmbedder()
    embedder = CachedEmbedder(inner, path=CACHE_DIR / f"emb-lme-{inner.name}.npz")

    def run(asking: Asking, configs: Mapping[str, Mapping[str, bool]]
            ) -> dict[str, dict[str, Found]]:
        return question_recalls(embedder, limit=limit, asking=asking, configs=configs,
                                workdir=CACHE_DIR / "longmemeval")

    return run


def _means(values: np.ndarray) -> list[float]:
    return [round(float(v), 3) for v in values.mean(axis=0)]


def compare(on: Found, off: Found) -> dict[str, Any]:
    """Recall@k with the stage on and off, and the interval of on − off per k."""
    intervals = [paired_interval(on.recall[:, j] - off.recall[:, j]) for j in range(len(KS))]
    return {"on": _means(on.recall), "off": _means(off.recall),
            "on_minus_off": [[round(lo, 4), round(hi, 4)] for lo, hi in intervals]}


def ablate(askers: Mapping[str, Asker], stages: Sequence[str], *, arms: bool = True
           ) -> dict[str, Any]:
    """Per set and stage, :func:`compare` on each split; also each arm alone per set (unless
    ``arms`` is False: the fused list alone, a third of the searches)."""
    out: dict[str, Any] = {}
    for set_name, asker in askers.items():
        base = asker(Asking(), CONFIGS if arms else FUSED)
        out[set_name] = {"arms": {split: {name: _means(f.recall) for name, f in by.items()}
                                  for split, by in base.items()},
                         "all_at_k": {split: _means(by["fused"].every)
                                      for split, by in base.items()},
                         "stages": {}}
        for stage_name in stages:
            stage = STAGES[stage_name]
            with stage.patch():
                off = asker(stage.asking(Asking()), stage.configs)
            out[set_name]["stages"][stage_name] = {
                split: compare(base[split]["fused"], off[split]["fused"]) for split in off}
            print(f"{set_name}: {stage_name}: "
                  f"{json.dumps(out[set_name]['stages'][stage_name])}", file=sys.stderr,
                  flush=True)
    return out


def judge(askers: Mapping[str, Asker], candidate: Asking) -> dict[str, Any]:
    """A tuned candidate against the ranking as it is, per set and half: :func:`compare` of
    the candidate ("on") with today's default ("off"). The rule: keep it only when the
    interval lies wholly below zero on neither report half and wholly above on one."""
    out: dict[str, Any] = {}
    for set_name, asker in askers.items():
        now = asker(Asking(), FUSED)
        tried = asker(candidate, FUSED)
        out[set_name] = {split: compare(tried[split]["fused"], now[split]["fused"])
                         for split in now}
        print(f"{set_name}: {json.dumps(out[set_name])}", file=sys.stderr, flush=True)
    return out


def plot(result: Mapping[str, Any], path: Path, split: str = "report") -> Path:
    """Per set of ``result`` (:func:`ablate`'s answer), recall@k of each generator alone and
    fused on ``split``, one panel a set, saved as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [name for name in result if "arms" in result[name]]
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 3.6), squeeze=False)
    for ax, name in zip(axes[0], sets, strict=True):
        for arm, recalls in result[name]["arms"][split].items():
            ax.plot(KS, recalls, marker="o", label=arm, linewidth=2.5 if arm == "fused" else 1)
        ax.set_title(f"{name}, {split} half")
        ax.set_xlabel("k")
        ax.set_ylabel("recall@k")
        ax.set_xticks(list(KS))
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Print the ablation as JSON (progress on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m bench.ablation")
    parser.add_argument("--sets", default="locomo,longmemeval",
                        help="of locomo, locomo-typos (LoCoMo asked with a typo: bench.typos), "
                             "locomo-reworded (in other words: bench.reworded), locomo-long "
                             "(long rows among short ones: bench.locomo.join_turns) and "
                             "longmemeval")
    parser.add_argument("--lme-limit", type=int, default=None)
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--plot", type=Path, default=None,
                        help="also draw each set's recall@k per generator as this PNG")
    parser.add_argument("--judge", default=None,
                        help="judge this bench.tune candidate against the ranking as it is")
    parser.add_argument("--no-arms", action="store_true",
                        help="ask the fused list only, not each generator alone")
    args = parser.parse_args(argv)
    makers: dict[str, Callable[[], Asker]] = {
        "locomo": locomo_asker, "locomo-typos": lambda: locomo_asker(typos=True),
        "locomo-reworded": lambda: locomo_asker(reworded=True),
        "locomo-long": lambda: locomo_asker(long=True),
        "longmemeval": lambda: longmemeval_asker(args.lme_limit)}
    chosen = [s for s in args.sets.split(",") if s]
    unknown = [s for s in chosen if s not in makers] + [
        s for s in args.stages.split(",") if s and s not in STAGES]
    if unknown:
        print(f"error: unknown set or stage {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.judge is not None:
        from bench.tune import CANDIDATES

        named = {c.name: c for c in CANDIDATES}
        if args.judge not in named:
            print(f"error: no candidate {args.judge!r}; candidates: {', '.join(named)}",
                  file=sys.stderr)
            return 2
        print(json.dumps(judge({s: makers[s]() for s in chosen}, named[args.judge].asking),
                         indent=1))
        return 0
    result = ablate({s: makers[s]() for s in chosen},
                    [s for s in args.stages.split(",") if s], arms=not args.no_arms)
    print(json.dumps(result, indent=1))
    if args.plot is not None and not args.no_arms:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

