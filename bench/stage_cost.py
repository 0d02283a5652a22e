"""What each ranking stage costs a search: user-scope hybrid p50 with the stage on and off.

``python -m bench.stage_cost LAKE [--queries N] [--rounds R]`` times the generated scale
queries (bench.scale.make_queries) on a scale lake (``python -m bench.run --full --only
scale_1m_clustered`` builds one at 1M rows) in user scope, all arms, with the ranking as it is,
with each stage of bench.ablation switched off, and with every stage of the last ranking round
switched off at once (exchange values, neighbours, coverage, the user's word statistics, the
named-time lift: the ranking before that round). The configurations run in turns, ``rounds``
times over after a round that is not counted (it warms the page cache), so that a busy
machine slows each alike; the figure is the median of a
configuration's per-round p50, and its ratio to the ranking before the round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from bench.ablation import STAGES, Stage
from bench.questions import Asking
from bench.scale import NOW, bench_embedder, make_queries
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.store import LakeStore

LAST_ROUND = ("exchange values", "conversation neighbours", "coverage weights",
              "user's word statistics", "named-time lift")


@contextlib.contextmanager
def _all_off(stages: Sequence[Stage]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for stage in stages:
            stack.enter_context(stage.patch())
        yield


def _asking(stages: Sequence[Stage]) -> Asking:
    asking = Asking()
    for stage in stages:
        asking = stage.asking(asking)
    return asking


def _request(asking: Asking, tenant: str, user: str, query: str,
             enabled: dict[str, bool]) -> SearchRequest:
    request = SearchRequest(query, Principal(tenant, user), enabled=enabled, as_of=NOW, k=10,
                            snippets="both", fusion=asking.fusion, weights=dict(asking.weights),
                            min_relevance=asking.min_relevance)
    return request if asking.time_weight is None else replace(request,
                                                              time_weight=asking.time_weight)


def time_configs(lake: Path, *, queries: int = 200, rounds: int = 3,
                 vectors: str = "clustered") -> dict[str, dict[str, float]]:
    """Per configuration, the median over rounds of its user-scope hybrid p50 (ms), and its
    ratio to the ranking before the last round."""
    service = SearchService(LakeStore(lake), embedder=bench_embedder(vectors, 5))
    asked = make_queries(LakeStore(lake), queries)
    configs: dict[str, list[Stage]] = {"as it is": []}
    configs |= {f"without {name}": [stage] for name, stage in STAGES.items()}
    configs["before the last round"] = [STAGES[name] for name in LAST_ROUND]
    p50s: dict[str, list[float]] = {name: [] for name in configs}
    # A first round, not counted, reads every configuration's files into the page cache:
    # without it the configurations timed first pay for a cold lake.
    for r in range(-1, rounds):
        for name, stages in configs.items():
            enabled = {"semantic": True, "lexical": True, "trigram": True}
            for stage in stages:
                enabled = {**enabled, **stage.configs["fused"]}
            asking = _asking(stages)
            with _all_off(stages):
                for tenant, user, query in asked[:10]:  # warm this configuration's paths
                    service.search(_request(asking, tenant, user, query, enabled))
                samples = []
                for tenant, user, query in asked:
                    t = time.perf_counter()
                    service.search(_request(asking, tenant, user, query, enabled))
                    samples.append((time.perf_counter() - t) * 1000)
            if r >= 0:
                p50s[name].append(statistics.median(samples))
                print(f"round {r + 1}: {name}: p50 {p50s[name][-1]:.2f} ms",
                      file=sys.stderr, flush=True)
    base = statistics.median(p50s["before the last round"])
    return {name: {"p50_ms": round(statistics.median(v), 2),
                   "vs_before_last_round": round(statistics.median(v) / base, 3)}
            for name, v in p50s.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table as JSON (each round's figures on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m bench.stage_cost")
    parser.add_argument("lake", type=Path)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if not (args.lake / "tables").is_dir():
        print(f"error: no lake at {args.lake}", file=sys.stderr)
        return 2
    print(json.dumps(time_configs(args.lake, queries=args.queries, rounds=args.rounds),
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
