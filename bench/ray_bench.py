"""Partition-parallel index builds on Ray: wall time with 1 and 2 Ray workers, and in process.

Run: ``.venv/bin/python -m bench.ray_bench [rows ...]`` (content rows; default 100000). The lake
is the cached scale lake of ``bench.scale`` (demo texts, random 384-d vectors); its tables are
copied to a scratch folder so the cached indexes stay untouched, then every partition is built
(``--full``) three times at the same table versions: in this process, on a local Ray instance
with 1 CPU, and on one with 2 CPUs. Ray's start-up is timed apart from the build; the build
time includes starting the worker processes, which a job pays on every fresh instance.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.scale import MODEL, build_scale_lake
from lake.index.manifest import PartitionManifest
from lake.store import LakeStore
from lake.tables import Table
from pipeline.index_build import BuildReport, build_indexes
from pipeline.ray_jobs import LOCAL, build_on_ray, ray_session

CACHE = Path(__file__).parent / ".cache"
WORKERS = (1, 2)


def _same_output(a: BuildReport, b: BuildReport) -> bool:
    """Whether two builds made the same partitions from the same rows and versions."""
    def key(m: PartitionManifest) -> tuple[Any, ...]:
        d = asdict(m)
        return tuple(d[k] for k in ("tenant", "month", "content_version", "logs_version",
                                    "content_fingerprint", "row_count", "embedded_rows",
                                    "semantic_kind"))
    return [key(m) for m in a.built] == [key(m) for m in b.built]


def _partition_seconds(report: BuildReport) -> float:
    return round(sum(m.build_seconds for m in report.built), 1)


def bench_ray_build(rows: int, *, cache: Path = CACHE) -> dict[str, Any]:
    """Seconds to build every partition of a ``rows``-row lake in process and on Ray."""
    settings, _, _ = build_scale_lake(cache / f"scale-{rows}", rows)
    scratch = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        shutil.copytree(Path(settings.lake) / "tables", scratch / "lake" / "tables")
        store = LakeStore(scratch / "lake")
        load = os.getloadavg()[0]
        for table in (Table.CONTENT_ROWS, Table.TURN_LOGS):
            store.read(table)  # warm the page cache so the first build is not the only cold one
        t = time.perf_counter()
        local = build_indexes(store, model=MODEL, full=True)
        in_process = time.perf_counter() - t
        sizes = sorted(m.row_count for m in local.built)
        out: dict[str, Any] = {
            "rows": store.read(Table.CONTENT_ROWS, columns=["row_id"]).num_rows,
            "partitions": len(local.built),
            "partition_rows_min_max": [sizes[0], sizes[-1]],
            "semantic_kinds": sorted({m.semantic_kind for m in local.built}),
            "in_process_s": round(in_process, 1),
            # Summed per-partition build times: over build_s, how many partitions ran at once.
            "in_process_partition_s_sum": _partition_seconds(local),
            # Other work on the machine skews every figure: keep the load beside them.
            "load_avg_at_start": round(load, 2),
        }
        for cpus in WORKERS:
            t = time.perf_counter()
            with ray_session(LOCAL, num_cpus=cpus):
                started = time.perf_counter()
                report = build_indexes(store, model=MODEL, full=True, builder=build_on_ray)
                built = time.perf_counter()
            if not _same_output(report, local):
                raise RuntimeError(f"the Ray build with {cpus} worker(s) differs from the "
                                   "in-process build")
            out[f"ray_{cpus}_worker{'s' if cpus > 1 else ''}"] = {
                "start_s": round(started - t, 1), "build_s": round(built - started, 1),
                "partition_s_sum": _partition_seconds(report)}
        one, two = out["ray_1_worker"]["build_s"], out["ray_2_workers"]["build_s"]
        out["speedup_2_vs_1_workers"] = round(one / two, 2)
        out["speedup_2_workers_vs_in_process"] = round(in_process / two, 2)
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    """Print the figures for each size given on the command line."""
    for arg in sys.argv[1:] or ["100000"]:
        print(json.dumps(bench_ray_build(int(arg))), flush=True)


if __name__ == "__main__":
    main()
