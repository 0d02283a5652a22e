"""`python -m bench.run --quick|--full`: every benchmark, printed and saved under bench/results.

Sections: ingest throughput (embeddings off), embedding throughput (raw encode vs the row
pipeline), embedding runtimes (ONNX vs PyTorch, vector reuse), LoCoMo recall per generator and
fused, search latency at scale, ANN recall; with --full also the partition-parallel index build
on Ray (1 and 2 workers).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results"
INGEST_TARGET = 20_000  # turns/s, issue #2
CACHE = Path(__file__).parent / ".cache"
LONG_RUN = 16  # turns joined into one for bench_locomo_long


def machine() -> dict[str, Any]:
    """Cores, memory and versions, saved beside every figure.

    Versions come from the installed distributions: importing the libraries here would load
    them into every section's process before the code measured does (polars, for one, sets
    the allocator options deltalake then reads, see lake/__init__.py).
    """
    version = importlib.metadata.version
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cores": os.cpu_count(), "memory_gib": round(mem, 1),
            "python": platform.python_version(), "torch": version("torch"),
            "deltalake": version("deltalake"), "polars": version("polars"),
            "faiss": version("faiss-cpu"), "load_avg_at_start": os.getloadavg()[0]}


def bench_ingest(turns: int, runs: int = 3) -> dict[str, Any]:
    """Turns/s of `turnlake ingest` with embeddings and index builds off, in ``runs`` runs into
    fresh lakes, each in a fresh process (bench.ingest_run).

    On this shared machine the same ingest's CPU time drifts by a fifth and more within
    minutes, so one run says little: each run's figure comes with the whole machine's
    CPU-seconds during it (the same work each time: more seconds mean a slower machine), and
    the headline is the median.
    """
    from pipeline.demo import generate_lines

    root = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    # A file, as `turnlake ingest` reads, written before the clock starts.
    source = root / "demo.jsonl"
    source.write_text("".join(
        line + "\n" for line in generate_lines(users=max(12, turns // 150), turns=turns, seed=1,
                                               now=datetime(2026, 11, 1, tzinfo=UTC))))
    workers = min(4, os.cpu_count() or 1)  # as `turnlake ingest` does
    measured: list[dict[str, Any]] = []
    try:
        for run in range(runs):
            lake = root / f"lake-{run}"
            out = subprocess.run(
                [sys.executable, "-m", "bench.ingest_run", str(source), str(lake), str(workers)],
                capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
            measured.append(json.loads(out.stdout.splitlines()[-1]))
            shutil.rmtree(lake, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rates = sorted(m["turns_per_s"] for m in measured)
    return {"turns": measured[0]["turns"], "workers": workers, "rows": measured[0]["rows"],
            "turns_per_s": int(np.median(rates)), "turns_per_s_min": rates[0],
            "turns_per_s_max": rates[-1],
            "runs": [{k: m[k] for k in ("seconds", "turns_per_s", "machine_cpu_s")}
                     for m in measured]}


def bench_embedding(n: int) -> dict[str, Any]:
    """Raw model.encode throughput vs the pipeline's embed_rows on the same texts."""
    import pyarrow as pa

    from lake.embedding.rows import embed_rows
    from lake.embedding.sentence import SentenceTransformerEmbedder
    from lake.tables import CONTENT_ROWS
    from pipeline.demo import generate_records

    texts: list[str] = []
    for record in generate_records(users=20, turns=n, seed=2):
        texts += [s.text for s in record.submissions] + [record.completion.text]
        if len(texts) >= n:
            break
    texts = texts[:n]
    embedder = SentenceTransformerEmbedder()
    embedder.encode(["warm up"])
    model = embedder._load()
    t = time.perf_counter()
    model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    raw = time.perf_counter() - t
    rows = pa.Table.from_pydict({name: [None] * n for name in CONTENT_ROWS.names},
                                schema=CONTENT_ROWS).set_column(
        CONTENT_ROWS.get_field_index("text"), "text", pa.array(texts))
    t = time.perf_counter()
    embed_rows(rows, embedder, batch_size=64)
    pipeline = time.perf_counter() - t
    return {"texts": n, "raw_per_s": round(n / raw, 1), "pipeline_per_s": round(n / pipeline, 1),
            "pipeline_vs_raw": round(raw / pipeline, 3)}


def _figures(found: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per split and configuration, recall@k rounded for the report, from question recalls."""
    from bench.locomo import mean_recalls

    return {split: {g: {str(k): round(v, 3) for k, v in mean_recalls(r).items()}
                    for g, r in by_config.items()}
            for split, by_config in found.items()}


def _margins(found: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """Per split, fused recall@k minus the best generator's alone, with its paired bootstrap
    interval (bench.margins)."""
    from bench.locomo import KS
    from bench.margins import fused_margins

    return {split: {str(m.k): m.to_json() for m in fused_margins(by_config, KS)}
            for split, by_config in found.items()}


def bench_locomo() -> dict[str, Any]:
    """Recall@5/10/25 on LoCoMo, minimal and rich records, each generator and fused: on all
    ten conversations, per split (tune 0-4, report 5-9), and without the relevance floor;
    without it, fused against the best generator alone with a 95 % interval."""
    from bench.cache import CachedEmbedder
    from bench.locomo import question_recalls
    from lake.embedding.sentence import SentenceTransformerEmbedder

    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    out: dict[str, Any] = {}
    splits = ("tune", "report", "all")
    for rich in (False, True):
        variant = "rich" if rich else "minimal"
        floored = _figures(question_recalls(embedder, rich=rich, workdir=CACHE / "locomo",
                                            splits=splits))
        unfloored = question_recalls(embedder, rich=rich, workdir=CACHE / "locomo",
                                     splits=splits, min_relevance=0.0)
        out[variant] = floored["all"]
        out[f"{variant}_splits"] = floored
        out[f"{variant}_no_floor"] = _figures(unfloored)
        out[f"{variant}_margins"] = _margins(unfloored)
    embedder.save()
    return out


QUICK_LME_QUESTIONS = 52  # the first run embeds ~25 MB of their histories


def bench_longmemeval(limit: int | None) -> dict[str, Any]:
    """Recall@5/10/25 and all@k on the LongMemEval dev questions (minimal records), each
    generator and fused, per split (even ids tune, odd report), overall and by question type;
    fused against the best generator alone with a 95 % interval. Only the first ``limit``
    questions of the seeded order (None: all 120, ~55 MB of history to embed the first time);
    TURNLAKE_LME_LIMIT=N overrides it."""
    from bench.longmemeval import question_recalls, run_figures

    if os.environ.get("TURNLAKE_LME_LIMIT"):
        limit = int(os.environ["TURNLAKE_LME_LIMIT"])
    return run_figures(question_recalls, limit=limit, workdir=CACHE / "longmemeval")


def bench_locomo_reworded() -> dict[str, Any]:
    """Recall@5/10/25 on LoCoMo's questions asked in other words (bench.reworded), minimal and
    rich records, each generator and fused, per split, without the relevance floor; and fused
    against the best generator alone with a 95 % interval."""
    from bench.cache import CachedEmbedder
    from bench.locomo import question_recalls
    from lake.embedding.sentence import SentenceTransformerEmbedder

    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    out: dict[str, Any] = {}
    for rich in (False, True):
        variant = "rich" if rich else "minimal"
        found = question_recalls(embedder, rich=rich, workdir=CACHE / "locomo",
                                 splits=("tune", "report", "all"), min_relevance=0.0,
                                 reworded=True)
        out[variant] = _figures(found)
        out[f"{variant}_margins"] = _margins(found)
    embedder.save()
    return out


def bench_locomo_long() -> dict[str, Any]:
    """Recall@5/10/25 of each generator and of fusion on LoCoMo made long (each session's
    turns joined in runs of 16, bench.locomo.join_turns), LoCoMo's questions and reworded ones,
    per split, no floor: long rows embedded as passages (lake.embedding.passages) against
    their first 254 word pieces; and, with passages, the ``mixed`` history where only every
    other run is joined (long turns beside short ones). With passages, fused against the best
    generator alone with a 95 % interval."""
    from bench.cache import CACHE_DIR, CachedEmbedder
    from bench.locomo import question_recalls
    from lake.embedding.sentence import SentenceTransformerEmbedder

    out: dict[str, Any] = {}
    for mode, embedder in (
            ("passages", CachedEmbedder(SentenceTransformerEmbedder())),
            ("truncated", CachedEmbedder(SentenceTransformerEmbedder(passages=False),
                                         path=CACHE_DIR / "emb-all-MiniLM-L6-v2-truncated.npz"))):
        for mixed in (False, True) if mode == "passages" else (False,):
            for reworded in (False, True):
                found = question_recalls(
                    embedder, rich=False, workdir=CACHE / "locomo-long" / mode,
                    splits=("tune", "report", "all"), min_relevance=0.0, reworded=reworded,
                    joined=LONG_RUN, mixed=mixed)
                name = f"{mode}{'_mixed' if mixed else ''}{'_reworded' if reworded else ''}"
                out[name] = _figures(found)
                if mode == "passages":
                    out[f"{name}_margins"] = _margins(found)
        embedder.save()
    return out


def bench_relevance() -> dict[str, Any]:
    """The relevance floor per LoCoMo split: recall with and without it, false-empty rate on
    LoCoMo questions, true-empty rate on 200 generated no-match queries (bench.relevance)."""
    from bench.cache import CachedEmbedder
    from bench.relevance import report as relevance_report
    from lake.embedding.sentence import SentenceTransformerEmbedder

    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    out = relevance_report(embedder, CACHE)
    embedder.save()
    return out


def bench_codes() -> dict[str, Any]:
    """Per kind of code probe on the demo lake (bench.codes), the share the default floor
    answers right."""
    from bench.cache import CachedEmbedder
    from bench.codes import measure as measure_codes
    from lake.embedding.sentence import SentenceTransformerEmbedder

    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    out = measure_codes(CACHE / "codes-demo", embedder)
    embedder.save()
    return out


def bench_scale(rows: int, queries: int, vectors: str = "random") -> dict[str, Any]:
    """Latency p50/p95/p99 per arm and scope on a synthetic lake of `rows` rows whose vectors
    are ``vectors`` (bench.scale.VECTORS: random, the worst case, or clustered, text-like)."""
    from bench.scale import (
        build_scale_lake,
        build_seconds_by_kind,
        make_queries,
        measure,
        scale_lake_dir,
    )
    from lake.store import LakeStore
    from lake.tables import Table

    root = scale_lake_dir(CACHE, rows, vectors)
    settings, ingest_s, build_s = build_scale_lake(root, rows, vectors=vectors)
    store = LakeStore(settings.lake)
    # A reused lake reports no build time: keep the figures of the run that built it.
    sidecar = root.with_name(f"{root.name}.build.json")
    if ingest_s or build_s:
        sidecar.write_text(json.dumps({"ingest_s": ingest_s, "index_build_s": build_s}))
    elif sidecar.exists():
        built = json.loads(sidecar.read_text())
        ingest_s, build_s = built["ingest_s"], built["index_build_s"]
    qs = make_queries(store, queries)
    rows_read = store.read(Table.CONTENT_ROWS, columns=["row_id"]).num_rows
    out: dict[str, Any] = {"vectors": vectors, "rows": rows_read,
                           "ingest_s": round(ingest_s, 1), "index_build_s": round(build_s, 1),
                           # summed over partitions (the live builds' own manifests)
                           "index_build_by_kind_s": build_seconds_by_kind(store)}
    for scope in ("user", "tenant"):
        for arm, flags in (("hybrid", None),
                           ("semantic", {"semantic": True, "lexical": False, "trigram": False}),
                           ("lexical", {"semantic": False, "lexical": True, "trigram": False}),
                           ("trigram", {"semantic": False, "lexical": False, "trigram": True})):
            lat = measure(settings, qs, scope=scope, enabled=flags, vectors=vectors)
            out[f"{scope}/{arm}"] = {"p50_ms": round(lat.p50, 2), "p95_ms": round(lat.p95, 2),
                                     "p99_ms": round(lat.p99, 2)}
    return out


def bench_passages_cost(rows: int, queries: int, share: float = 0.3) -> dict[str, Any]:
    """What long rows' passages cost a search: the text-like scale lake of ``rows`` rows
    against the same lake with ``share`` of its answers long (3 passages each,
    bench.scale.build_scale_lake), p50 of hybrid and semantic searches per scope, the two
    lakes measured alternately, twice, in one run."""
    import pyarrow.compute as pc

    from bench.scale import build_scale_lake, make_queries, measure, scale_lake_dir
    from lake.store import LakeStore
    from lake.tables import Table

    lakes = {}
    for name, long_share in (("plain", 0.0), ("long", share)):
        root = scale_lake_dir(CACHE, rows, "clustered", long_share)
        lakes[name] = build_scale_lake(root, rows, vectors="clustered",
                                       long_share=long_share)[0]
    long_rows = pc.list_value_length(LakeStore(lakes["long"].lake).read(
        Table.CONTENT_ROWS, columns=["passage_embeddings"]).column(
        "passage_embeddings").drop_null())
    qs = make_queries(LakeStore(lakes["plain"].lake), queries)
    samples: dict[str, list[float]] = {}
    for _ in range(2):
        for name, settings in lakes.items():
            for scope in ("user", "tenant"):
                for arm, flags in (
                        ("hybrid", None),
                        ("semantic", {"semantic": True, "lexical": False, "trigram": False})):
                    lat = measure(settings, qs, scope=scope, enabled=flags, vectors="clustered")
                    samples.setdefault(f"{name}/{scope}/{arm}", []).append(lat.p50)
    out: dict[str, Any] = {"rows": rows, "long_share": share, "long_rows": len(long_rows),
                           "passages": int(pc.sum(long_rows).as_py() or 0) // 384}
    for key, p50s in samples.items():
        out[f"{key}_p50_ms"] = [round(p, 2) for p in p50s]
    for scope in ("user", "tenant"):
        for arm in ("hybrid", "semantic"):
            plain, long = (sum(samples[f"{n}/{scope}/{arm}"]) for n in ("plain", "long"))
            out[f"{scope}/{arm}_long_over_plain"] = round(long / plain, 3)
    return out


def bench_query_embedding(n: int = 200) -> dict[str, Any]:
    """Latency of embedding one query with the real model on PyTorch (timed apart from search;
    the ONNX figure is in the embedding_runtimes section)."""
    from bench.embedding_bench import query_latencies
    from lake.embedding.sentence import SentenceTransformerEmbedder

    samples = query_latencies(SentenceTransformerEmbedder(), n)
    return {"p50_ms": round(float(np.percentile(samples, 50)), 2),
            "p95_ms": round(float(np.percentile(samples, 95)), 2)}


def bench_embedding_runtimes() -> dict[str, Any]:
    """ONNX vs PyTorch: one query, under load, bulk, cosine; reuse share (bench.embedding_bench)."""
    from bench.embedding_bench import bench_runtimes

    return bench_runtimes()


def bench_ann_recall(n: int) -> dict[str, Any]:
    """Recall@10 and latency of HNSW against exact search on random unit vectors.

    Random 384-d vectors are the hardest case for HNSW (no cluster structure): the automatic
    choice keeps such an index exact; here HNSW is forced with a fixed efSearch to measure it.
    """
    from lake.index.semantic import SemanticIndex, recall_at_k

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[rng.choice(n, 200, replace=False)] + 0.05 * rng.standard_normal(
        (200, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    t = time.perf_counter()
    approx = SemanticIndex.build(vectors, exact_max_rows=1000, ef_search=256)
    build = time.perf_counter() - t
    exact = SemanticIndex.build(vectors, exact_max_rows=n + 1)
    timings = {}
    for name, index in (("hnsw", approx), ("exact", exact)):
        samples = []
        for q in queries[:100]:
            t = time.perf_counter()
            index.search(q, limit=10)
            samples.append((time.perf_counter() - t) * 1000)
        timings[f"{name}_p50_ms"] = round(float(np.percentile(samples, 50)), 2)
    auto = SemanticIndex.build(vectors)
    return {"rows": n, "kind": approx.kind, "ef_search": 256, "build_s": round(build, 1),
            "recall_at_10": round(recall_at_k(approx, exact, queries, 10), 4), **timings,
            "automatic_choice": auto.kind}


def bench_purge_section(rows: int) -> dict[str, Any]:
    """Purge time for 1 % of a lake of ``rows`` content rows."""
    from bench.purge_bench import bench_purge

    return bench_purge(rows)


def bench_segments_section(large_turns: int) -> dict[str, Any]:
    """Warm record-until-searchable on a 1k-row and a larger partition, a 1 % incremental
    build against a full one, and search before / after compaction."""
    from bench.segments_bench import bench_segments

    return bench_segments(500, large_turns)


def bench_tenants_section(tenants: int) -> dict[str, Any]:
    """A lake of ``tenants`` tenants (~1,000 small partitions at 300): a user's search, the
    index check before it against a whole-lake one, and the first search after another
    tenant's write against a whole-lake status re-read."""
    from bench.tenants_bench import bench_tenants

    return bench_tenants(tenants)


def bench_recall_section(turns: int, calls: int) -> dict[str, Any]:
    """The Claude Code prompt hook's whole process (recall at the prompt): p50/p95 through a
    warm `turnlake serve` and straight from a lake (issue 54)."""
    from bench.recall_bench import bench_recall

    return bench_recall(turns, calls)


def bench_ray_section(rows: int) -> dict[str, Any]:
    """Partition-parallel index build on Ray with 1 and 2 workers, and in process."""
    from bench.ray_bench import bench_ray_build

    return bench_ray_build(rows, cache=CACHE)


def bench_serve_section(seconds: float, *, embed: bool = False) -> dict[str, Any]:
    """`turnlake serve` on loopback: 8 recording + 4 searching clients for ``seconds``
    (50-turn requests), then, for up to 15 s each: the same with 1- and 200-turn requests;
    50-turn requests with no lag bound (``--max-lag 0``); and 1-, 50- and 200-turn requests
    with ``--no-spool`` (answers after the commit), whose turns/s follow the turns in
    flight, a group commit's cost being mostly fixed; then bench.serve_start (restart to
    ready, the first turn's lag, other keys' lag beside maximum-size turns)."""
    from bench.serve import bench_serve

    names = ("turns_per_s", "ack_p50_ms", "ack_p95_ms", "ack_to_searchable_p50_s",
             "ack_to_searchable_p95_s", "commits_published_within_1s", "search_load_p50_ms",
             "search_idle_after_p50_ms", "search_searchers_alone_p50_ms",
             "mean_turns_per_commit")
    short = min(seconds, 15.0)

    def run(**options: Any) -> dict[str, Any]:
        figures = bench_serve(short, embed=embed, **options)
        return {name: figures[name] for name in names}

    out = bench_serve(seconds, embed=embed)
    out["by_request_size"] = {str(size): run(per_request=size) for size in (1, 200)}
    # The server's lag bound holds answers under this load; without it, the spool answers
    # as fast as it decides and the time until searchable grows instead.
    out["unbounded_lag"] = run(max_lag=0.0)
    out["without_spool"] = {str(size): run(per_request=size, spool=False)
                            for size in (1, 50, 200)}
    # The live path's edges: a restart after kill -9 with a spooled backlog, the first turn
    # after a start, and other keys' turns while one key sends maximum-size turns.
    from bench.serve_start import bench_serve_start

    out["start_and_long_texts"] = bench_serve_start(short, embed=embed)
    return out


def bench_http_search_section(rows: int) -> dict[str, Any]:
    """User-scope search through a real server on the ``rows``-row scale lake, end to end."""
    from bench.http_search import bench_http_search

    return bench_http_search(rows, cache=CACHE)


def scale_paper_section(results: dict[str, Any]) -> dict[str, Any]:
    """The 10^9-row paragraph (bench/results/scale-1e9.md) from this run's 1M figures."""
    from bench.scale_paper import write

    return write(results)


def plot(results: dict[str, Any]) -> list[str]:
    """PNG plots of the figures people read: recall by k, latency by arm, the service's
    throughput by request size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.plots import latency_bars

    made: list[str] = []
    if "locomo" in results:
        # the questions (all ten conversations), then the same questions in other words
        panels = [(results["locomo"][v], f"LoCoMo recall@k ({v} records)")
                  for v in ("minimal", "rich")]
        if "locomo_reworded" in results:
            panels += [(results["locomo_reworded"][v]["all"], f"reworded questions ({v})")
                       for v in ("minimal", "rich")]
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), sharey=True)
        for ax, (by_generator, title) in zip(axes, panels, strict=True):
            for gen, recalls in by_generator.items():
                ks = [int(k) for k in recalls]
                ax.plot(ks, list(recalls.values()), marker="o", label=gen)
            ax.set_title(title)
            ax.set_xlabel("k")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("recall")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(RESULTS / "locomo_recall.png", dpi=110)
        made.append("locomo_recall.png")
    if "locomo_long" in results:
        made.append(_locomo_long_plot(results["locomo_long"], plt))
    if "relevance" in results:
        made.append(_relevance_plot(results["relevance"], plt))
    if "codes" in results:
        made.append(_codes_plot(results["codes"], plt))
    if margins := _margin_rows(results):
        made.append(_margins_plot(margins, plt))
    if "passages_cost_100k" in results:
        made.append(_passages_cost_plot(results["passages_cost_100k"], plt))
    if "many_tenants" in results:
        made.append(_many_tenants_plot(results["many_tenants"], plt))
    if "ingest_100k" in results:
        # Runs without the machine's CPU-seconds (not Linux) have no place on this plot.
        runs = [r for r in results["ingest_100k"]["runs"] if r["machine_cpu_s"] is not None]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter([r["machine_cpu_s"] for r in runs], [r["turns_per_s"] for r in runs])
        ax.axhline(INGEST_TARGET, color="grey", linestyle="--", label="target")
        ax.set_xlabel("whole-machine CPU-s during the run (same work: more = slower machine)")
        ax.set_ylabel("turns/s")
        ax.set_title("ingest of 100k demo turns, embeddings off, one point per run")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(RESULTS / "ingest_runs.png", dpi=110)
        made.append("ingest_runs.png")
    if "by_request_size" in results.get("serve", {}):
        made.append(_serve_plot(results["serve"], plt))
    scale_keys = [k for k in results if k.startswith("scale_") and k != "scale_1e9"]
    if scale_keys:
        fig, ax = plt.subplots(figsize=(12, 4.5))
        labels, p50, p95 = [], [], []
        for key in scale_keys:
            for arm, lat in results[key].items():
                if isinstance(lat, dict) and "p50_ms" in lat:  # not the build seconds
                    labels.append(f"{key[6:]} {arm}")
                    p50.append(lat["p50_ms"])
                    p95.append(lat["p95_ms"])
        latency_bars(ax, labels, p50, p95, title="search latency (query embedding excluded)")
        ax.tick_params(axis="x", labelrotation=40)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
        fig.tight_layout()
        # named by the lakes it draws: the quick run's (100k) and the full run's (1M) each
        # keep their own, as their reports show them
        sizes = "_".join(dict.fromkeys(k[6:].split("_")[0] for k in scale_keys))
        name = f"search_latency_{sizes}.png"
        fig.savefig(RESULTS / name, dpi=110)
        made.append(name)
    return made


def _serve_plot(figures: dict[str, Any], plt: Any) -> str:
    """Turns/s and the time until searchable by turns per request: a group commit's cost is
    mostly fixed, so throughput follows the turns in flight, and the indexer's lag with it."""
    sizes = {int(n): f for n, f in figures["by_request_size"].items()}
    sizes[int(figures["turns_per_request"])] = figures
    ordered = sorted(sizes)
    committed = {int(n): f for n, f in figures.get("without_spool", {}).items()}
    after = sorted(committed)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(ordered, [sizes[n]["turns_per_s"] for n in ordered], marker="o",
              label="answered from the spool")
    if after:
        left.plot(after, [committed[n]["turns_per_s"] for n in after], marker="s",
                  linestyle=":", label="answered after the commit (--no-spool)")
    left.axhline(2000, color="grey", linestyle="--", label="target (--no-embed)")
    left.set_xscale("log")
    left.set_xlabel("turns per request (8 recording clients, 4 searching)")
    left.set_ylabel("turns/s recorded")
    left.legend()
    def seconds(value: float | None, scale: float = 1.0) -> float:
        return math.nan if value is None else value / scale  # no sample: a gap in the line

    right.plot(ordered, [seconds(sizes[n]["ack_to_searchable_p95_s"]) for n in ordered],
               marker="o", label="ack → searchable p95")
    right.plot(ordered, [seconds(sizes[n]["ack_p50_ms"], 1000) for n in ordered], marker="o",
               label="ack p50")
    if after:
        right.plot(after, [seconds(committed[n]["ack_to_searchable_p95_s"]) for n in after],
                   marker="s", linestyle=":", label="ack → searchable p95, --no-spool")
        right.plot(after, [seconds(committed[n]["ack_p50_ms"], 1000) for n in after],
                   marker="s", linestyle=":", label="ack p50, --no-spool")
    right.axhline(1.0, color="grey", linestyle="--", label="target (searchable)")
    right.set_xscale("log")
    right.set_xlabel("turns per request")
    right.set_ylabel("s")
    right.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle("turnlake serve on loopback, 2 cores")
    fig.tight_layout()
    fig.savefig(RESULTS / "serve_by_request_size.png", dpi=110)
    return "serve_by_request_size.png"


def _passages_cost_plot(figures: dict[str, Any], plt: Any) -> str:
    """Search p50 on the text-like scale lake against the same lake with a share of its
    answers long (passage vectors), per scope and arm, each the mean of the alternated runs,
    with the ratio over each pair."""
    pairs = [(scope, arm) for scope in ("user", "tenant") for arm in ("hybrid", "semantic")]
    means = {lake: [float(np.mean(figures[f"{lake}/{scope}/{arm}_p50_ms"])) for scope, arm in pairs]
             for lake in ("plain", "long")}
    x = np.arange(len(pairs))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(x - 0.2, means["plain"], 0.4, label="no long rows")
    ax.bar(x + 0.2, means["long"], 0.4,
           label=f"{figures['long_share']:.0%} of answers long ({figures['passages']:,} passages)")
    for i, (plain, long) in enumerate(zip(means["plain"], means["long"], strict=True)):
        ax.annotate(f"×{long / plain:.2f}", (x[i] + 0.2, long), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(x, [f"{scope} scope\n{arm}" for scope, arm in pairs])
    ax.set_ylabel("p50 ms (query embedding excluded)")
    ax.set_title(f"what passage vectors cost a search, {figures['rows']:,} rows")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(RESULTS / "passages_cost.png", dpi=110)
    return "passages_cost.png"


def _many_tenants_plot(figures: dict[str, Any], plt: Any) -> str:
    """What a user's search pays for the other tenants of a lake of many: the index check a
    search makes (its tenant's pointers) against a whole-lake one, and the first search after
    another tenant's write against a whole-lake status re-read (what each search paid
    before); and a live writer's index step of one turn there."""
    check, after = figures["check"], figures["after_write"]
    rows = [("check before a search:\nthe whole lake (before)", check["whole_lake_ms"]),
            ("check before a search:\nits tenant's indexes", check["one_tenant_ms"]),
            ("after another tenant's write:\nevery status re-read (before)",
             after["whole_lake_reread_ms"]),
            ("after another tenant's write:\nthe whole first search", after["search_ms"]),
            ("a search, the lake at rest", figures["search_p50_ms"])]
    colours = ["#bbbbbb", "C0", "#bbbbbb", "C0", "C2"]
    if "live_index_step_ms" in figures:
        rows.append(("a live writer's index step\n(one turn recorded)",
                     figures["live_index_step_ms"]))
        colours.append("C1")
    fig, ax = plt.subplots(figsize=(8, 0.75 * len(rows) + 0.6))
    y = np.arange(len(rows))[::-1]
    ax.barh(y, [ms for _, ms in rows], color=colours)
    for yi, (_, ms) in zip(y, rows, strict=True):
        ax.annotate(f"{ms:.3g} ms", (ms, yi), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_yticks(y, [label for label, _ in rows], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(right=max(ms for _, ms in rows) * 3)  # room for the largest bar's label
    ax.set_xlabel("ms (median; log scale)")
    ax.set_title(f"a lake of {figures['tenants']} tenants ({figures['partitions']:,} "
                 "partitions): one user's search, and a live index step", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(RESULTS / "many_tenants.png", dpi=110)
    return "many_tenants.png"


def _locomo_long_plot(figures: dict[str, Any], plt: Any, split: str = "report") -> str:
    """Recall@k on the split not tuned on, per generator, for LoCoMo made long and its mixed
    variant, LoCoMo's questions and reworded ones; where the long rows were also cut to the
    model's first window, that fusion is drawn dashed beside the one over passages."""
    panels = [(name, title) for name, title in (
        ("passages", "long turns"), ("passages_reworded", "long turns, reworded"),
        ("passages_mixed", "long beside short"),
        ("passages_mixed_reworded", "long beside short, reworded")) if name in figures]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), sharey=True,
                             squeeze=False)
    for ax, (name, title) in zip(axes[0], panels, strict=True):
        for gen in ("semantic", "lexical", "fused"):
            recalls = figures[name][split][gen]
            ax.plot([int(k) for k in recalls], list(recalls.values()), marker="o", label=gen)
        cut = figures.get(name.replace("passages", "truncated"))
        if cut is not None:
            recalls = cut[split]["fused"]
            ax.plot([int(k) for k in recalls], list(recalls.values()), marker="s",
                    linestyle="--", label="fused, rows cut to one window")
        ax.set_title(title)
        ax.set_xlabel("k")
        ax.set_xticks([int(k) for k in figures[name][split]["fused"]])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"recall ({split} split)")
    axes[0][0].legend()
    fig.suptitle("LoCoMo made long: sessions joined in runs of 16 turns")
    fig.tight_layout()
    fig.savefig(RESULTS / "locomo_long_recall.png", dpi=110)
    return "locomo_long_recall.png"


# (section, key, label) of every history whose fused-against-best-arm margins are plotted
_MARGIN_HISTORIES = (
    ("locomo", "minimal_margins", "LoCoMo, minimal records"),
    ("locomo", "rich_margins", "LoCoMo, rich records"),
    ("locomo_reworded", "minimal_margins", "reworded, minimal"),
    ("locomo_reworded", "rich_margins", "reworded, rich"),
    ("locomo_long", "passages_margins", "long turns"),
    ("locomo_long", "passages_reworded_margins", "long turns, reworded"),
    ("locomo_long", "passages_mixed_margins", "long beside short"),
    ("locomo_long", "passages_mixed_reworded_margins", "long beside short, reworded"),
)


def _margin_rows(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, margins per split) of each history the results hold margins for."""
    return [(label, results[section][key]) for section, key, label in _MARGIN_HISTORIES
            if key in results.get(section, {})]


def _margins_plot(rows: list[tuple[str, dict[str, Any]]], plt: Any) -> str:
    """Fused recall@k minus the best generator's alone, with 95 % paired bootstrap intervals,
    per history, on the split tuned on and the one not: a bar crossing 0 is a difference the
    questions cannot tell from none."""
    splits = [s for s in ("tune", "report") if all(s in margins for _, margins in rows)]
    fig, axes = plt.subplots(1, len(splits), figsize=(6 * len(splits), 0.55 * len(rows) + 1.6),
                             sharey=True, squeeze=False)
    ks = list(rows[0][1][splits[0]])
    for ax, split in zip(axes[0], splits, strict=True):
        for j, k in enumerate(ks):
            at = [i + (j - (len(ks) - 1) / 2) * 0.22 for i in range(len(rows))]
            m = [margins[split][k] for _, margins in rows]
            diff = [x["fused_minus_arm"] for x in m]
            ax.errorbar(diff, at, xerr=[[d - x["low"] for d, x in zip(diff, m, strict=True)],
                                        [x["high"] - d for d, x in zip(diff, m, strict=True)]],
                        fmt="o", markersize=4, capsize=2, label=f"recall@{k}")
        ax.axvline(0.0, color="grey", linestyle="--")
        ax.set_yticks(range(len(rows)), [label for label, _ in rows])
        ax.set_xlabel("fused minus the best generator alone")
        ax.set_title(f"{split} split")
        ax.grid(alpha=0.3, axis="x")
    axes[0][0].invert_yaxis()  # the first history on top (the axes share it: invert once)
    axes[0][-1].legend(fontsize="small")
    fig.suptitle("Fusion against its best single generator, 95 % paired bootstrap intervals")
    fig.tight_layout()
    fig.savefig(RESULTS / "fusion_margins.png", dpi=110)
    return "fusion_margins.png"


def _relevance_plot(figures: dict[str, Any], plt: Any) -> str:
    """Empty answers per kind of query and split: LoCoMo questions should never come back
    empty (false-empty), no-match queries always (true-empty); and, where the reworded
    questions were measured, what the floor costs recall on the report split."""
    splits = [s for s in ("tune", "report") if s in figures]
    kinds = sorted(figures[splits[0]]["true_empty_by_kind"])
    # figures of a run before the reworded questions were measured have no such bar
    reworded = all("reworded" in figures[s] for s in splits)
    labels = ["LoCoMo\nquestions", *(["reworded\nquestions"] if reworded else []), *kinds]
    fig, axes = plt.subplots(1, 2 if reworded else 1, figsize=(14 if reworded else 9, 4),
                             squeeze=False, gridspec_kw={"width_ratios": [3, 2]}
                             if reworded else None)
    ax = axes[0][0]
    width = 0.8 / len(splits)
    for i, split in enumerate(splits):
        f = figures[split]
        shares = [f["false_empty_rate"],
                  *([f["reworded"]["false_empty_rate"]] if reworded else []),
                  *(f["true_empty_by_kind"][k] for k in kinds)]
        ax.bar([x + i * width for x in range(len(labels))], shares, width, label=split)
    ax.set_xticks([x + width * (len(splits) - 1) / 2 for x in range(len(labels))], labels)
    ax.set_ylabel("share of queries with no hit")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Relevance floor {figures[splits[0]]['floor']}: empty answers")
    ax.legend()
    if reworded:
        cost = axes[0][1]
        split = splits[-1]
        for name, f in (("LoCoMo questions", figures[split]),
                        ("reworded questions", figures[split]["reworded"])):
            for key, style in (("recall_no_floor", "--"), ("recall_floor", "-")):
                ks = [int(k) for k in f[key]]
                cost.plot(ks, list(f[key].values()), linestyle=style, marker="o",
                          label=f"{name}, {'no floor' if style == '--' else 'floor'}")
        cost.set_xticks(ks)
        cost.set_xlabel("k")
        cost.set_ylabel(f"recall ({split} split)")
        cost.set_title("what the floor costs recall")
        cost.grid(alpha=0.3)
        cost.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(RESULTS / "relevance_floor.png", dpi=110)
    return "relevance_floor.png"


def _codes_plot(figures: dict[str, Any], plt: Any) -> str:
    """Per kind of code probe (bench.codes), the share the default floor answers right: a code
    the history holds found first, one of the same shape it does not hold left empty."""
    from bench.codes import KINDS, NONE_HELD

    kinds = list(figures)
    fig, ax = plt.subplots(figsize=(15, 4))
    bars = ax.bar(range(len(kinds)), [figures[k]["right"] for k in kinds],
                  color=["tab:blue" if k in NONE_HELD else "tab:green" for k in kinds])
    ax.bar_label(bars, [f"{figures[k]['right']:.0%} of {figures[k]['probes']}" for k in kinds])
    ax.set_xticks(range(len(kinds)), [KINDS.get(k, k) for k in kinds], fontsize="small")
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("share answered right")
    ax.set_title("Codes on the demo lake at the default floor: held ones found first, absent "
                 "ones empty", fontsize="medium")
    fig.tight_layout()
    fig.savefig(RESULTS / "codes_floor.png", dpi=110)
    return "codes_floor.png"


def report(results: dict[str, Any], plots: list[str], mode: str) -> str:
    """The Markdown report."""
    lines = [f"# turnlake benchmarks ({mode})", "",
             f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on: `{json.dumps(results['machine'])}`",
             ""]
    for key, value in results.items():
        if key == "machine":
            continue
        lines += [f"## {key}", "", "```json", json.dumps(value, indent=2), "```", ""]
    lines += [f"![{p}]({p})" for p in plots]
    paper = RESULTS / "scale-1e9.md"
    if mode == "full" and "scale_1e9" in results and paper.exists():
        lines += ["", paper.read_text()]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the selected benchmarks, print each figure as it lands, save the report."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    mode = "full" if args.full else "quick"
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "" if mode == "quick" else "-full"
    saved = RESULTS / f"results{suffix}.json"
    # --only reruns some sections and keeps the others' last figures.
    results: dict[str, Any] = (json.loads(saved.read_text()) if args.only and saved.exists()
                               else {})
    results["machine"] = machine()
    plan: list[tuple[str, Any]] = [
        ("ingest_100k", lambda: bench_ingest(100_000)),
        ("embedding", lambda: bench_embedding(1000 if mode == "quick" else 4000)),
        ("query_embedding", bench_query_embedding),
        # ONNX Runtime vs PyTorch in one run, and vector reuse (issue #25).
        ("embedding_runtimes", bench_embedding_runtimes),
        ("locomo", bench_locomo),
        ("longmemeval",
         lambda: bench_longmemeval(None if mode == "full" else QUICK_LME_QUESTIONS)),
        ("locomo_reworded", bench_locomo_reworded),
        ("locomo_long", bench_locomo_long),
        ("relevance", bench_relevance),
        # codes the demo lake holds against codes of the same shape it does not
        ("codes", bench_codes),
        ("scale_100k", lambda: bench_scale(100_000, 300)),
        ("scale_100k_clustered", lambda: bench_scale(100_000, 300, "clustered")),
        # what long rows' passage vectors cost a search (issue #22, MaxP)
        ("passages_cost_100k", lambda: bench_passages_cost(100_000, 300)),
        ("ann_recall", lambda: bench_ann_recall(50_000 if mode == "quick" else 200_000)),
        ("purge_1pct", lambda: bench_purge_section(1_000_000)),
        ("segments", lambda: bench_segments_section(10_000 if mode == "quick" else 50_000)),
        ("serve", lambda: bench_serve_section(15 if mode == "quick" else 60)),
        ("http_search_100k", lambda: bench_http_search_section(100_000)),
        # what one user's search pays for the lake's other tenants
        ("many_tenants", lambda: bench_tenants_section(300)),
        ("recall_hook", lambda: bench_recall_section(2000 if mode == "quick" else 10_000, 30)),
    ]
    if mode == "full":
        plan.append(("scale_1m", lambda: bench_scale(1_000_000, 300)))
        # text-like vectors: what HNSW, and so tenant scope, does on real embeddings
        plan.append(("scale_1m_clustered", lambda: bench_scale(1_000_000, 300, "clustered")))
        # Not in --quick: three builds plus two Ray start-ups take over a minute even at 100k.
        plan.append(("ray_build_100k", lambda: bench_ray_section(100_000)))
        plan.append(("ray_build_1m", lambda: bench_ray_section(1_000_000)))
        plan.append(("serve_embed", lambda: bench_serve_section(60, embed=True)))
        # Last: the 10^9 paper reads the figures measured above.
        plan.append(("scale_1e9", lambda: scale_paper_section(results)))
    from bench.locomo import MissingEvalData

    for name, run in plan:
        if args.only and name not in args.only:
            continue
        t = time.perf_counter()
        try:
            results[name] = run()
        except MissingEvalData as exc:  # the other sections still report
            results.setdefault("skipped", {})[name] = str(exc)
            print(f"{name}: skipped, {exc}", flush=True)
            continue
        print(f"{name} ({time.perf_counter() - t:.0f}s): {json.dumps(results[name])}",
              flush=True)
    plots = plot(results)
    (RESULTS / f"results{suffix}.json").write_text(json.dumps(results, indent=2))
    (RESULTS / f"report{suffix}.md").write_text(report(results, plots, mode))
    print(f"saved bench/results/report{suffix}.md")


if __name__ == "__main__":
    main()
