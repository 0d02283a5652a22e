"""Embedding runtimes (issue #25): ONNX Runtime against PyTorch in one run, and vector reuse.

``python -m bench.embedding_bench [--locomo]`` prints the figures as JSON; ``bench.run`` runs
:func:`bench_runtimes` as its ``embedding_runtimes`` section. Speed is reported as ratios
measured in the same run (the machine is shared; absolute milliseconds drift):

- one query: p50 of ONNX (one intra-op thread, as in the service) vs PyTorch (its default
  threads, as before), then ONNX again while another process keeps every core busy;
- bulk: texts/s of each runtime on the same demo texts, all cores, and the minimum cosine
  between their vectors;
- reuse: the share of rows that get a vector without computing one, on the demo lake and on
  LoCoMo (texts are what decides it, so the dependency-free hashing embedder stands in);
- ingest with real embeddings (ONNX, reuse on) of ``--ingest-turns`` demo turns: turns/s;
- with ``--locomo``: LoCoMo semantic and fused recall for torch, ONNX fp32 and ONNX int8.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lake.embedding.base import Embedder
from lake.embedding.factory import embedder_for


def demo_texts(n: int, seed: int = 2) -> list[str]:
    """``n`` prompt and answer texts of the demo generator (what a lake really holds)."""
    from pipeline.demo import generate_records

    texts: list[str] = []
    for record in generate_records(users=20, turns=n, seed=seed):
        texts += [s.text for s in record.submissions] + [record.completion.text]
        if len(texts) >= n:
            break
    return texts[:n]


def query_latencies(embedder: Embedder, n: int) -> list[float]:
    """Milliseconds of ``n`` one-text ``encode`` calls (after a warm-up)."""
    embedder.encode(["warm up"])
    samples = []
    for i in range(n):
        t = time.perf_counter()
        embedder.encode([f"spreadsheet trouble from last week number {i}"])
        samples.append((time.perf_counter() - t) * 1000)
    return samples


def query_p50(embedder: Embedder, n: int) -> float:
    """Median of :func:`query_latencies`."""
    return float(np.percentile(query_latencies(embedder, n), 50))


def _spin(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def under_load(measure: Callable[[], float]) -> float:
    """``measure()`` while one busy process per core runs beside it."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    burners = [ctx.Process(target=_spin, args=(stop,), daemon=True)
               for _ in range(os.cpu_count() or 1)]
    for p in burners:
        p.start()
    try:
        time.sleep(1.0)  # let the burners reach the cores
        return measure()
    finally:
        stop.set()
        for p in burners:
            p.join(timeout=10)


def bulk(embedder: Embedder, texts: Sequence[str]) -> tuple[float, np.ndarray]:
    """Texts/s of one ``encode`` over ``texts`` and the vectors."""
    embedder.encode(["warm up"])
    t = time.perf_counter()
    vectors = embedder.encode(list(texts), batch_size=64)
    return len(texts) / (time.perf_counter() - t), vectors


def reuse_share(lines: Sequence[str]) -> dict[str, Any]:
    """Ingest ``lines`` into a fresh lake (hashing embedder, no indexes) and count reuse."""
    from lake.settings import Settings
    from pipeline.jobs import run_ingest

    with tempfile.TemporaryDirectory(prefix="reuse-") as tmp:
        settings = Settings(lake=Path(tmp) / "lake", embedding_model="hashing-64")
        t = time.perf_counter()
        job = run_ingest(settings, records=list(lines), index=False)
        seconds = time.perf_counter() - t
    tally = job.embedding
    return {"turns": job.ingest.accepted, "rows": tally.embedded, "reused": tally.reused,
            "computed": tally.embedded - tally.reused,
            "reused_share": round(tally.reused / max(tally.embedded, 1), 4),
            "ingest_s_hashing": round(seconds, 1)}


def ingest_with_embeddings(lines: Sequence[str]) -> dict[str, Any]:
    """Ingest ``lines`` into a fresh lake with the default embedder (ONNX, every core) and
    vector reuse, no indexes: turns/s and the share of rows that reused a vector."""
    from lake.settings import Settings
    from pipeline.jobs import run_ingest

    with tempfile.TemporaryDirectory(prefix="embed-ingest-") as tmp:
        settings = Settings(lake=Path(tmp) / "lake")
        embedder = embedder_for(None)
        embedder.encode(["warm up"])  # the graph loads before the clock starts
        t = time.perf_counter()
        job = run_ingest(settings, records=list(lines), index=False, embedder=embedder)
        seconds = time.perf_counter() - t
    tally = job.embedding
    return {"turns": job.ingest.accepted, "rows": tally.embedded,
            "turns_per_s": round(job.ingest.accepted / seconds, 1),
            "reused_share": round(tally.reused / max(tally.embedded, 1), 4),
            "seconds": round(seconds, 1)}


def locomo_lines() -> list[str]:
    """LoCoMo as minimal records (read from the shared evaluation folder, never copied)."""
    from bench import locomo

    records, _, _ = locomo.build(locomo.load(), rich=False)
    return [json.dumps(r) for r in records]


def _unless_missing(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure()``, or why it was skipped when the LoCoMo file is not there."""
    from bench import locomo

    try:
        return measure()
    except locomo.MissingEvalData as exc:
        return {"skipped": str(exc)}


def bench_runtimes(*, queries: int = 200, texts: int = 1000, demo_turns: int = 100_000,
                   ingest_turns: int = 2_000) -> dict[str, Any]:
    """The quick section: query latency, latency under load, bulk throughput, cosine, reuse."""
    from pipeline.demo import generate_lines

    onnx_query = embedder_for(None, threads=1)
    torch_query = embedder_for(None, runtime="torch")
    onnx_ms = query_p50(onnx_query, queries)
    torch_ms = query_p50(torch_query, queries)
    loaded_ms = under_load(lambda: query_p50(onnx_query, queries))
    sample = demo_texts(texts)
    onnx_rate, onnx_vectors = bulk(embedder_for(None), sample)
    torch_rate, torch_vectors = bulk(embedder_for(None, runtime="torch"), sample)
    cosines = (onnx_vectors * torch_vectors).sum(axis=1)
    return {
        "query_p50_ms": {"onnx_1_thread": round(onnx_ms, 2),
                         "torch_default_threads": round(torch_ms, 2),
                         "onnx_vs_torch": round(onnx_ms / torch_ms, 3),
                         "onnx_under_load": round(loaded_ms, 2),
                         "onnx_load_vs_idle": round(loaded_ms / onnx_ms, 2)},
        "bulk_texts_per_s": {"onnx": round(onnx_rate, 1), "torch": round(torch_rate, 1),
                             "onnx_vs_torch": round(onnx_rate / torch_rate, 3),
                             "texts": len(sample)},
        "cosine_onnx_vs_torch": {"min": round(float(cosines.min()), 6),
                                 "mean": round(float(cosines.mean()), 6),
                                 "texts": len(sample)},
        "reuse_demo": reuse_share(list(generate_lines(users=12, turns=demo_turns, seed=7))),
        "reuse_locomo": _unless_missing(lambda: reuse_share(locomo_lines())),
        "ingest_with_embeddings_demo": ingest_with_embeddings(
            list(generate_lines(users=12, turns=ingest_turns, seed=7))),
    }


RUNTIMES: dict[str, dict[str, Any]] = {"torch_fp32": {"runtime": "torch"}, "onnx_fp32": {},
            "onnx_int8": {"precision": "int8"}}


def bench_locomo_runtimes(labels: Sequence[str] = tuple(RUNTIMES),
                          configs: Sequence[str] = ("semantic", "fused")) -> dict[str, Any]:
    """LoCoMo recall@k (minimal records) per runtime and precision, for ``configs`` only."""
    from bench import locomo

    every = locomo.CONFIGS
    # evaluate() scores every configuration it knows; the lexical-only ones do not depend
    # on the runtime, so they are left out to halve the run.
    locomo.CONFIGS = {name: every[name] for name in configs}
    out: dict[str, Any] = {}
    try:
        for label in labels:
            embedder = embedder_for(None, **RUNTIMES[label])
            t = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="locomo-rt-") as tmp:
                res = locomo.evaluate(embedder, rich=False, workdir=Path(tmp))["all"]
            out[label] = {name: {str(k): round(v, 4) for k, v in res[name].items()}
                          for name in configs}
            out[label]["seconds"] = round(time.perf_counter() - t, 1)
            print(label, json.dumps(out[label]), flush=True)
    finally:
        locomo.CONFIGS = every
    if "onnx_fp32" in out:
        fp32 = out["onnx_fp32"]["semantic"]["10"]
        if "onnx_int8" in out:
            out["int8_minus_fp32_recall_at_10"] = round(
                out["onnx_int8"]["semantic"]["10"] - fp32, 4)
        if "torch_fp32" in out:
            out["onnx_minus_torch_recall_at_10"] = round(
                fp32 - out["torch_fp32"]["semantic"]["10"], 4)
    return out


def main() -> None:
    """Print the section's figures (and LoCoMo per runtime with ``--locomo``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--locomo", action="store_true")
    parser.add_argument("--only-locomo", action="store_true")
    parser.add_argument("--runtimes", nargs="*", default=list(RUNTIMES), choices=list(RUNTIMES))
    parser.add_argument("--configs", nargs="*", default=["semantic", "fused"])
    parser.add_argument("--demo-turns", type=int, default=100_000)
    parser.add_argument("--ingest-turns", type=int, default=2_000,
                        help="demo turns ingested with real embeddings (100k: ~30 minutes)")
    args = parser.parse_args()
    if not args.only_locomo:
        print(json.dumps(bench_runtimes(demo_turns=args.demo_turns,
                                        ingest_turns=args.ingest_turns), indent=2), flush=True)
    if args.locomo or args.only_locomo:
        print(json.dumps(bench_locomo_runtimes(args.runtimes, args.configs), indent=2),
              flush=True)


if __name__ == "__main__":
    main()
