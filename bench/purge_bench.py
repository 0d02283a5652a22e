"""Purge benchmark: time ``turnlake retention purge`` removing 1 % of a synthetic lake.

Run: ``.venv/bin/python -m bench.purge_bench [rows ...]`` (content rows; default 100000).
The lake is written straight through ``LakeStore.append`` (no embedding): two content rows per
turn, ten turns per conversation, four tenants over twelve months. The oldest 1 % of turns are
expired, as a uniform TTL would leave them, and their partitions' indexes are built
beforehand so that the purge pays for rebuilding them, as it would in a real lake.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import CONTENT_ROWS, TIMELINES, TURN_LOGS, Table
from lake.timelines import TIMELINE_SCHEMA_ID
from pipeline.index_build import build_indexes
from pipeline.retention import purge

TENANTS = ("acme", "globex", "initech", "umbrella")
TURNS_PER_CONVERSATION = 10
SPAN_DAYS = 360


def _column(values: Any, type_: pa.DataType) -> pa.Array:
    return pa.array(values, type=type_)


def synthetic_lake(root: Path, rows: int, *, expired_share: float = 0.01,
                   now: datetime | None = None) -> dict[str, Any]:
    """Write a lake of ``rows`` content rows; the oldest ``expired_share`` of turns expired."""
    now = now or datetime.now(UTC)
    turns = max(1, rows // 2)
    expired = max(1, int(turns * expired_share))
    i = np.arange(turns)
    conv = i // TURNS_PER_CONVERSATION
    tenant = np.array(TENANTS)[conv % len(TENANTS)]
    start_us = int((now - timedelta(days=SPAN_DAYS)).timestamp() * 1e6)
    started = start_us + (i * (SPAN_DAYS * 86_400e6 / turns)).astype(np.int64)
    ended = started + 40_000_000
    expires = np.where(i < expired, int((now - timedelta(days=1)).timestamp() * 1e6),
                       int((now + timedelta(days=365)).timestamp() * 1e6))
    months = [datetime.fromtimestamp(s / 1e6, UTC).strftime("%Y-%m") for s in started.tolist()]
    conv_ids = [f"c-{c}" for c in conv.tolist()]
    turn_ids = [f"t-{n % TURNS_PER_CONVERSATION:04d}" for n in i.tolist()]
    users = [f"u-{c % 500}" for c in conv.tolist()]
    ts = pa.timestamp("us", tz="UTC")
    logs = pa.table({
        "tenant": tenant, "month": months, "app": ["desk"] * turns, "agent": ["bot"] * turns,
        "user_id": users, "conversation_id": conv_ids, "turn_id": turn_ids,
        "writer": ["minimal"] * turns, "started_at": _column(started, ts),
        "ended_at": _column(ended, ts), "ordinal": (i % TURNS_PER_CONVERSATION + 1),
        "expires_at": _column(expires, ts), "ingested_at": _column(ended, ts),
        "batch_id": ["bench"] * turns, "blocks": ["[]"] * turns,
        "payload": [f'{{"turn":{n}}}' for n in i.tolist()],
    })
    logs = _fill(logs, TURN_LOGS)
    both = np.repeat(i, 2)
    role = np.tile(np.array(["user", "assistant"]), turns)
    texts = [f"turn {n} {'asks about' if r == 'user' else 'answers on'} widget {n % 997} "
             f"and the forecast sheet of week {n % 52}" for n, r in zip(both.tolist(),
                                                                      role.tolist(), strict=True)]
    content = _fill(pa.table({
        "tenant": np.repeat(tenant, 2), "month": np.repeat(np.array(months), 2),
        "row_id": [f"{conv_ids[n]}.{turn_ids[n]}.{r}.0"
                   for n, r in zip(both.tolist(), role.tolist(), strict=True)],
        "app": ["desk"] * (2 * turns), "agent": ["bot"] * (2 * turns),
        "user_id": np.repeat(np.array(users), 2),
        "conversation_id": np.repeat(np.array(conv_ids), 2),
        "turn_id": np.repeat(np.array(turn_ids), 2), "role": role,
        "seq": np.zeros(2 * turns, dtype=np.int32), "ts": _column(np.repeat(started, 2), ts),
        "turn_at": _column(np.repeat(started, 2), ts), "text": texts,
        "expires_at": _column(np.repeat(expires, 2), ts),
        "embedding_status": ["pending"] * (2 * turns), "batch_id": ["bench"] * (2 * turns),
    }), CONTENT_ROWS)
    store = LakeStore(root)
    store.append(Table.CONTENT_ROWS, content)
    store.append(Table.TURN_LOGS, logs)
    store.append(Table.TIMELINES, _timelines(logs, now))
    doomed = {(t, m) for t, m, n in zip(tenant.tolist(), months, i.tolist(), strict=True)
              if n < expired}
    build_indexes(store, model=None, partitions=doomed)
    return {"rows": content.num_rows, "turns": turns, "expired_turns": expired,
            "partitions": len(set(zip(tenant.tolist(), months, strict=True))),
            "affected_partitions": len(doomed)}


def _timelines(logs: pa.Table, now: datetime) -> pa.Table:
    """One conv.timeline.v1 row per conversation, as refresh_timelines would write it."""
    frame = pl.from_arrow(logs)
    assert isinstance(frame, pl.DataFrame)
    rows = frame.sort("started_at").group_by(["tenant", "conversation_id"]).agg(
        pl.col("app").first(), pl.col("agent").first(), pl.col("user_id").first(),
        pl.col("started_at").min(), pl.col("ended_at").max().alias("last_activity_at"),
        pl.col("turn_id").last().alias("last_turn_id"),
        pl.len().cast(pl.Int32).alias("turn_count"), pl.col("expires_at").max(),
    ).with_columns(pl.lit(TIMELINE_SCHEMA_ID).alias("schema"), pl.lit("[]").alias("blocks"),
                   pl.lit(now).alias("updated_at"))
    return _fill(rows.to_arrow(compat_level=pl.CompatLevel.oldest()), TIMELINES)


def _fill(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Add the schema's missing columns as nulls, in schema order."""
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names
               else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def bench_purge(rows: int) -> dict[str, Any]:
    """Build a ``rows``-row lake, purge its expired 1 %, and return sizes and timings (s)."""
    with tempfile.TemporaryDirectory(prefix="turnlake-purge-") as tmp:
        lake = Path(tmp) / "lake"
        started = time.perf_counter()
        figures = synthetic_lake(lake, rows)
        figures["build_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        report = purge(Settings(lake=lake, embedding_model="hashing-64"), actor="bench")
        figures["purge_s"] = round(time.perf_counter() - started, 2)
        assert report.outcome is not None
        figures["purged_rows"] = report.plan.counts["content_rows"]
        figures["steps_s"] = {k: round(v, 2) for k, v in report.outcome.seconds.items()}
        left = LakeStore(lake).read(Table.CONTENT_ROWS, columns=["tenant"]).num_rows
        figures["rows_left"] = left
    return figures


def main() -> None:
    """Print the purge figures for each size given (default 100000 rows)."""
    for rows in [int(a) for a in sys.argv[1:]] or [100_000]:
        f = bench_purge(rows)
        print(f"purge {f['purged_rows']:,} of {f['rows']:,} content rows "
              f"({f['expired_turns']:,} turns, {f['affected_partitions']}/{f['partitions']} "
              f"partitions): {f['purge_s']:.2f} s (lake built in {f['build_s']:.1f} s)")
        print("  steps: " + ", ".join(f"{k} {v:.2f}s" for k, v in f["steps_s"].items()))


if __name__ == "__main__":
    main()
