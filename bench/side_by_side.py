"""One scale lake searched by two checkouts of turnlake, alternated: latency and peak RSS.

``python -m bench.side_by_side --lake A --lake B --tree OLD --tree NEW`` searches lake A with
the code of tree OLD and lake B with that of tree NEW (each lake built by its tree's code over
the same tables: bench/scale.py, then ``pipeline.index_build`` for the second), user scope then
tenant scope, ``--rounds`` times alternated (OLD, NEW, OLD, NEW, ...), each run a fresh search
process of its own whose peak RSS (VmHWM: heap and the mapped file pages it touched) is read
at its end. The queries are drawn once (bench.scale.make_queries, which reads every text of the
lake: in a process of its own, so no search process carries that) and saved as JSON.

Prints one JSON object: per tree and scope, the pooled p50/p95 ms and the largest peak RSS;
and the lakes' bytes on disk (tables, indexes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_CHILD = "--child"


def _vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _child(lake: Path, queries_file: Path, scope: str, vectors: str, budget: int | None
           ) -> dict[str, Any]:
    """Search ``lake`` with the code on sys.path (this tree): every query once after a warm
    pass of 20, as bench.scale.measure does."""
    from bench.scale import NOW, bench_embedder
    from lake.search.access import Principal
    from lake.search.request import SearchRequest
    from lake.search.service import SearchService
    from lake.store import LakeStore

    queries = json.loads(queries_file.read_text())
    kwargs: dict[str, Any] = {} if budget is None else {"memory_budget": budget}
    service = SearchService(LakeStore(lake), embedder=bench_embedder(vectors, 5), **kwargs)
    flags = {"semantic": True, "lexical": True, "trigram": True}

    def request(tenant: str, user: str, query: str) -> SearchRequest:
        principal = (Principal(tenant, analyst=True) if scope == "tenant"
                     else Principal(tenant, user))
        return SearchRequest(query, principal, scope=scope,  # type: ignore[arg-type]
                             enabled=flags, as_of=NOW, k=10, snippets="both")

    for tenant, user, query in queries[:20]:
        service.search(request(tenant, user, query))
    samples = []
    for tenant, user, query in queries:
        started = time.perf_counter()
        service.search(request(tenant, user, query))
        samples.append((time.perf_counter() - started) * 1000)
    return {"samples_ms": samples, "peak_rss_kib": _vm_hwm_kib()}


def _draw_queries(lake: Path, n: int, path: Path) -> None:
    from bench.scale import make_queries
    from lake.store import LakeStore

    path.write_text(json.dumps(make_queries(LakeStore(lake), n)))


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _run(tree: Path, lake: Path, queries: Path, scope: str, vectors: str,
         budget: int | None) -> dict[str, Any]:
    # this file run by source in the tree's folder: the tree's modules come first on the path,
    # and an older tree need not have this file
    argv = [sys.executable, "-c", f"exec(open({str(Path(__file__).resolve())!r}).read())",
            _CHILD, "--lake", str(lake),
            "--queries-file", str(queries), "--scope", scope, "--vectors", vectors]
    if budget is not None:
        argv += ["--budget", str(budget)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"search process of {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Parse options; run the child, or the alternated comparison."""
    parser = argparse.ArgumentParser(prog="python -m bench.side_by_side")
    parser.add_argument(_CHILD, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lake", type=Path, action="append", required=True)
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--queries-file", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scope", choices=["user", "tenant"], action="append", default=None)
    parser.add_argument("--vectors", choices=["random", "clustered"], default="clustered")
    parser.add_argument("--budget", type=int, default=None,
                        help="memory budget (bytes) of the second tree's search processes")
    args = parser.parse_args()
    if args.child:
        assert args.queries_file is not None
        print(json.dumps(_child(args.lake[0], args.queries_file, args.scope[0], args.vectors,
                                args.budget)))
        return
    if len(args.lake) != len(args.tree) or not args.tree:
        parser.error("give one --tree per --lake")
    queries = args.lake[0].parent / f"side-by-side-queries-{args.queries}.json"
    if not queries.exists():
        _draw_queries(args.lake[0], args.queries, queries)
    scopes = args.scope or ["user", "tenant"]
    pooled: dict[str, dict[str, Any]] = {}
    for _ in range(args.rounds):
        for scope in scopes:
            for i, (tree, lake) in enumerate(zip(args.tree, args.lake, strict=True)):
                budget = args.budget if i == len(args.tree) - 1 else None
                got = _run(tree, lake, queries, scope, args.vectors, budget)
                slot = pooled.setdefault(f"{tree.name}:{scope}",
                                         {"samples_ms": [], "peak_rss_kib": 0})
                slot["samples_ms"] += got["samples_ms"]
                slot["peak_rss_kib"] = max(slot["peak_rss_kib"], got["peak_rss_kib"])
                print(f"{tree.name} {scope}: p50 "
                      f"{statistics.median(got['samples_ms']):.2f} ms, peak RSS "
                      f"{got['peak_rss_kib'] / 1024:.0f} MB", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"load_avg": [round(x, 2) for x in os.getloadavg()],
                           "queries": args.queries, "rounds": args.rounds}
    for key, slot in pooled.items():
        q = statistics.quantiles(slot["samples_ms"], n=100, method="inclusive")
        out[key] = {"p50_ms": round(q[49], 2), "p95_ms": round(q[94], 2),
                    "peak_rss_mb": round(slot["peak_rss_kib"] / 1024)}
    for tree, lake in zip(args.tree, args.lake, strict=True):
        out[f"{tree.name}:disk_mb"] = {
            "tables": round(_bytes(lake / "tables") / 2**20) if (lake / "tables").exists()
            else None, "indexes": round(_bytes(lake / "indexes") / 2**20),
            "lake": round(_bytes(lake) / 2**20)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
