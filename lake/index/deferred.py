"""Deferred rows: a large append is indexed beside a live writer, not in its index step.

A partition's segments form one chain (each segment's lexical index grows from the previous
one's), so a delta segment holding one turn of several megabytes (its lexical and trigram
indexing took 7.5 s to 22 s on the serve bench) held every turn appended after it until it
was published. With ``defer_bytes``, lake.index.delta.append_partition leaves added content
files larger than that out of its segment, with the TurnLog files of their turns, and lists
them in the manifest (``deferred_content``/``deferred_logs``): the other turns are published
at once, and the partition stays ``stale`` while any file is listed.

:func:`write_deferred` indexes the listed files as one segment on top of the build that
listed them, without the index lock, in a hidden folder (lake.index.rebase's prefix: a crash
leaves one that a later rebase removes). :func:`publish_deferred`, under the index lock, makes
it live with a delta segment of what was appended since that build, as a rebase publishes its
new base. It discards the segment when the partition's segments changed otherwise meanwhile
(a rebase, a merge, a rebuild: those index the listed files themselves, or list them again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pyarrow.parquet as pq

from lake.faults import NO_FAULTS, Faults
from lake.index.delta import with_segment
from lake.index.manifest import MANIFEST_FILE, PartitionManifest, partition_dir, read_current
from lake.index.partition import CONTENT_COLUMNS, LOG_COLUMNS, joined_rows, new_segment_id
from lake.index.rebase import HIDDEN_PREFIX, publish_hidden
from lake.store import LakeStore
from lake.tables import Table


def write_deferred(store: LakeStore, begun: PartitionManifest, *, model: str | None
                   ) -> PartitionManifest | None:
    """Index the files ``begun`` (a live manifest) defers as one segment after its segments,
    hidden from readers and publications, and return the manifest that adds it (nothing
    deferred); None when ``begun`` defers nothing or the rows' vectors do not fit its
    semantic index. Takes no lock; only for a local lake."""
    if not begun.deferred_content:
        return None
    started = time.perf_counter()
    content = store.read_files(Table.CONTENT_ROWS, begun.deferred_content,
                               columns=CONTENT_COLUMNS, version=begun.content_version)
    logs = store.read_files(Table.TURN_LOGS, begun.deferred_logs, columns=LOG_COLUMNS,
                            version=begun.logs_version)
    live = joined_rows(content, logs, model)
    if live.rows.height == 0 or (live.dim and begun.dim and live.dim != begun.dim):
        return None
    segment = new_segment_id()
    folder = partition_dir(store.root, begun.tenant, begun.month) / f"{HIDDEN_PREFIX}{segment}"
    built = with_segment(store, replace(begun, deferred_content=[], deferred_logs=[]), live,
                         folder, segment, started=started,
                         read_seconds=time.perf_counter() - started)
    (folder / MANIFEST_FILE).write_text(built.to_json())
    return built


def publish_deferred(store: LakeStore, begun: PartitionManifest, built: PartitionManifest, *,
                     model: str | None, defer_bytes: int | None,
                     faults: Faults = NO_FAULTS) -> PartitionManifest | None:
    """Make ``built`` (from :func:`write_deferred` of ``begun``) live with a delta segment of
    the rows appended since ``begun``'s versions (large files deferred again by
    ``defer_bytes``), and return the published manifest; None when it was discarded (see the
    module notes). The caller holds the index lock."""
    current = read_current(store.root, built.tenant, built.month)
    keep = current is not None and _only_appended(current[1], begun)
    return publish_hidden(store, built, keep=keep, fault="index.deferred_visible", model=model,
                          faults=faults, defer_bytes=defer_bytes)


def _only_appended(current: PartitionManifest, begun: PartitionManifest) -> bool:
    """Whether the live build still starts with ``begun``'s segments and still defers what
    ``begun`` deferred: only delta segments were published since."""
    ours = begun.live_segments
    return (current.live_segments[:len(ours)] == ours
            and set(begun.deferred_content) <= set(current.deferred_content))


def deferred_turns(store: LakeStore, manifest: PartitionManifest) -> set[tuple[str, str]]:
    """The turns (conversation id, turn id) whose rows ``manifest`` defers."""
    if not manifest.deferred_content:
        return set()
    read = store.read_files(Table.CONTENT_ROWS, manifest.deferred_content,
                            columns=["conversation_id", "turn_id"],
                            version=manifest.content_version)
    return set(zip(read["conversation_id"].to_pylist(), read["turn_id"].to_pylist(),
                   strict=True))


@dataclass(frozen=True)
class DeferredSize:
    """How much a partition defers: its rows, and their bytes of text."""

    rows: int = 0
    text_bytes: int = 0


def deferred_size(store: LakeStore, manifest: PartitionManifest) -> DeferredSize:
    """The rows ``manifest`` defers and their bytes of text, from the footers of their data
    files (no row is read): what indexing them costs, to weigh before they are indexed.
    Nothing for an object-store lake, where nothing is deferred."""
    if store.root.remote:
        return DeferredSize()
    folder = store.path(Table.CONTENT_ROWS)
    rows = text = 0
    for name in manifest.deferred_content:
        try:
            meta = pq.read_metadata(folder / name)
        except OSError:  # gone since (a compaction): the next step sees what replaced it
            continue
        columns = [i for i in range(meta.num_columns) if meta.schema.column(i).path == "text"]
        rows += meta.num_rows
        text += sum(meta.row_group(g).column(i).total_uncompressed_size
                    for g in range(meta.num_row_groups) for i in columns)
    return DeferredSize(rows, text)
