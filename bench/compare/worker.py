"""One system's searches in a process of its own, so its peak RSS is its own.

``python -m bench.compare.worker JOB.json`` reads a job (which system, where its data is, the
query set, the settings, which arms, latency or recall), runs it and writes ``job["out"]``.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.compare.rows import QuerySet
from bench.compare.systems import SearchSettings, System

PROFILE_QUERIES = 300
# turnlake functions whose cumulative time names a search stage in the profile summary
STAGES = {
    "_partitions": "partition status + open",
    "_allowed_docs": "scope mask (allowed docs)",
    "_embed_query": "query vector (pinned)",
    "service.py:_semantic": "semantic generator",
    "service.py:_lexical": "lexical generator (tantivy)",
    "service.py:_trigram": "trigram generator",
    "service.py:_fuse": "fusion + recency + hit rows",
    "fusion.py:fuse_ids": "  of which RRF fusion (fuse_ids)",
    "service.py:_hit": "  of which hit materialization",
}


def warm(system: System, qs: QuerySet, arm: str) -> None:
    """Run every query once, unmeasured: each system then answers the timed pass from warm
    caches (its index pages, buffers and lazily opened structures), not just its first few
    users' data."""
    for i, q in enumerate(qs.queries):
        system.search(arm, q, qs.vectors[i])


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 and mean of samples (ms), rounded to 3 decimals."""
    if len(samples) < 2:
        raise ValueError("need at least two latency samples")
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": round(q[49], 3), "p95_ms": round(q[94], 3), "p99_ms": round(q[98], 3),
            "mean_ms": round(statistics.fmean(samples), 3), "n": len(samples)}


def open_system(job: dict[str, Any], settings: SearchSettings) -> System:
    """The system a job names, opened on its data."""
    kind = job["system"]
    if kind == "turnlake":
        from bench.compare.turnlake_sys import TurnlakeSystem

        return TurnlakeSystem(Path(job["lake"]), settings)
    if kind == "lancedb":
        from bench.compare.lance_sys import LanceSystem

        return LanceSystem(Path(job["lance"]), settings)
    if kind == "postgres":
        from bench.compare.pg_sys import PgSystem

        return PgSystem(job["conninfo"], settings)
    raise ValueError(f"unknown system {kind!r}; use turnlake, lancedb or postgres")


def settings_of(raw: dict[str, Any]) -> SearchSettings:
    """SearchSettings from a job's JSON."""
    as_of = datetime.fromisoformat(raw["as_of"]) if raw.get("as_of") else None
    return SearchSettings(k=raw["k"], depth=raw["depth"], as_of=as_of,
                          recency_weight=raw["recency_weight"])


def latency(system: System, qs: QuerySet, arms: Sequence[str]) -> dict[str, Any]:
    """Per arm: one unmeasured pass over every query (warm caches), then time each once."""
    out: dict[str, Any] = {}
    for arm in arms:
        warm(system, qs, arm)
        samples = []
        for i, q in enumerate(qs.queries):
            t = time.perf_counter()
            system.search(arm, q, qs.vectors[i])
            samples.append((time.perf_counter() - t) * 1000)
        out[arm] = {**percentiles(samples), "samples": [round(x, 4) for x in samples]}
    return out


def recall(system: System, qs: QuerySet, arms: Sequence[str], ks: Sequence[int]
           ) -> dict[str, Any]:
    """Per arm: mean fraction of each question's evidence turns in the top k, plus latency."""
    out: dict[str, Any] = {}
    for arm in arms:
        warm(system, qs, arm)
        totals = dict.fromkeys(ks, 0.0)
        samples = []
        for i, q in enumerate(qs.queries):
            t = time.perf_counter()
            turns = system.search(arm, q, qs.vectors[i])
            samples.append((time.perf_counter() - t) * 1000)
            evidence = set(q.evidence)
            for k in ks:
                totals[k] += len(evidence & set(turns[:k])) / len(evidence)
        out[arm] = {"recall": {str(k): round(totals[k] / len(qs.queries), 4) for k in ks},
                    "latency": {**percentiles(samples),
                                "samples": [round(x, 4) for x in samples]}}
    return out


def profile(system: System, qs: QuerySet, arm: str, *, limit: int = PROFILE_QUERIES
            ) -> dict[str, Any]:
    """cProfile of one arm over the first queries: ms per stage and the top functions."""
    queries = qs.queries[:limit]
    warm(system, qs, arm)
    prof = cProfile.Profile()
    prof.enable()
    for i, q in enumerate(queries):
        system.search(arm, q, qs.vectors[i])
    prof.disable()
    stats = pstats.Stats(prof)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    n = len(queries)
    stages: dict[str, float] = {}
    top = []
    for (path, line, func), (_cc, _nc, tt, ct, _callers) in raw.items():
        where = f"{Path(path).name}:{func}"
        for key, label in STAGES.items():
            if key in (func, where):
                stages[label] = round(stages.get(label, 0.0) + ct * 1000 / n, 3)
        top.append((tt, f"{Path(path).name}:{line}:{func}"))
    top.sort(reverse=True)
    total = sum(tt for tt, _ in top)
    return {"ms_per_query_by_stage": {label: stages[label] for label in STAGES.values()
                                      if label in stages},
            "top_self_time": [{"function": f, "ms_per_query": round(tt * 1000 / n, 3)}
                              for tt, f in top[:12]],
            "profiled_ms_per_query": round(total * 1000 / n, 3)}


def build(job: dict[str, Any]) -> dict[str, Any]:
    """Load the shared rows into LanceDB or Postgres; returns timings and bytes."""
    from bench.compare.rows import load_rows

    rows = load_rows(Path(job["rows"]))
    if job["system"] == "lancedb":
        from bench.compare import lance_sys

        return lance_sys.build(rows, Path(job["lance"]))
    if job["system"] == "postgres":
        from bench.compare import pg_sys

        return pg_sys.build(job["conninfo"], rows)
    raise ValueError(f"cannot build {job['system']!r}; only lancedb and postgres load rows")


def peak_rss_kib() -> int:
    """This process's peak RSS. VmHWM belongs to this exec's address space; getrusage's
    ru_maxrss is not used because Linux carries it over from the parent across fork+exec."""
    import os

    from bench.compare.pg_server import vm_hwm_kib

    return vm_hwm_kib(os.getpid()) or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Execute one job; the result includes this process's peak RSS."""
    if job["task"] == "build":
        built = build(job)
        built["peak_rss_kib"] = peak_rss_kib()
        return built
    settings = settings_of(job["settings"])
    qs = QuerySet.load(Path(job["queries"]), job["query_set"])
    system = open_system(job, settings)
    try:
        result: dict[str, Any] = {"system": system.name}
        if job["task"] == "latency":
            result["arms"] = latency(system, qs, job["arms"])
        elif job["task"] == "recall":
            result["arms"] = recall(system, qs, job["arms"], job["ks"])
        else:
            raise ValueError(f"unknown task {job['task']!r}; use latency or recall")
        if job.get("profile_arm"):
            result["profile"] = profile(system, qs, job["profile_arm"])
        if job["system"] == "postgres":
            from bench.compare.pg_server import vm_hwm_kib
            from bench.compare.pg_sys import PgSystem

            assert isinstance(system, PgSystem)
            result["server_backend_peak_rss_kib"] = vm_hwm_kib(system.backend_pid())
            if job.get("explain"):
                result["plans"] = {arm: system.explain(arm, qs.queries[0], qs.vectors[0])
                                   for arm in job["explain"]}
    finally:
        system.close()
    result["peak_rss_kib"] = peak_rss_kib()
    return result


def main(argv: Sequence[str]) -> None:
    """Entry point: one argument, the job file."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m bench.compare.worker JOB.json")
    job = json.loads(Path(argv[0]).read_text())
    Path(job["out"]).write_text(json.dumps(run(job), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
