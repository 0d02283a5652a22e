"""`python -m bench.ingest_run FILE LAKE WORKERS`: one timed ingest, as JSON on stdout.

bench.run starts this afresh for every ingest it measures, so that each run pays what a
`turnlake ingest` pays (a new fork server for its workers) and none inherits a warm one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def machine_busy_s() -> float | None:
    """CPU-seconds every core of the machine has spent busy since boot (Linux), else None."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]  # idle and iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    from pipeline.workers import keep_freed_pages

    keep_freed_pages()  # as `turnlake ingest` does, before deltalake and polars load
    from lake.settings import Settings
    from pipeline.ingest import Ingestor

    source, lake, workers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    busy = machine_busy_s()
    t = time.perf_counter()
    report = Ingestor(Settings(lake=lake), workers=workers).ingest_paths([source])
    seconds = time.perf_counter() - t
    cpu = machine_busy_s()
    print(json.dumps({
        "turns": report.accepted, "rows": report.rows_written, "seconds": round(seconds, 2),
        "turns_per_s": round(report.accepted / seconds),
        "machine_cpu_s": None if busy is None or cpu is None else round(cpu - busy, 2)}))


if __name__ == "__main__":
    main()
