"""Freshness of partition indexes: which partitions are fresh, stale, or not indexed at all."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from lake.errors import IndexError_, LakeError
from lake.index.manifest import (
    PartitionManifest,
    list_partitions,
    pointer_stamps,
    prune_cache,
    read_current,
)
from lake.store import LakeStore
from lake.tables import Table

Freshness = Literal["fresh", "stale", "missing", "orphan"]


class Unset:
    """The type of :data:`UNSET`: "no model given", as None means "no model"."""


UNSET = Unset()


@dataclass(frozen=True)
class PartitionStatus:
    """One partition's index state against the current tables."""

    tenant: str
    month: str
    freshness: Freshness
    manifest: PartitionManifest | None
    content_version: int | None

    @property
    def name(self) -> str:
        """``tenant/month``."""
        return f"{self.tenant}/{self.month}"

    @property
    def rebuild_command(self) -> str:
        """The CLI command that brings this partition up to date."""
        return f"turnlake index build --tenant {self.tenant} --month {self.month}"


class StatusCache:
    """Partition statuses, recomputed only when a table's latest version changes.

    Against an object-store lake every check costs requests, so it is made at most once per
    ``remote_poll_s``; a local lake is checked on every call (a few directory listings).
    """

    def __init__(self, store: LakeStore, *, remote_poll_s: float = 2.0) -> None:
        self._store = store
        self._key: tuple[int | None, int | None, tuple[tuple[str, str, str], ...]] | None = None
        self._value: dict[tuple[str, str], PartitionStatus] = {}
        self._poll_s = remote_poll_s if store.root.remote else 0.0
        self._checked = float("-inf")
        self._removals: dict[tuple[str, int | None], bool] = {}

    def get(self, *, fresh: bool = False) -> dict[tuple[str, str], PartitionStatus]:
        """Statuses by (tenant, month); ``fresh`` checks the lake now, whenever it last did."""
        now = time.monotonic()
        if not fresh and self._key is not None and now - self._checked < self._poll_s:
            return self._value
        self._checked = now
        key = (self._store.latest_version(Table.CONTENT_ROWS),
               self._store.latest_version(Table.TURN_LOGS),
               tuple(pointer_stamps(self._store.root)))
        if key != self._key:
            self._value = partition_statuses(self._store)
            self._key = key
            prune_cache(self._store.root, {part: set(s.manifest.live_segments)
                                           for part, s in self._value.items() if s.manifest})
        return self._value

    def may_have_removed(self, manifest: PartitionManifest) -> bool:
        """Whether turns that the index built as ``manifest`` holds may be gone from the lake
        (or had their expiry changed) since, as of the TurnLog version of the last :meth:`get`.

        A turn leaves the TurnLog table only with the data file that held it (Delta files are
        never edited), so while every TurnLog file the build read is still live, the index
        serves no removed turn: a stale partition that only gained files (a live writer ahead
        of its indexer) needs no per-search check of its hits. True when it cannot be told
        (no version seen yet, or the build's version is no longer readable)."""
        if self._key is None:
            return True
        memo = (manifest.build_id, self._key[1])
        known = self._removals.get(memo)
        if known is None:
            if len(self._removals) > 4096:  # old builds and versions are never asked again
                self._removals.clear()
            known = self._removals[memo] = not _logs_only_grew(self._store, manifest,
                                                               self._key[1])
        return known


def partition_statuses(store: LakeStore, *, model: str | Unset | None = UNSET,
                       ) -> dict[tuple[str, str], PartitionStatus]:
    """Compare every partition's live manifest with the tables' current file sets.

    Given ``model`` (the embedding model's name, None for none), a partition built for another
    model is stale too: its semantic index holds none of this model's vectors."""
    content_version = store.version(Table.CONTENT_ROWS)
    content = store.partition_fingerprints(Table.CONTENT_ROWS)
    logs = store.partition_fingerprints(Table.TURN_LOGS)
    out: dict[tuple[str, str], PartitionStatus] = {}
    for part in sorted(set(content) | set(list_partitions(store.root))):
        try:
            current = read_current(store.root, *part)
        except IndexError_:
            # Reported as missing, so that search says so and `index build` rebuilds it
            # instead of every reader and builder failing on the unreadable pointer.
            current = None
        manifest = current[1] if current else None
        freshness: Freshness
        if part not in content:
            freshness = "orphan"
        elif manifest is None:
            freshness = "missing"
        elif (manifest.content_fingerprint == content[part]
              and manifest.logs_fingerprint == logs.get(part, "")
              and (isinstance(model, Unset) or manifest.requested_model == model)):
            freshness = "fresh"
        else:
            freshness = "stale"
        out[part] = PartitionStatus(part[0], part[1], freshness, manifest, content_version)
    return out


def _logs_only_grew(store: LakeStore, manifest: PartitionManifest, logs_version: int | None
                    ) -> bool:
    """Whether the partition's TurnLog files at ``logs_version`` include every file of the
    version its index was built from."""
    part = (manifest.tenant, manifest.month)
    try:
        built = store.partition_files(Table.TURN_LOGS, *part, manifest.logs_version)
        now = store.partition_files(Table.TURN_LOGS, *part, logs_version)
    except LakeError:
        return False  # the build's version is no longer readable: nothing says what changed
    return built <= now
