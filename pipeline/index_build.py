"""``turnlake index build``: rebuild the indexes of partitions whose tables changed.

Planning, locking and reporting live here; *where* the partitions are built is pluggable (a
:class:`PartitionBuilder`): in this process one after another (the default), or one Ray task
each (``pipeline.ray_jobs.build_on_ray``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Protocol

from lake.faults import NO_FAULTS, Faults
from lake.index.manifest import PartitionManifest, drop_partition
from lake.index.partition import build_partition
from lake.index.status import partition_statuses
from lake.locks import index_lock
from lake.store import LakeStore
from lake.tables import Table


@dataclass
class BuildReport:
    """What an index build did."""

    built: list[PartitionManifest] = field(default_factory=list)
    skipped_fresh: int = 0
    dropped: list[str] = field(default_factory=list)


class PartitionBuilder(Protocol):
    """Builds and publishes partitions at fixed table versions, yielding each manifest as its
    partition is live (in any order). Closing the generator must stop the remaining builds
    before it returns: the caller releases the index lock right after."""

    def __call__(self, store: LakeStore, partitions: Sequence[tuple[str, str]], *,
                 content_version: int, logs_version: int,
                 model: str | None) -> Generator[PartitionManifest, None, None]: ...


def build_in_process(store: LakeStore, partitions: Sequence[tuple[str, str]], *,
                     content_version: int, logs_version: int,
                     model: str | None) -> Generator[PartitionManifest, None, None]:
    """The default builder: each partition in turn, in this process."""
    for tenant, month in partitions:
        yield build_partition(store, tenant, month, content_version=content_version,
                              logs_version=logs_version, model=model)


def build_indexes(store: LakeStore, *, model: str | None, full: bool = False,
                  tenant: str | None = None, month: str | None = None,
                  partitions: set[tuple[str, str]] | None = None,
                  on_partition: Callable[[str, int, int], None] | None = None,
                  faults: Faults = NO_FAULTS,
                  builder: PartitionBuilder = build_in_process) -> BuildReport:
    """Build every stale or missing partition (all of them with ``full``) at the current
    table versions; drop indexes of partitions that no longer have rows.

    ``model`` is the embedding model whose vectors the semantic index uses (None: none).
    ``on_partition(name, done, total)`` reports progress; ``faults`` marks the write boundary
    after each published partition (``index.after_partition``) for crash tests. ``builder``
    decides where partitions are built; the lock and the plan stay in this process.
    """
    # Versions and statuses are read under the lock: a build that waited for another one
    # then sees what that build published and skips partitions it left fresh.
    with index_lock(store.root):
        return _build(store, model, full, tenant, month, partitions, on_partition, faults,
                      builder)


def _build(store: LakeStore, model: str | None, full: bool, tenant: str | None,
           month: str | None, partitions: set[tuple[str, str]] | None,
           on_partition: Callable[[str, int, int], None] | None, faults: Faults,
           builder: PartitionBuilder) -> BuildReport:
    report = BuildReport()
    content_version = store.version(Table.CONTENT_ROWS)
    logs_version = store.version(Table.TURN_LOGS)
    statuses = partition_statuses(store)
    todo = []
    for part, status in sorted(statuses.items()):
        if (tenant and part[0] != tenant) or (month and part[1] != month):
            continue
        if partitions is not None and part not in partitions and status.freshness != "orphan":
            continue
        if status.freshness == "orphan":
            drop_partition(store.root, *part)
            report.dropped.append(status.name)
        elif full or status.freshness in ("stale", "missing"):
            todo.append(part)
        else:
            report.skipped_fresh += 1
    if content_version is None or logs_version is None:
        return report
    built = builder(store, todo, content_version=content_version, logs_version=logs_version,
                    model=model)
    # closing(): a failure here must stop builds still running elsewhere before the lock goes.
    with closing(built):
        for i, manifest in enumerate(built, start=1):
            report.built.append(manifest)
            faults.hit("index.after_partition")
            if on_partition is not None:
                on_partition(f"{manifest.tenant}/{manifest.month}", i, len(todo))
    report.built.sort(key=lambda m: (m.tenant, m.month))  # parallel builders finish in any order
    return report
