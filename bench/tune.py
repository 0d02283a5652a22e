"""Fusion tuned on the tune halves of both development sets at once.

``python -m bench.tune [--lme-limit N]`` asks each candidate fusion (method, RRF k, per-arm
weights) on LoCoMo's tune conversations (0-4, minimal records, in a lake of their own) and the
LongMemEval dev questions of the tune half (even positions of the sorted ids), and prints
fused recall@5/10/25 per set and the candidates ordered by the mean of both sets' recall@10.
Nothing here reads a report half: a candidate it picks is then judged on the report halves
by ``python -m bench.ablation`` and the margins rule (bench.margins).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.questions import CONFIGS, KS, Asking
from lake.embedding.base import Embedder
from lake.search.request import DEFAULT_WEIGHTS, FusionSettings

FUSED = {"fused": CONFIGS["fused"]}


@dataclass(frozen=True)
class Candidate:
    """One fusion to try."""

    name: str
    asking: Asking


def _weights(semantic: float, lexical: float = 1.0, trigram: float = 0.5) -> dict[str, float]:
    return {"semantic": semantic, "lexical": lexical, "trigram": trigram}


CANDIDATES: list[Candidate] = [
    Candidate("default", Asking()),
    Candidate("rrf only", Asking(fusion=FusionSettings(method="rrf"))),
    Candidate("semantic 0.75", Asking(weights=_weights(0.75))),
    Candidate("semantic 1", Asking(weights=_weights(1.0))),
    Candidate("rrf only, semantic 1", Asking(fusion=FusionSettings(method="rrf"),
                                             weights=_weights(1.0))),
    Candidate("k 20", Asking(fusion=FusionSettings(k=20))),
    Candidate("score factor 0.5", Asking(fusion=FusionSettings(score_factor=0.5))),
    Candidate("trigram 0.25", Asking(weights=_weights(0.5, trigram=0.25))),
    Candidate("neighbours 0.25", Asking(fusion=FusionSettings(neighbour_weight=0.25))),
    Candidate("neighbours 0.1", Asking(fusion=FusionSettings(neighbour_weight=0.1))),
    Candidate("no neighbours", Asking(fusion=FusionSettings(neighbour_weight=0.0))),
]
assert CANDIDATES[0].asking.weights == DEFAULT_WEIGHTS


def tune_sets(*, locomo: Embedder | None, longmemeval: Embedder | None, workdir: Path,
              lme_limit: int | None = None, candidates: Sequence[Candidate] = CANDIDATES
              ) -> dict[str, Any]:
    """Per candidate, fused recall@k on the tune half of each set given an embedder (None:
    that set is left out) and the mean recall@10 of the sets; the candidates best first."""
    askers = {}
    if locomo is not None:
        askers["locomo"] = _locomo_tune(locomo, workdir)
    if longmemeval is not None:
        askers["longmemeval"] = _longmemeval_tune(longmemeval, workdir, lme_limit)
    rows = []
    for c in candidates:
        per_set = {name: asker(c.asking) for name, asker in askers.items()}
        at10 = float(np.mean([r[KS.index(10)] for r in per_set.values()]))
        rows.append({"candidate": c.name, "mean_recall_at_10": round(at10, 4), **per_set})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"ks": list(KS), "ranked": sorted(rows, key=lambda r: -r["mean_recall_at_10"])}


def _locomo_tune(embedder: Embedder, workdir: Path) -> Any:
    from bench.locomo import TENANT, build, ingested_lake, samples
    from bench.questions import ask
    from lake.search.service import SearchService
    from lake.store import LakeStore

    records, questions, last = build(samples("tune"), rich=False)
    root = workdir / "locomo-tune"
    ingested_lake(root, records, embedder)
    service = SearchService(LakeStore(root), embedder=embedder)

    def run(asking: Asking) -> list[float]:
        found = ask(service, TENANT, questions, last, asking=asking, configs=FUSED)
        return [round(float(v), 4) for v in found["fused"].recall.mean(axis=0)]

    return run


def _longmemeval_tune(embedder: Embedder, workdir: Path, limit: int | None) -> Any:
    from bench.longmemeval import question_recalls

    def run(asking: Asking) -> list[float]:
        found = question_recalls(embedder, splits=("tune",), limit=limit, asking=asking,
                                 configs=FUSED, workdir=workdir / "longmemeval")
        return [round(float(v), 4) for v in found["tune"]["fused"].recall.mean(axis=0)]

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Print the candidates, best first, as JSON (each as it lands on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m bench.tune")
    parser.add_argument("--lme-limit", type=int, default=None)
    args = parser.parse_args(argv)
    from bench.cache import CACHE_DIR, CachedEmbedder
    from lake.embedding.sentence import SentenceTransformerEmbedder

    inner = SentenceTransformerEmbedder()
    locomo = CachedEmbedder(inner)
    lme = CachedEmbedder(inner, path=CACHE_DIR / f"emb-lme-{inner.name}.npz")
    print(json.dumps(tune_sets(locomo=locomo, longmemeval=lme, workdir=CACHE_DIR / "tune",
                               lme_limit=args.lme_limit), indent=1))
    locomo.save()
    lme.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
