"""Ten million rows on this machine: the scale lake built, then searched by processes of their own.

``python -m bench.scale_10m [--rows N] [--queries Q]`` builds the text-like scale lake of
``N`` content rows (bench/scale.py, ``clustered`` vectors, generated as the 1M one is; reused
when already built) and searches it with bench/side_by_side.py — each scope in a fresh search
process whose peak RSS is read at its end. Prints one JSON object (build seconds, rows, bytes
on disk, user- and tenant-scope p50/p95 and peak RSS, the machine's load) and writes it to
``bench/results/scale-<N>.json``.

At 10M rows the lake takes ~26 GB of disk and its build ~1 hour of both cores of an idle
2-core machine (1M: ~2.6 GB, ingest ~5 min and index build ~1–14 min, by load); progress is on
stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.scale import CLUSTERED_MODEL, build_scale_lake, scale_lake_dir
from lake.store import LakeStore
from lake.tables import Table
from pipeline.index_build import build_indexes

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"
RESULTS = ROOT / "bench" / "results"
ROWS = 10_000_000


def built(rows: int, cache: Path) -> tuple[Path, dict[str, Any]]:
    """The scale lake of ``rows`` rows (built unless there), with the seconds its build took
    (kept beside it, so a reused lake still reports them)."""
    root = scale_lake_dir(cache, rows, "clustered")
    sidecar = root.with_name(f"{root.name}.build.json")
    print(f"scale lake of {rows:,} rows at {root}: "
          f"{'reused' if (root / 'indexes').exists() else 'building'}", file=sys.stderr,
          flush=True)
    if (root / "indexes").exists() and not sidecar.exists():
        # a build stopped part way through its indexes (the tables were written before them):
        # bring every partition's index up to date instead of taking the lake as built
        print("the last build stopped before it finished: completing its indexes",
              file=sys.stderr, flush=True)
        started = time.perf_counter()
        build_indexes(LakeStore(root), model=CLUSTERED_MODEL)
        sidecar.write_text(json.dumps({"ingest_s": None, "resumed": True,
                                       "index_build_s": time.perf_counter() - started}))
    _, ingest_s, build_s = build_scale_lake(root, rows, vectors="clustered")
    if ingest_s or build_s:
        sidecar.write_text(json.dumps({"ingest_s": ingest_s, "index_build_s": build_s}))
    seconds = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    seconds["rows"] = LakeStore(root).read(Table.CONTENT_ROWS, columns=["row_id"]).num_rows
    print(f"built: {json.dumps(seconds)}", file=sys.stderr, flush=True)
    return root, seconds


def searched(lake: Path, queries: int, rounds: int = 1) -> dict[str, Any]:
    """bench.side_by_side's figures for this checkout alone on ``lake``: per scope p50/p95
    and the search process's peak RSS, and the lake's bytes on disk."""
    argv = [sys.executable, "-m", "bench.side_by_side", "--lake", str(lake), "--tree",
            str(ROOT), "--queries", str(queries), "--rounds", str(rounds)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise SystemExit(f"search of {lake} failed:\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{"):])
    prefix = f"{ROOT.name}:"
    return {key.removeprefix(prefix): value for key, value in out.items()}


def run(rows: int, queries: int, cache: Path = CACHE) -> dict[str, Any]:
    """Build (or reuse) and search the lake; the figures as one JSON-ready dict."""
    started = time.perf_counter()
    lake, seconds = built(rows, cache)
    figures = searched(lake, queries)
    where = machine()
    return {"rows_asked": rows, "cpu": where["cpu"], "cores": where["cpus"], **seconds,
            **figures, "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    """Parse options, run, print and save the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.scale_10m")
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help="where the lake is built (needs ~2.6 GB a million rows)")
    args = parser.parse_args(argv)
    if args.rows < 1000:
        print(f"error: --rows must be at least 1000, not {args.rows}", file=sys.stderr)
        return 2
    result = run(args.rows, args.queries, args.cache)
    text = json.dumps(result, indent=1)
    print(text)
    if args.cache == CACHE:
        (RESULTS / f"scale-{args.rows}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
