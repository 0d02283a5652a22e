"""``turnlake embed --backfill``: embed every content row still ``pending`` or ``failed``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow.dataset as ds

from lake.embedding.base import Embedder
from lake.embedding.rows import FAILED, PENDING, embed_rows
from lake.locks import writer_lock
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table


@dataclass
class BackfillReport:
    """What a backfill did."""

    embedded: int = 0
    failed: int = 0
    partitions: set[tuple[str, str]] = field(default_factory=set)
    error: str | None = None


def backfill(settings: Settings, embedder: Embedder, *,
             on_progress: Callable[[int, int], None] | None = None) -> BackfillReport:
    """Embed rows whose status is pending or failed, partition by partition (one commit each).

    ``on_progress(done, total)`` reports rows embedded so far.
    """
    store = LakeStore(settings.lake)
    report = BackfillReport()
    if not store.exists(Table.CONTENT_ROWS):
        return report
    with writer_lock(store.root, timeout_s=settings.lock_timeout_s, job="turnlake embed"):
        todo = store.read(Table.CONTENT_ROWS,
                          filter=ds.field("embedding_status").isin([PENDING, FAILED]))
        total, done = todo.num_rows, 0
        if total == 0:
            return report
        parts = sorted(set(zip(todo["tenant"].to_pylist(), todo["month"].to_pylist(),
                               strict=True)))
        for tenant, month in parts:
            chunk = todo.filter((ds.field("tenant") == tenant) & (ds.field("month") == month))
            base = done

            def progress(n: int, base: int = base) -> None:
                if on_progress is not None:
                    on_progress(base + n, total)

            rows, outcome = embed_rows(chunk, embedder, batch_size=settings.embed_batch_size,
                                       on_progress=progress)
            if outcome.embedded:
                ids = ", ".join(repr(r) for r in rows.column("row_id").to_pylist())
                store.replace_where(Table.CONTENT_ROWS, rows,
                                    f"tenant = '{tenant}' AND month = '{month}' "
                                    f"AND row_id IN ({ids})")
                report.partitions.add((tenant, month))
            report.embedded += outcome.embedded
            report.failed += outcome.failed
            report.error = outcome.error or report.error
            done += chunk.num_rows
            if outcome.error:
                break  # the provider is down: later partitions would fail the same way
    return report
