"""Delta segments: index only what an append added to a partition (see lake.index.segments).

``append_partition`` compares the data files of the partition's two tables at the live
build's versions with those at the new versions. When files were only added, the added files
alone are read, joined and indexed as one new segment, published beside the live ones; the
cost depends on the rows added, not on the partition. Anything else (a file removed, a model
change, a TurnLog that arrived for rows committed earlier) returns None: the caller rebuilds.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa

from lake.errors import LakeError
from lake.faults import NO_FAULTS, Faults
from lake.index.manifest import (
    MANIFEST_FILE,
    PartitionManifest,
    local_build,
    local_segments,
    partition_dir,
    publish,
)
from lake.index.partition import (
    CONTENT_COLUMNS,
    LOG_COLUMNS,
    LiveRows,
    joined_rows,
    new_segment_id,
    segment_bytes,
    text_bytes,
    write_segment,
)
from lake.store import LakeStore, files_fingerprint
from lake.tables import Table


@dataclass(frozen=True)
class AppendPlan:
    """The data files an append added to a partition's two tables."""

    content_files: frozenset[str]
    log_files: frozenset[str]
    content_fingerprint: str  # of all the partition's files after the append
    logs_fingerprint: str


def plan_append(store: LakeStore, manifest: PartitionManifest, *, content_version: int,
                logs_version: int, model: str | None) -> AppendPlan | None:
    """What was appended to the partition since ``manifest``, or None when more than an append
    happened (or the old versions can no longer be read) and the partition must be rebuilt."""
    if manifest.requested_model != model or not manifest.segments:
        return None  # a model change, or a build from before segments existed
    part = (manifest.tenant, manifest.month)
    try:
        old_content = store.partition_files(Table.CONTENT_ROWS, *part, manifest.content_version)
        old_logs = store.partition_files(Table.TURN_LOGS, *part, manifest.logs_version)
    except LakeError:
        return None  # the log before a purge is gone: nothing says what changed since
    new_content = store.partition_files(Table.CONTENT_ROWS, *part, content_version)
    new_logs = store.partition_files(Table.TURN_LOGS, *part, logs_version)
    if not (old_content <= new_content and old_logs <= new_logs):
        return None
    return AppendPlan(new_content - old_content, new_logs - old_logs,
                      files_fingerprint(new_content) if new_content else "",
                      files_fingerprint(new_logs) if new_logs else "")


def append_partition(store: LakeStore, manifest: PartitionManifest, *, content_version: int,
                     logs_version: int, model: str | None, faults: Faults = NO_FAULTS,
                     defer_bytes: int | None = None) -> PartitionManifest | None:
    """Index what was appended to a partition since ``manifest`` as one delta segment and
    publish it; None when the partition needs a full rebuild instead.

    With ``defer_bytes`` (local lakes), added content files larger than that are left out,
    with the TurnLog files of their turns, and listed in the manifest to be indexed beside
    the caller (lake.index.deferred); without it, the files ``manifest`` defers are indexed
    in this segment too. The caller holds the index lock. ``faults`` marks
    ``index.after_delta_segment`` (the segment is written, not yet live) for crash tests."""
    started = time.perf_counter()
    plan = plan_append(store, manifest, content_version=content_version,
                       logs_version=logs_version, model=model)
    if plan is None:
        return None
    content_files, log_files = plan.content_files, plan.log_files
    deferred_content, deferred_logs = set(manifest.deferred_content), set(manifest.deferred_logs)
    if defer_bytes is not None and not store.root.remote:
        heavy, heavy_logs = deferrable(store, content_files, log_files, defer_bytes,
                                       content_version=content_version,
                                       logs_version=logs_version)
        content_files, log_files = content_files - heavy, log_files - heavy_logs
        deferred_content |= heavy
        deferred_logs |= heavy_logs
    elif deferred_content:  # what an earlier step deferred, indexed now
        content_files, log_files = content_files | deferred_content, log_files | deferred_logs
        deferred_content, deferred_logs = set(), set()
    content = store.read_files(Table.CONTENT_ROWS, content_files, columns=CONTENT_COLUMNS,
                               version=content_version)
    logs = store.read_files(Table.TURN_LOGS, log_files, columns=LOG_COLUMNS,
                            version=logs_version)
    live = joined_rows(content, logs, model)
    rows, dim, foreign = live.rows, live.dim, live.foreign
    read_seconds = time.perf_counter() - started
    if not _all_logs_matched(logs, rows) or (dim and manifest.dim and dim != manifest.dim):
        return None
    versions = replace(manifest, content_version=content_version, logs_version=logs_version,
                       content_fingerprint=plan.content_fingerprint,
                       logs_fingerprint=plan.logs_fingerprint,
                       deferred_content=sorted(deferred_content),
                       deferred_logs=sorted(deferred_logs))
    if rows.height == 0:
        # Only files without live rows (or none at all): the same segments cover the new
        # versions. A new build id still makes the new state live atomically.
        return _publish(store, replace(versions,
                                       foreign_vectors=manifest.foreign_vectors + foreign))
    segment = new_segment_id()
    folder = partition_dir(store.root, manifest.tenant, manifest.month) / segment
    updated = with_segment(store, versions, live, folder, segment, started=started,
                           read_seconds=read_seconds)
    faults.hit("index.after_delta_segment")
    return _publish(store, updated)


def with_segment(store: LakeStore, manifest: PartitionManifest, live: LiveRows, folder: Path,
                 segment: str, *, started: float, read_seconds: float) -> PartitionManifest:
    """Write ``live`` (rows that no segment of ``manifest`` holds) as segment ``segment`` in
    ``folder``, on top of the build's lexical index, and return ``manifest`` with that
    segment added (``started``: perf_counter at the build's start); nothing is published."""
    # local_build: in an object-store lake the live build may not be in this cache (another
    # server built it, or a reader pruned it), and the new lexical segment grows from its copy.
    written = write_segment(folder, live, doc_offset=manifest.row_count,
                            lexical_from=local_build(store.root, manifest) / "lexical")
    semantic, rows, dim = written.semantic, live.rows, live.dim
    turns = rows.select("conversation_id", "turn_id").n_unique()
    return replace(
        manifest, build_id=segment,
        row_count=manifest.row_count + rows.height, turn_count=manifest.turn_count + turns,
        embedded_rows=manifest.embedded_rows + int(rows["embedded"].sum()),
        model=manifest.model or (manifest.requested_model if dim else None),
        dim=manifest.dim or dim,
        semantic_kind=manifest.semantic_kind if manifest.semantic_kind != "none" else
        (semantic.kind if semantic is not None else "none"),
        built_at=datetime.now(UTC).isoformat(), build_seconds=time.perf_counter() - started,
        bytes=_added(manifest.bytes, segment_bytes(folder)),
        segments=[*manifest.live_segments, segment],
        segment_rows=[*manifest.segment_rows, rows.height],
        # an older manifest without the bytes of its segments gets none (weighed by rows)
        segment_text_bytes=[*manifest.segment_text_bytes, text_bytes(rows)]
        if len(manifest.segment_text_bytes) == len(manifest.segment_rows) else [],
        foreign_vectors=manifest.foreign_vectors + live.foreign,
        seconds_by_kind={"read": read_seconds, **written.seconds})


def deferrable(store: LakeStore, content_files: frozenset[str], log_files: frozenset[str],
               defer_bytes: int, *, content_version: int, logs_version: int
               ) -> tuple[frozenset[str], frozenset[str]]:
    """The added content files larger than ``defer_bytes`` and the TurnLog files of their
    turns, when they can be set apart: their turns have no row in the other added files, and
    each such TurnLog file holds those turns only and together they hold all of them (else
    nothing is deferred, and the append indexes everything as before)."""
    nothing: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    folder = store.path(Table.CONTENT_ROWS)
    heavy = frozenset(f for f in content_files if _size(folder / f) > defer_bytes)
    if not heavy:
        return nothing
    keys = ["conversation_id", "turn_id"]

    def turns(table: Table, files: frozenset[str], version: int) -> set[tuple[str, str]]:
        read = store.read_files(table, files, columns=keys, version=version)
        return set(zip(read["conversation_id"].to_pylist(), read["turn_id"].to_pylist(),
                       strict=True))

    heavy_turns = turns(Table.CONTENT_ROWS, heavy, content_version)
    if heavy_turns & turns(Table.CONTENT_ROWS, content_files - heavy, content_version):
        return nothing
    logged: set[tuple[str, str]] = set()
    heavy_logs: set[str] = set()
    for name in log_files:
        held = turns(Table.TURN_LOGS, frozenset({name}), logs_version)
        if held & heavy_turns:
            if not held <= heavy_turns:
                return nothing
            heavy_logs.add(name)
            logged |= held
    if logged != heavy_turns:
        return nothing
    return heavy, frozenset(heavy_logs)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def merge_deltas(store: LakeStore, manifest: PartitionManifest, *, content_version: int,
                 logs_version: int, model: str | None, faults: Faults = NO_FAULTS,
                 defer_bytes: int | None = None, start: int = 1) -> PartitionManifest | None:
    """Replace a partition's segments from number ``start`` on (1: every delta) by one delta
    over everything appended since the segments before it (reading the files added since
    their versions, not the partition); None when that is not a pure append any more (the
    caller rebuilds).

    Every segment's folder keeps the manifest it was published with, which says what the
    segments up to it cover: so a merge can keep a large delta (a deferred 9 MB turn) and
    index again only the small ones after it."""
    if not 1 <= start < len(manifest.live_segments):
        raise ValueError(f"cannot merge the segments of {manifest.tenant}/{manifest.month} "
                         f"from number {start}: it has {len(manifest.live_segments)}")
    try:
        kept = local_segments(store.root, manifest)[start - 1]
        kept_manifest = PartitionManifest.from_json((kept / MANIFEST_FILE).read_text())
    except (OSError, ValueError, TypeError):
        return None
    if kept_manifest.live_segments != manifest.live_segments[:start]:
        return None
    merged = append_partition(store, kept_manifest, content_version=content_version,
                              logs_version=logs_version, model=model, faults=faults,
                              defer_bytes=defer_bytes)
    faults.hit("index.after_delta_merge")
    return merged


def _publish(store: LakeStore, manifest: PartitionManifest) -> PartitionManifest:
    folder = partition_dir(store.root, manifest.tenant, manifest.month) / manifest.build_id
    # The folder may be the live one (an append without live rows): replace its manifest in
    # one rename, so a reader or a crash sees the old manifest or the new, never half of one.
    staged = folder / f".{MANIFEST_FILE}.tmp"
    staged.write_text(manifest.to_json())
    os.replace(staged, folder / MANIFEST_FILE)
    publish(store.root, manifest)
    return manifest


def _all_logs_matched(logs: pa.Table, rows: pl.DataFrame) -> bool:
    """Whether every new TurnLog found its rows among the new files: a TurnLog whose rows
    were committed before the live build (a writer between its two appends) makes rows live
    that no segment holds, so the partition is rebuilt."""
    frame = pl.from_arrow(logs)
    assert isinstance(frame, pl.DataFrame)
    if frame.height == 0:
        return True
    turns = frame.select("conversation_id", "turn_id").unique()
    found = rows.select("conversation_id", "turn_id").unique()
    return turns.join(found, on=["conversation_id", "turn_id"], how="anti").height == 0


def _added(before: dict[str, int], segment: dict[str, int]) -> dict[str, int]:
    """Artifact bytes over all segments; the lexical folder is cumulative (hard links), so
    the newest one counts alone."""
    out = dict(before)
    for name, size in segment.items():
        out[name] = size if name == "lexical" else out.get(name, 0) + size
    return out
