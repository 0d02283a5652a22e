"""Freshness of partition indexes: which partitions are fresh, stale, or not indexed at all."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal

from lake.errors import IndexUnavailable, LakeError
from lake.index.manifest import (
    PartitionManifest,
    list_partitions,
    pointer_stamps,
    prune_cache,
    read_current,
)
from lake.refs import validate_id
from lake.store import LakeStore, Partition
from lake.tables import Table

Freshness = Literal["fresh", "stale", "missing", "orphan"]
_MAX_VIEWS = 10_000  # tenants' views kept; past it they start again (a view is cheap to make)


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
    """Partition statuses, looked at again only when the lake changed where they are read.

    A search reads one tenant's partitions, so :meth:`of_tenant` checks the tables' latest
    versions and that tenant's index pointers only, and when they changed reads that tenant's
    manifests only: in a lake of many tenants a search does not look at every other tenant's
    partitions (bench.tenants_bench, 300 tenants and 1,012 partitions: the whole-lake check
    cost 7–9 ms a search, and its re-read after any write 81–88 ms). :meth:`get` checks the
    whole lake.

    Against an object-store lake every check costs requests, so each view (one tenant's, or
    the whole lake's) is checked at most once per ``remote_poll_s``; a local lake is checked
    on every call. ``fresh`` reads the view's statuses again, whatever the check says (a
    pointer rewritten twice within the file system's clock tick keeps its stamp).
    """

    def __init__(self, store: LakeStore, *, remote_poll_s: float = 2.0) -> None:
        self._store = store
        self._poll_s = remote_poll_s if store.root.remote else 0.0
        self._views: dict[str | None, _View] = {}  # by tenant; None: the whole lake
        self._logs_version: int | Unset | None = UNSET  # as of the last check
        self._removals: dict[tuple[str, int | None], bool] = {}

    @property
    def logs_version(self) -> int | Unset | None:
        """The TurnLog table's version as of the last check (UNSET before any; None when the
        table does not exist)."""
        return self._logs_version

    def get(self, *, fresh: bool = False) -> dict[tuple[str, str], PartitionStatus]:
        """Statuses by (tenant, month); ``fresh`` reads them now."""
        return self._view(None, fresh).statuses

    def of_tenant(self, tenant: str, *, fresh: bool = False) -> list[PartitionStatus]:
        """One tenant's statuses, by month; ``fresh`` reads them now. Raises RefError for
        a tenant that is not an id."""
        validate_id(tenant, "tenant")
        return self._view(tenant, fresh).by_month

    def may_have_removed(self, manifest: PartitionManifest) -> bool:
        """Whether turns that the index built as ``manifest`` holds may be gone from the lake
        (or had their expiry changed) since, as of the TurnLog version of the last check.

        A turn leaves the TurnLog table only with the data file that held it (Delta files are
        never edited), so while every TurnLog file the build read is still live, the index
        serves no removed turn: a stale partition that only gained files (a live writer ahead
        of its indexer) needs no per-search check of its hits. True when it cannot be told
        (no version seen yet, or the build's version is no longer readable)."""
        logs_version = self._logs_version
        if isinstance(logs_version, Unset):
            return True
        memo = (manifest.build_id, logs_version)
        known = self._removals.get(memo)
        if known is None:
            if len(self._removals) > 4096:  # old builds and versions are never asked again
                self._removals.clear()
            known = self._removals[memo] = not _logs_only_grew(self._store, manifest,
                                                               logs_version)
        return known

    def _view(self, tenant: str | None, fresh: bool) -> _View:
        now = time.monotonic()
        held = self._views.get(tenant)
        if not fresh and held is not None and now - held.checked < self._poll_s:
            return held
        stamps = tuple(pointer_stamps(self._store.root, tenant=tenant))
        key = (self._store.latest_version(Table.CONTENT_ROWS),
               self._store.latest_version(Table.TURN_LOGS), stamps)
        self._logs_version = key[1]
        if not fresh and held is not None and held.key == key:
            held.checked = now
            return held
        statuses = _statuses(self._store, [(t, m) for t, m, _ in stamps],
                             among=None if tenant is None else lambda part: part[0] == tenant)
        view = _View(key, now, statuses)
        # What this check saw changed may lie in the other views too: they look again on
        # their next call, whenever they last did.
        views: dict[str | None, _View] = {} if tenant is None or len(
            self._views) > _MAX_VIEWS else {t: v for t, v in self._views.items() if t is not None}
        views[tenant] = view
        self._views = views  # replaced whole: another thread may be reading the old one
        prune_cache(self._store.root, {part: set(s.manifest.live_segments)
                                       for part, s in statuses.items() if s.manifest},
                    tenant=tenant)
        return view


class _View:
    """One check's statuses (one tenant's, or the whole lake's) and what they were read at."""

    def __init__(self, key: tuple[int | None, int | None, tuple[tuple[str, str, str], ...]],
                 checked: float, statuses: dict[Partition, PartitionStatus]) -> None:
        self.key = key
        self.checked = checked
        self.statuses = statuses
        self.by_month = [statuses[part] for part in sorted(statuses)]


def partition_statuses(store: LakeStore, *, model: str | Unset | None = UNSET,
                       partitions: Collection[Partition] | None = None,
                       ) -> dict[tuple[str, str], PartitionStatus]:
    """Compare every partition's live manifest with the tables' current file sets.

    Given ``model`` (the embedding model's name, None for none), a partition built for another
    model is stale too: its semantic index holds none of this model's vectors. Given
    ``partitions``, only those are compared, with every orphan (an index whose partition has
    no row left): what a build of a few partitions needs, without reading every manifest of
    a lake of many (~75 ms a live index step at 1,012 partitions)."""
    if partitions is None:
        return _statuses(store, list_partitions(store.root), model=model)
    content = store.partition_fingerprints(Table.CONTENT_ROWS)
    wanted = set(partitions)

    def compared(part: Partition) -> bool:
        return part in wanted or part not in content

    return _statuses(store, list_partitions(store.root, among=compared), model=model,
                     among=compared)


def _statuses(store: LakeStore, indexed: list[Partition], *,
              model: str | Unset | None = UNSET,
              among: Callable[[Partition], bool] | None = None,
              ) -> dict[Partition, PartitionStatus]:
    """The statuses of the partitions the content table or ``indexed`` name (only those
    ``among`` accepts, when given), each against its live manifest."""
    content_version = store.version(Table.CONTENT_ROWS)
    content = store.partition_fingerprints(Table.CONTENT_ROWS)
    logs = store.partition_fingerprints(Table.TURN_LOGS)
    parts = {part for part in set(content) | set(indexed) if among is None or among(part)}
    out: dict[Partition, PartitionStatus] = {}
    for part in sorted(parts):
        manifest = _read_manifest(store, part)
        freshness: Freshness
        if part not in content:
            freshness = "orphan"
        elif manifest is None:
            freshness = "missing"
        elif (manifest.content_fingerprint == content[part]
              and manifest.logs_fingerprint == logs.get(part, "")
              and not manifest.deferred_content
              and (isinstance(model, Unset) or manifest.requested_model == model)):
            freshness = "fresh"
        else:
            freshness = "stale"
        out[part] = PartitionStatus(part[0], part[1], freshness, manifest, content_version)
    return out


def _read_manifest(store: LakeStore, part: Partition) -> PartitionManifest | None:
    """The partition's live manifest, None when it has no index or an unreadable pointer:
    reported as missing, so that search says so and `index build` rebuilds it instead of
    every reader and builder failing on the unreadable pointer."""
    try:
        current = read_current(store.root, *part)
    except IndexUnavailable:
        return None
    return current[1] if current else None


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
