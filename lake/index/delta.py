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
    joined_rows,
    new_segment_id,
    segment_bytes,
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
                     logs_version: int, model: str | None,
                     faults: Faults = NO_FAULTS) -> PartitionManifest | None:
    """Index what was appended to a partition since ``manifest`` as one delta segment and
    publish it; None when the partition needs a full rebuild instead.

    The caller holds the index lock. ``faults`` marks ``index.after_delta_segment`` (the
    segment is written, not yet live) for crash tests."""
    started = time.perf_counter()
    plan = plan_append(store, manifest, content_version=content_version,
                       logs_version=logs_version, model=model)
    if plan is None:
        return None
    content = store.read_files(Table.CONTENT_ROWS, plan.content_files, columns=CONTENT_COLUMNS,
                               version=content_version)
    logs = store.read_files(Table.TURN_LOGS, plan.log_files, columns=LOG_COLUMNS,
                            version=logs_version)
    live = joined_rows(content, logs, model)
    rows, dim, foreign = live.rows, live.dim, live.foreign
    read_seconds = time.perf_counter() - started
    if not _all_logs_matched(logs, rows) or (dim and manifest.dim and dim != manifest.dim):
        return None
    part = (manifest.tenant, manifest.month)
    if rows.height == 0:
        # Only files without live rows (or none at all): the same segments cover the new
        # versions. A new build id still makes the new state live atomically.
        return _publish(store, replace(
            manifest, build_id=manifest.build_id, content_version=content_version,
            logs_version=logs_version, content_fingerprint=plan.content_fingerprint,
            logs_fingerprint=plan.logs_fingerprint,
            foreign_vectors=manifest.foreign_vectors + foreign))
    segment = new_segment_id()
    base = partition_dir(store.root, *part)
    folder = base / segment
    # local_build: in an object-store lake the live build may not be in this cache (another
    # server built it, or a reader pruned it), and the new lexical segment grows from its copy.
    written = write_segment(folder, live, doc_offset=manifest.row_count,
                            lexical_from=local_build(store.root, manifest) / "lexical")
    semantic = written.semantic
    faults.hit("index.after_delta_segment")
    turns = rows.select("conversation_id", "turn_id").n_unique()
    updated = replace(
        manifest, build_id=segment, content_version=content_version, logs_version=logs_version,
        content_fingerprint=plan.content_fingerprint, logs_fingerprint=plan.logs_fingerprint,
        row_count=manifest.row_count + rows.height, turn_count=manifest.turn_count + turns,
        embedded_rows=manifest.embedded_rows + int(rows["embedded"].sum()),
        model=manifest.model or (model if dim else None), dim=manifest.dim or dim,
        semantic_kind=manifest.semantic_kind if manifest.semantic_kind != "none" else
        (semantic.kind if semantic is not None else "none"),
        built_at=datetime.now(UTC).isoformat(), build_seconds=time.perf_counter() - started,
        bytes=_added(manifest.bytes, segment_bytes(folder)),
        segments=[*manifest.live_segments, segment],
        segment_rows=[*manifest.segment_rows, rows.height],
        foreign_vectors=manifest.foreign_vectors + foreign,
        seconds_by_kind={"read": read_seconds, **written.seconds})
    return _publish(store, updated)


def merge_deltas(store: LakeStore, manifest: PartitionManifest, *, content_version: int,
                 logs_version: int, model: str | None,
                 faults: Faults = NO_FAULTS) -> PartitionManifest | None:
    """Replace a partition's delta segments by one delta over everything appended since its
    base (reading the files added since the base's versions, not the partition); None when
    that is not a pure append any more (the caller rebuilds).

    The base segment's folder keeps the manifest it was published with, which says what the
    base covers."""
    try:
        base = local_segments(store.root, manifest)[0]
        base_manifest = PartitionManifest.from_json((base / MANIFEST_FILE).read_text())
    except (OSError, ValueError, TypeError):
        return None
    if base_manifest.live_segments != manifest.live_segments[:1]:
        return None
    merged = append_partition(store, base_manifest, content_version=content_version,
                              logs_version=logs_version, model=model, faults=faults)
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
