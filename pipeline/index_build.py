"""``turnlake index build`` / ``index compact``: bring partition indexes up to date.

Planning, locking and reporting live here; *where* full builds run is pluggable (a
:class:`PartitionBuilder`): in this process one after another (the default), or one Ray task
each (``pipeline.ray_jobs.build_on_ray``). A partition whose tables only grew since its build
gets a delta segment of the new rows (lake.index.delta), in this process: its cost depends on
the rows added. Everything else is rebuilt whole, and so is a partition whose segments pass
the compaction thresholds (:class:`Compaction`) — in a background thread, while later deltas
keep being published, when the caller (a live writer) gives :class:`BackgroundRebases`.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Protocol

from lake.batches import BatchCommitter, RecoveryReport, indexable_versions
from lake.errors import ConcurrentWriteError
from lake.faults import NO_FAULTS, Faults
from lake.filestore import FileStore
from lake.index.deferred import DeferredSize, deferred_size, publish_deferred, write_deferred
from lake.index.delta import append_partition, merge_deltas
from lake.index.manifest import PartitionManifest, drop_partition, publish, read_current
from lake.index.partition import build_partition, write_partition
from lake.index.rebase import publish_base, write_base
from lake.index.status import partition_statuses
from lake.locks import index_lock, writer_lock
from lake.settings import Settings
from lake.store import LakeStore

log = logging.getLogger(__name__)


# What indexing a row costs beside its text, counted as bytes of text: its record in the
# row file, its ids and times, its vector, its entries in the lexical index's fields.
ROW_COST_BYTES = 256
# A delta is merged again only while the deltas after it weigh at least this share of it:
# a large delta (a deferred 9 MB turn) is not indexed again by each merge of the short turns
# published after it, and each merge that does take a delta at least grows it by half again.
MERGE_SHARE = 0.5


def segment_costs(manifest: PartitionManifest) -> list[int]:
    """What indexing each live segment again costs, base first: its text bytes plus
    ``ROW_COST_BYTES`` a row (its rows alone in manifests older than the text bytes; the
    thresholds compare segments of one manifest, so either unit holds)."""
    rows, texts = manifest.segment_rows, manifest.segment_text_bytes
    if len(texts) != len(rows):
        return list(rows)
    return [t + ROW_COST_BYTES * r for t, r in zip(texts, rows, strict=True)]


@dataclass(frozen=True)
class Compaction:
    """When a partition's segments are merged (from :class:`Settings`). Segments are weighed
    by what indexing them again costs (:func:`segment_costs`: their bytes of text, not their
    rows), so short turns published next to a few very long ones do not index the long
    ones again and again: a new base comes when the deltas outweigh a share of the base
    (:meth:`rebase_due`), and a merge of too many deltas keeps a delta that outweighs those
    after it."""

    max_segments: int = Settings.index_compact_segments
    max_delta_ratio: float = Settings.index_compact_ratio

    @classmethod
    def of(cls, settings: Settings) -> Compaction:
        """The thresholds a lake's settings give."""
        return cls(settings.index_compact_segments, settings.index_compact_ratio)

    def due(self, manifest: PartitionManifest) -> bool:
        """Whether the partition's segments have passed a threshold."""
        return self.rebase_due(manifest) or self.merge_due(manifest)

    def rebase_due(self, manifest: PartitionManifest,
                   deferred: DeferredSize | None = None) -> bool:
        """Whether the deltas outgrew the base: time for a new base (a full build). Past
        ``max_delta_ratio`` of the base, the deltas make one once they weigh the whole base,
        or once their light segments alone weigh that share of it. A heavy segment — past
        that share in bytes with few rows (a 9 MB turn) — otherwise waits: the k-th 9 MB turn
        does not index the k - 1 before it again, the bases grow geometrically and a byte of
        text is indexed a bounded number of times; the short turns published beside it do
        not bring it into a rebase before they outweigh the share themselves. ``deferred``:
        the rows the partition defers, which will be a delta once built (a rebase indexes
        them instead of that build)."""
        costs, rows = segment_costs(manifest), manifest.segment_rows
        deltas = list(zip(costs[1:], rows[1:], strict=False))
        if deferred is not None and deferred.rows:
            deltas.append((deferred.text_bytes + ROW_COST_BYTES * deferred.rows, deferred.rows))
        if not deltas:
            return False
        base = max(costs[0] if costs else 0, 1)
        share, share_rows = self.max_delta_ratio * base, self.max_delta_ratio * (
            rows[0] if rows else 0)
        total = sum(cost for cost, _ in deltas)
        if total <= share:
            return False
        light = sum(cost for cost, n in deltas if cost <= share or n > share_rows)
        return total >= base or light > share

    def rebase_for_deferred(self, store: LakeStore, manifest: PartitionManifest) -> bool:
        """Whether the rows ``manifest`` defers would make a new base due as soon as they
        were a delta: then a rebase, which indexes them with the base, is their build (a
        9 MB turn in a partition of short ones is indexed once, not in a segment first and
        again in the base after it)."""
        return bool(manifest.deferred_content) and self.rebase_due(
            manifest, deferred_size(store, manifest))

    def merge_due(self, manifest: PartitionManifest) -> bool:
        """Whether there are too many segments and some deltas can be merged (see
        :meth:`merge_start`). While the deltas stay small beside the base, they are merged
        into one delta (cost: those deltas), not rebuilt with the base."""
        return (len(manifest.live_segments) > self.max_segments
                and self.merge_start(manifest) is not None)

    def merge_start(self, manifest: PartitionManifest) -> int | None:
        """The number of the first segment a merge of too many deltas takes (it takes every
        segment from there on), or None when no merge of two or more deltas keeps to the rule:
        going back from the newest, a delta joins while the deltas after it weigh at least
        ``MERGE_SHARE`` of it. None leaves the partition with more segments than
        ``max_segments`` for now (a geometric run of sizes: a few more, never many)."""
        costs = segment_costs(manifest)
        start, after = len(costs) - 1, costs[-1] if costs else 0
        while start > 1 and after >= MERGE_SHARE * costs[start - 1]:
            start -= 1
            after += costs[start]
        return start if len(costs) - start >= 2 else None


@dataclass
class BuildReport:
    """What an index build did. ``built`` lists every partition published (full builds,
    delta segments and compactions alike); ``appended`` names those that got a delta segment
    and ``compacted`` those merged into one base segment."""

    built: list[PartitionManifest] = field(default_factory=list)
    skipped_fresh: int = 0
    dropped: list[str] = field(default_factory=list)
    appended: list[str] = field(default_factory=list)
    compacted: list[str] = field(default_factory=list)
    rebasing: list[str] = field(default_factory=list)  # rebased in the background meanwhile
    deferring: list[str] = field(default_factory=list)  # deferred rows built in the background
    # Selected partitions a compaction left alone for having no (readable) index: it merges
    # segments, it does not build a first one (``turnlake index build`` does).
    unindexed: list[str] = field(default_factory=list)

    @property
    def foreign_vectors(self) -> list[PartitionManifest]:
        """Built partitions holding rows embedded by another model than the one asked for:
        those rows are not searchable by meaning until a build with their model."""
        return [m for m in self.built if m.foreign_vectors]


class BackgroundRebases:
    """Rebases of a live writer's partitions, and builds of their deferred rows, each run in
    a thread of its own while the writer's index steps keep publishing delta segments (see
    lake.index.rebase and lake.index.deferred).

    ``serialize`` is the lock the writer's index steps hold (with the lake's index lock)
    while they run; a background build takes both to publish, so it never interleaves with
    one. A partition has one background build at a time: asked again while one runs,
    :meth:`start` does nothing, and once it is published the partition's deferred rows, if
    any are listed by then, are built next in the same thread (by a rebase when they
    outweigh the base: :meth:`Compaction.rebase_for_deferred` of ``compaction``, when
    given). ``defer_bytes`` is what the delta a deferred build publishes defers again (see
    :func:`build_indexes`). Only local lakes: an object-store lake's index lock is a lease
    of its own, and there :meth:`start` declines (the caller rebuilds in its step, as
    before)."""

    def __init__(self, store: LakeStore, *, model: str | None, serialize: threading.Lock,
                 faults: Faults = NO_FAULTS, defer_bytes: int | None = None,
                 compaction: Compaction | None = None) -> None:
        self._store = store
        self._compaction = compaction  # deferred rows that outweigh the base: a rebase
        self._model = model
        self._serialize = serialize
        self._faults = faults
        self.defer_bytes = defer_bytes
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], threading.Thread] = {}
        # How the builds ended: live, discarded (the partition changed under them), failed.
        self.published = 0
        self.discarded = 0
        self.failed = 0

    def start(self, begun: PartitionManifest, *, content_version: int,
              logs_version: int) -> bool:
        """Rebase the partition of ``begun`` (its live manifest) at the given table versions
        in the background; False when that cannot be done here (an object-store lake)."""
        return self._start(begun, lambda: self._rebase(begun, content_version, logs_version))

    def start_deferred(self, begun: PartitionManifest) -> bool:
        """Index the rows ``begun`` (the partition's live manifest) defers in the
        background; False when that cannot be done here (an object-store lake)."""
        return self._start(begun, lambda: self._deferred(begun))

    def _start(self, begun: PartitionManifest, job: Callable[[], bool]) -> bool:
        if self._store.root.remote:
            return False
        part = (begun.tenant, begun.month)
        with self._lock:
            running = self._running.get(part)
            if running is not None and running.is_alive():
                return True
            thread = threading.Thread(target=self._run, args=(part, job),
                                      name=f"turnlake-rebase-{begun.tenant}-{begun.month}",
                                      daemon=True)
            self._running[part] = thread
            thread.start()
        return True

    def _run(self, part: tuple[str, str], job: Callable[[], bool]) -> None:
        """Run ``job``, then build the rows the partition defers by then, until a build
        fails, is discarded or leaves nothing deferred."""
        while job():
            current = read_current(self._store.root, *part)
            if current is None or not current[1].deferred_content:
                return
            begun = current[1]
            job = (functools.partial(self._rebase, begun, begun.content_version,
                                     begun.logs_version)
                   if self._compaction is not None
                   and self._compaction.rebase_for_deferred(self._store, begun)
                   else functools.partial(self._deferred, begun))

    def _rebase(self, begun: PartitionManifest, content_version: int,
                logs_version: int) -> bool:
        try:
            base = write_base(self._store, begun, content_version=content_version,
                              logs_version=logs_version, model=self._model)
            with self._serialize, index_lock(self._store.root):
                published = publish_base(self._store, begun, base, model=self._model,
                                         faults=self._faults, defer_bytes=self.defer_bytes)
        except Exception:  # the partition keeps its segments; the next step tries again
            log.exception("background rebase of %s/%s failed", begun.tenant, begun.month)
            return self._ended(None, failed=True)
        return self._ended(published)

    def _deferred(self, begun: PartitionManifest) -> bool:
        try:
            built = write_deferred(self._store, begun, model=self._model)
            if built is None:
                return self._ended(None)
            self._faults.hit("index.deferred_written")
            with self._serialize, index_lock(self._store.root):
                published = publish_deferred(self._store, begun, built, model=self._model,
                                             defer_bytes=self.defer_bytes,
                                             faults=self._faults)
        except Exception:  # the rows stay deferred; the next step tries again
            log.exception("indexing the deferred rows of %s/%s failed", begun.tenant,
                          begun.month)
            return self._ended(None, failed=True)
        return self._ended(published)

    def _ended(self, published: PartitionManifest | None, *, failed: bool = False) -> bool:
        """Count how a build ended; True when it was published."""
        with self._lock:
            if failed:
                self.failed += 1
            elif published is None:
                self.discarded += 1
            else:
                self.published += 1
        return published is not None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the running builds; True when none is left running."""
        with self._lock:
            threads = list(self._running.values())
        for thread in threads:
            thread.join(timeout_s)
        return not any(thread.is_alive() for thread in threads)


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
                  builder: PartitionBuilder = build_in_process,
                  compaction: Compaction | None = Compaction(),
                  rebases: BackgroundRebases | None = None,
                  defer_bytes: int | None = None) -> BuildReport:
    """Bring every stale or missing partition up to date (rebuild all of them with ``full``)
    at the current table versions; drop indexes of partitions that no longer have rows.

    ``model`` is the embedding model whose vectors the semantic index uses (None: none); a
    partition built for another model is stale and rebuilt. A partition whose tables only
    grew gets a delta segment of the new rows; one whose segments then pass ``compaction``
    (None: never) is merged into one base segment. ``on_partition(name, done, total)``
    reports progress; ``faults`` marks the write boundary after each published partition
    (``index.after_partition``) for crash tests. ``builder`` decides where full builds run;
    the lock and the plan stay in this process. With ``rebases``, a partition whose deltas
    outgrew its base is rebased in the background (``report.rebasing``) instead of in this
    call, which returns once its delta is live; with ``defer_bytes`` too, an appended
    content file larger than that (one very long turn) is left out of the delta and indexed
    in the background (lake.index.deferred; the partition is stale until then) so that it
    does not hold the rows appended beside and after it. Without ``defer_bytes`` a
    partition's deferred rows are indexed in its delta.
    """
    # Versions and statuses are read under the lock: a build that waited for another one
    # then sees what that build published and skips partitions it left fresh.
    with index_lock(store.root):
        return _build(store, model, full, tenant, month, partitions, on_partition, faults,
                      builder, compaction, rebases,
                      defer_bytes if rebases is not None else None)


def _build_deferred(store: LakeStore, manifest: PartitionManifest,
                    rebases: BackgroundRebases | None, compaction: Compaction | None,
                    report: BuildReport) -> None:
    """Start the background build of the rows ``manifest`` (just published) defers: a
    rebase when, built as a delta, they would make one due at once (a 9 MB turn in a
    partition of short ones: indexed once, in the new base, not twice)."""
    if not manifest.deferred_content or rebases is None:
        return
    name = f"{manifest.tenant}/{manifest.month}"
    if compaction is not None and compaction.rebase_for_deferred(store, manifest) \
            and rebases.start(manifest, content_version=manifest.content_version,
                              logs_version=manifest.logs_version):
        report.rebasing.append(name)
    elif rebases.start_deferred(manifest):
        report.deferring.append(name)


def recover_if_idle(store: LakeStore) -> RecoveryReport | None:
    """Finish or roll back the batches a crashed writer left, when no writer holds the lake
    (None when there were none, or a writer is at work: its batch is in flight, not left).

    A batch left half-written keeps the partitions it touched stale (their tables hold its
    rows, which no index may serve until its TurnLogs exist), and only a writer recovers it;
    `index build` does it first, so that what it builds is fresh."""
    committer = BatchCommitter(store, FileStore(store.root))
    if not committer.pending():
        return None
    try:
        with writer_lock(store.root, timeout_s=0, job="turnlake index build"):
            return committer.recover()
    except ConcurrentWriteError:
        return None


def stale_partitions(store: LakeStore) -> set[tuple[str, str]]:
    """The indexed partitions whose tables changed since their index was built: what a job
    that finished or rolled back a crashed run's batch must index besides its own partitions
    (never-indexed partitions stay so)."""
    return {part for part, status in partition_statuses(store).items()
            if status.freshness == "stale"}


def compact_indexes(store: LakeStore, *, model: str | None, tenant: str | None = None,
                    month: str | None = None,
                    on_partition: Callable[[str, int, int], None] | None = None,
                    faults: Faults = NO_FAULTS) -> BuildReport:
    """Merge the segments of every indexed partition (of a tenant / month) that has more than
    one into a new base segment, at the current table versions, under the index lock.

    The new base is published by the same ``current.json`` swap as any build: until then the
    previous segments stay live, so a crash at any point leaves them searchable. A partition
    whose tables changed is brought up to date on the way; one with a single segment is left
    alone. Each partition keeps the embedding model it was built with (``model`` only for a
    build that recorded none): changing a partition's model is a rebuild (`index build`), and
    compaction run where another model is configured (maintenance from cron, say) must not
    drop every vector it holds.
    """
    with index_lock(store.root):
        report = BuildReport()
        content_version, logs_version = indexable_versions(store)
        if content_version is None or logs_version is None:
            return report
        statuses = partition_statuses(store)  # freshness of the tables, whatever the model
        todo = [part for part, s in sorted(statuses.items())
                if (not tenant or part[0] == tenant) and (not month or part[1] == month)
                and s.manifest is not None and s.freshness != "orphan"
                and (len(s.manifest.live_segments) > 1 or s.freshness == "stale")]
        for i, part in enumerate(todo, start=1):
            built = statuses[part].manifest
            assert built is not None  # todo holds indexed partitions only
            manifest = write_partition(store, *part, content_version=content_version,
                                       logs_version=logs_version,
                                       model=built.requested_model or model)
            faults.hit("index.compaction_written")  # the new base exists, the old is live
            publish(store.root, manifest)
            faults.hit("index.after_compaction")
            report.built.append(manifest)
            report.compacted.append(f"{part[0]}/{part[1]}")
            if on_partition is not None:
                on_partition(f"{part[0]}/{part[1]}", i, len(todo))
        report.unindexed = [s.name for part, s in statuses.items()
                            if s.freshness == "missing" and (not tenant or part[0] == tenant)
                            and (not month or part[1] == month)]
        report.skipped_fresh = sum(1 for part, s in statuses.items()
                                   if part not in todo and s.freshness == "fresh"
                                   and (not tenant or part[0] == tenant)
                                   and (not month or part[1] == month))
        return report


def _build(store: LakeStore, model: str | None, full: bool, tenant: str | None,
           month: str | None, partitions: set[tuple[str, str]] | None,
           on_partition: Callable[[str, int, int], None] | None, faults: Faults,
           builder: PartitionBuilder, compaction: Compaction | None,
           rebases: BackgroundRebases | None, defer_bytes: int | None) -> BuildReport:
    report = BuildReport()
    content_version, logs_version = indexable_versions(store)
    statuses = partition_statuses(store, model=model, partitions=partitions)
    todo: list[tuple[str, str]] = []
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
    done = 0

    def finished(manifest: PartitionManifest) -> None:
        nonlocal done
        done += 1
        report.built.append(manifest)
        faults.hit("index.after_partition")
        if on_partition is not None:
            on_partition(f"{manifest.tenant}/{manifest.month}", done, len(todo))

    rebuild: list[tuple[str, str]] = []
    for part in todo:
        manifest = statuses[part].manifest
        appended = None
        if not full and manifest is not None and statuses[part].freshness == "stale":
            appended = append_partition(store, manifest, content_version=content_version,
                                        logs_version=logs_version, model=model, faults=faults,
                                        defer_bytes=defer_bytes)
        if appended is not None and compaction is not None and not compaction.rebase_due(
                appended) and compaction.merge_due(appended):
            start = compaction.merge_start(appended)
            assert start is not None  # merge_due
            merged = merge_deltas(store, appended, content_version=content_version,
                                  logs_version=logs_version, model=model, faults=faults,
                                  defer_bytes=defer_bytes, start=start)
            if merged is not None:
                report.compacted.append(f"{part[0]}/{part[1]}")
                finished(merged)
                _build_deferred(store, merged, rebases, compaction, report)
                continue
        if appended is None:
            rebuild.append(part)
        elif compaction is not None and compaction.rebase_due(appended) \
                and rebases is not None and rebases.start(
                    appended, content_version=content_version, logs_version=logs_version):
            report.appended.append(f"{part[0]}/{part[1]}")
            report.rebasing.append(f"{part[0]}/{part[1]}")
            finished(appended)  # the rebase builds what it defers next
        elif compaction is not None and compaction.due(appended):
            rebuild.append(part)  # published already; the rebuild below merges its segments
            report.compacted.append(f"{part[0]}/{part[1]}")
        else:
            report.appended.append(f"{part[0]}/{part[1]}")
            finished(appended)
            _build_deferred(store, appended, rebases, compaction, report)
    built = builder(store, rebuild, content_version=content_version,
                    logs_version=logs_version, model=model)
    # closing(): a failure here must stop builds still running elsewhere before the lock goes.
    with closing(built):
        for manifest in built:
            finished(manifest)
    report.built.sort(key=lambda m: (m.tenant, m.month))  # parallel builders finish in any order
    return report
