"""The ``completion_status`` of turn_logs rows written before the column existed, filled from
each row's own stored TurnLog payload: a step of ``turnlake maintain``.

A row's payload is the record as it was ingested, so its ``completion.status`` (absent in the
canonical JSON when it is "completed", which is also what records written before the field
existed mean) is the status the ingest would have written. Partitions holding such rows are
rewritten whole, one commit each (``replace_where`` on the partition), under the writer lock
maintenance holds; a partition without one is never touched, so a second run finds nothing
and a run killed between partitions is finished by the next. The rewritten files change the
partition's fingerprint, so its index reads as stale and maintenance's index step rebuilds it.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import polars as pl
import pyarrow as pa

from lake.store import LakeStore
from lake.tables import TURN_LOGS, Table

Partition = tuple[str, str]
Progress = Callable[[str, int, int], None]
__all__ = ["fill_completion_status", "status_of", "unrecorded"]


def status_of(payload: str) -> str:
    """The completion status a stored TurnLog payload records ("completed" when absent)."""
    completion = orjson.loads(payload).get("completion") or {}
    status = completion.get("status") if isinstance(completion, dict) else None
    return status if isinstance(status, str) and status else "completed"


def unrecorded(store: LakeStore, tenant: str | None = None) -> dict[Partition, int]:
    """Rows without a ``completion_status`` per (tenant, month) partition (of ``tenant``
    only, when given); read from the narrow columns alone."""
    if not store.exists(Table.TURN_LOGS):
        return {}
    scan = store.scan(Table.TURN_LOGS).filter(pl.col("completion_status").is_null())
    if tenant is not None:
        scan = scan.filter(pl.col("tenant") == tenant)
    counts = scan.group_by("tenant", "month").agg(pl.len().alias("rows")).collect()
    return {(t, m): int(n) for t, m, n in counts.iter_rows()}


def fill_completion_status(store: LakeStore, *, tenant: str | None = None,
                           on_partition: Progress | None = None) -> int:
    """Fill every missing ``completion_status`` (of ``tenant``'s partitions, when given)
    from the row's payload, a partition a commit; returns the rows filled. The caller holds
    the writer lock."""
    todo = sorted(unrecorded(store, tenant).items())
    filled = 0
    for done, ((part_tenant, month), missing) in enumerate(todo, start=1):
        rows = store.read_partition(Table.TURN_LOGS, part_tenant, month,
                                    columns=TURN_LOGS.names)
        column = rows.schema.get_field_index("completion_status")
        statuses = [status if status is not None else status_of(payload)
                    for status, payload in zip(rows.column(column).to_pylist(),
                                               rows.column("payload").to_pylist(), strict=True)]
        rows = rows.set_column(column, "completion_status", pa.array(statuses, pa.string()))
        # tenant and month are validated ids (letters, digits, '_' and '-'): safe in SQL.
        store.replace_where(Table.TURN_LOGS, rows,
                            f"tenant = '{part_tenant}' AND month = '{month}'")
        filled += missing
        if on_partition is not None:
            on_partition(f"turn_logs {part_tenant}/{month}", done, len(todo))
    return filled
