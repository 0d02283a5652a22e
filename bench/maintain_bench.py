"""Maintenance benchmark: many single-turn appends into one partition, then ``maintain``.

Run: ``.venv/bin/python -m bench.maintain_bench [rows [appends]]`` (default 20000 content
rows, 500 appends, at most as many as the partition has turns: they are its own turns,
committed again under new ids). The base lake is the purge benchmark's synthetic one (four
tenants, twelve months, one commit per table); each append then commits one turn (two
content rows and its TurnLog) into the newest partition of the first tenant, as a host
recording turns live would. Printed: data files and log entries of that partition before
and after, the seconds ``maintain`` took, and how long a scan of the partition takes before
and after (median of five, as a ratio: the machine is shared).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from bench.purge_bench import synthetic_lake
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.index_build import build_indexes
from pipeline.maintain import maintain


def _scan_s(store: LakeStore, part: tuple[str, str]) -> float:
    expr = (ds.field("tenant") == part[0]) & (ds.field("month") == part[1])
    times = []
    for _ in range(5):
        started = time.perf_counter()
        store.read(Table.CONTENT_ROWS, columns=["row_id", "text"], filter=expr)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _renamed(rows: pa.Table, n: int) -> pa.Table:
    """The rows of one turn, moved to a conversation and turn id of their own."""
    conv = pa.array([f"live-{n}"] * rows.num_rows)
    out = rows.set_column(rows.schema.get_field_index("conversation_id"), "conversation_id",
                          conv)
    if "row_id" in out.column_names:
        ids = pc.binary_join_element_wise(conv, out.column("row_id"), pa.scalar("."))
        out = out.set_column(out.schema.get_field_index("row_id"), "row_id", ids)
    return out


def bench_maintain(rows: int, appends: int) -> dict[str, Any]:
    """Build the lake, append ``appends`` single turns, maintain; sizes and timings (s)."""
    with tempfile.TemporaryDirectory(prefix="turnlake-maintain-") as tmp:
        lake = Path(tmp) / "lake"
        figures: dict[str, Any] = synthetic_lake(lake, rows, expired_share=0.0)
        store = LakeStore(lake)
        part = max(p for p in store.file_stats(Table.CONTENT_ROWS) if p[0] == "acme")
        key = (part[0], part[1])
        build_indexes(store, model=None, partitions={key})
        expr = (ds.field("tenant") == part[0]) & (ds.field("month") == part[1])
        logs = store.read(Table.TURN_LOGS, filter=expr).slice(0, appends)
        content = store.read(Table.CONTENT_ROWS, filter=expr)
        started = time.perf_counter()
        for n in range(logs.num_rows):
            turn = logs.slice(n, 1)
            mine = pc.and_(pc.equal(content.column("conversation_id"),
                                    turn["conversation_id"][0]),
                           pc.equal(content.column("turn_id"), turn["turn_id"][0]))
            store.append(Table.CONTENT_ROWS, _renamed(content.filter(mine), n))
            store.append(Table.TURN_LOGS, _renamed(turn, n))
        figures["append_s"] = round(time.perf_counter() - started, 2)
        figures["appends"] = logs.num_rows
        figures["files_before"] = store.file_stats(Table.CONTENT_ROWS)[part].files
        figures["log_before"] = store.log_files(Table.CONTENT_ROWS)
        figures["scan_before_s"] = _scan_s(store, key)
        started = time.perf_counter()
        report = maintain(Settings(lake=lake, embedding_model="hashing-64"), grace_s=0)
        figures["maintain_s"] = round(time.perf_counter() - started, 2)
        figures["indexes_rebuilt"] = len(report.indexes)
        figures["files_after"] = store.file_stats(Table.CONTENT_ROWS)[part].files
        figures["log_after"] = store.log_files(Table.CONTENT_ROWS)
        figures["on_disk_after"] = sum(1 for p in store.path(Table.CONTENT_ROWS).glob(
            f"tenant={part[0]}/month={part[1]}/*.parquet"))
        figures["scan_after_s"] = _scan_s(store, key)
        figures["partition"] = "/".join(part)
    return figures


def main() -> None:
    """Print the maintenance figures (default 20000 rows, 500 single-turn appends)."""
    args = [int(a) for a in sys.argv[1:]]
    rows = args[0] if args else 20_000
    appends = args[1] if len(args) > 1 else 500
    f = bench_maintain(rows, appends)
    print(f"{f['appends']} single-turn appends into {f['partition']} of a {f['rows']:,}-row "
          f"lake ({f['append_s']:.1f} s): content_rows partition {f['files_before']} data "
          f"files, {f['log_before']} log entries")
    print(f"maintain: {f['maintain_s']:.2f} s ({f['indexes_rebuilt']} index partition "
          f"rebuilt) -> {f['files_after']} data file(s) ({f['on_disk_after']} on disk), "
          f"{f['log_after']} log entries")
    print(f"partition scan: {f['scan_before_s'] * 1000:.1f} ms before, "
          f"{f['scan_after_s'] * 1000:.1f} ms after "
          f"({f['scan_before_s'] / f['scan_after_s']:.1f}x faster)")


if __name__ == "__main__":
    main()
