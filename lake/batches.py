"""All-or-nothing commits of a batch of turns across several Delta tables.

Delta commits are atomic per table, not across tables, so a batch is written in this order::

    1. manifest   <lake>/_batches/<batch_id>.json  (fsync'd: the batch's file keys, conversations)
    2. bytes      hosted files into the file store (moved there from <lake>/_staging/ when
                  ingest workers wrote them ahead, small ones packed; their folders may exist
                  already, empty), then synced to disk: in a thread, while step 3 runs; done
                  before step 4
    3. rows       content_rows, events, files           (each row tagged with batch_id;
                                                          appended side by side)
    4. TurnLogs   turn_logs                              <- the commit point
    5. timelines  of the batch's conversations, computed during steps 2-3 (counting the
                  TurnLogs of step 4), written now
    6. manifest removed

Readers only see turns that have a TurnLog (search, catalog and materialization join on it), so a
crash before step 4 leaves nothing visible, and ``recover()`` (run under the writer lock before any
new write) deletes the batch's orphan rows and bytes, and whatever was still staged. A crash
after step 4 leaves the turns visible and complete; ``recover()`` only refreshes their timelines.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lake.faults import NO_FAULTS, Faults
from lake.filestore import FileStore, PendingFile
from lake.store import LakeStore
from lake.tables import Table
from lake.timelines import (
    TIMELINE_SOURCE_COLUMNS,
    TimelineUpdate,
    appended_timelines,
    compute_timelines,
    refresh_timelines,
    rows_of_conversations,
    stored_timelines,
)

ROW_TABLES = (Table.CONTENT_ROWS, Table.EVENTS, Table.FILES)
__all__ = ["ROW_TABLES", "BatchCommitter", "PendingFile", "RecoveryReport"]
_BATCHES = "_batches"  # manifests of batches in flight, under the lake root


@dataclass
class RecoveryReport:
    """What ``recover()`` found and did."""

    rolled_back: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)


class BatchCommitter:
    """Writes batches of projected turns so that each turn is visible whole or not at all."""

    def __init__(self, store: LakeStore, files: FileStore, *, faults: Faults = NO_FAULTS) -> None:
        self._store = store
        self._files = files
        self._faults = faults
        self._blobs = store.root.blobs

    def commit(self, batch_id: str, tables: dict[Table, pa.Table],
               pending_files: Sequence[PendingFile], *,
               new_conversations: Collection[tuple[str, str]] = (),
               appending: Mapping[tuple[str, str], int] | None = None) -> None:
        """Write one batch in the crash-safe order above. Caller holds the writer lock.

        ``new_conversations`` are (tenant, conversation_id) pairs that had no TurnLog before
        this batch: their timelines come from the batch's own TurnLogs, not a table scan.
        ``appending`` maps conversations whose turns in this batch all come after their
        stored ones to how many turns they had stored: their timelines grow from their stored
        timeline rows (lake.timelines.appended_timelines) when those count as many turns.
        """
        logs = tables[Table.TURN_LOGS]
        conversations = sorted({(t, c) for t, c in zip(
            logs.column("tenant").to_pylist(), logs.column("conversation_id").to_pylist(),
            strict=True)})
        self._write_manifest(batch_id, [f.key for f in pending_files], conversations)
        self._faults.hit("batch.after_manifest")
        # The bytes must be in place and on disk before a TurnLog points at them. The rows may
        # come first: nobody sees them before their TurnLogs, and a crash rolls them back with
        # the bytes. So the bytes are stored in a thread while the row tables are appended, each
        # in a thread of its own: moving files is short system calls and the sync waits for the
        # disk, while the appends encode Parquet in deltalake without the GIL. (The last batch
        # of an ingest commits with no worker left to overlap it: 0.05 s of 0.3 on 50k turns.)
        # The timelines are computed meanwhile too, counting the TurnLogs about to commit; they
        # are written only after those (readers list conversations from the timelines).
        with ThreadPoolExecutor(2 + len(ROW_TABLES), thread_name_prefix="turnlake-rows") as pool:
            stored = pool.submit(self._store_bytes, pending_files)
            timelines = pool.submit(self._timelines, logs, conversations, new_conversations,
                                    appending or {})
            appends = [pool.submit(self._store.append, table, tables[table])
                       for table in ROW_TABLES]
            for table, append in zip(ROW_TABLES, appends, strict=True):
                append.result()
                self._faults.hit(f"batch.after_{table.value}")
            stored.result()
            update = timelines.result()
        # Not "after_files": that name marks the files table above, and a kill by name
        # (TURNLAKE_FAULT_AT) would never reach the second of two equal points.
        self._faults.hit("batch.after_bytes")
        self._store.append(Table.TURN_LOGS, logs)
        self._faults.hit("batch.after_turn_logs")
        update.write(self._store)
        self._faults.hit("batch.after_timelines")
        self._blobs.delete(self._manifest_key(batch_id))

    def _timelines(self, logs: pa.Table, conversations: list[tuple[str, str]],
                   new_conversations: Collection[tuple[str, str]],
                   appending: Mapping[tuple[str, str], int]) -> TimelineUpdate:
        """The timelines of a batch's conversations once its TurnLogs (``logs``) commit."""
        # Selected first: filtering copies every column, and the payloads are most of the bytes.
        sources = logs.select(TIMELINE_SOURCE_COLUMNS)
        # One read tells which conversations have a timeline row (the write replaces those)
        # and gives the rows that appending conversations grow from.
        stored = stored_timelines(self._store, conversations)
        counts = dict(zip(zip(stored["tenant"].to_pylist(),
                              stored["conversation_id"].to_pylist(), strict=True),
                          stored["turn_count"].to_pylist(), strict=True))
        # A row that counts other than the stored TurnLogs is not grown from: recomputed.
        grow = {pair for pair, count in appending.items() if counts.get(pair) == count}
        rest = [pair for pair in conversations if pair not in grow]
        new_logs = rows_of_conversations(sources, new_conversations) if new_conversations else None
        update = compute_timelines(self._store, rest, complete=new_logs, pending=sources)
        rows = update.rows
        if grow:
            rows = pa.concat_tables([rows, appended_timelines(
                rows_of_conversations(stored, grow), rows_of_conversations(sources, grow))])
        return TimelineUpdate(rows, update.live | grow, update.gone, frozenset(counts))

    def _store_bytes(self, pending_files: Sequence[PendingFile]) -> None:
        """Move a batch's hosted bytes into place and flush them to disk."""
        # One thread: each file is a few short system calls, and threads taking turns with the
        # GIL between them cost more than the calls (twice the time on two cores).
        self._files.put_new(pending_files)
        if pending_files:
            self._files.sync()

    def recover(self) -> RecoveryReport:
        """Finish or roll back batches a crashed writer left; caller holds the writer lock."""
        report = RecoveryReport()
        self._files.clear_staging()  # bytes no manifest named yet: no row points at them
        for name in self._blobs.children(_BATCHES):
            if not name.endswith(".json"):
                continue
            key = f"{_BATCHES}/{name}"
            try:
                manifest = json.loads(self._blobs.read_bytes(key))
            except (OSError, json.JSONDecodeError):
                # A manifest torn mid-write means the crash came before any table write.
                self._blobs.delete(key)
                continue
            batch_id = str(manifest["batch_id"])
            conversations = [(str(t), str(c)) for t, c in manifest["conversations"]]
            if self._batch_committed(batch_id):
                refresh_timelines(self._store, conversations)
                report.completed.append(batch_id)
            else:
                for table in ROW_TABLES:
                    self._store.delete(table, f"batch_id = '{batch_id}'")
                self._files.discard(str(key) for key in manifest["file_keys"])
                report.rolled_back.append(batch_id)
            self._blobs.delete(key)
        return report

    def pending(self) -> list[str]:
        """Batch ids whose manifest is still there: a writer's batch in flight, or one a
        crashed writer left for :meth:`recover`."""
        return sorted(name.removesuffix(".json") for name in self._blobs.children(_BATCHES)
                      if name.endswith(".json"))

    def _batch_committed(self, batch_id: str) -> bool:
        found = self._store.read(Table.TURN_LOGS, columns=["batch_id"],
                                 filter=ds.field("batch_id") == batch_id)
        return bool(found.num_rows) and bool(pc.any(pc.equal(found["batch_id"], batch_id)).as_py())

    @staticmethod
    def _manifest_key(batch_id: str) -> str:
        return f"{_BATCHES}/{batch_id}.json"

    def _write_manifest(self, batch_id: str, file_keys: list[str],
                        conversations: list[tuple[str, str]]) -> None:
        # The two tables' versions before this batch's commits: see indexable_versions.
        body = json.dumps({"batch_id": batch_id, "file_keys": file_keys,
                           "conversations": conversations,
                           "content_version": self._store.version(Table.CONTENT_ROWS),
                           "logs_version": self._store.version(Table.TURN_LOGS)})
        self._blobs.write_bytes(self._manifest_key(batch_id), body.encode(), durable=True)


def indexable_versions(store: LakeStore, *, attempts: int = 5) -> tuple[int | None, int | None]:
    """The versions of ``content_rows`` and ``turn_logs`` an index build should read: a pair
    in which every committed content row has its TurnLog, or has none yet only because its
    batch's TurnLogs are still to come after the pair.

    A batch commits its rows before its TurnLogs. A build that read the two versions in
    between counted the batch's rows as covered (without indexing them: no TurnLog), and when
    their TurnLogs then arrived no delta segment could hold them: a live writer's indexer
    rebuilt the whole partition, 15 times in 37 index steps beside a busy writer. A batch's
    manifest (written before its commits, removed after) names both versions from before
    it; its one TurnLog commit comes right after the named one. So while a batch in flight
    has not committed its TurnLogs as of the version read, the content version read is capped
    at the one from before its rows. The TurnLog version is read before and after the
    manifests: a batch that finished in between is tried again (``attempts`` times, then the
    plain reading, what builds read before)."""
    content = logs = None
    for _ in range(attempts):
        logs = store.version(Table.TURN_LOGS)
        content = store.version(Table.CONTENT_ROWS)
        in_flight = _batches_in_flight(store)
        if store.version(Table.TURN_LOGS) != logs:
            continue
        if in_flight is None or content is None:
            return content, logs
        waiting = [before for before, logs_before in in_flight
                   if logs is None or logs <= logs_before]
        return (min([content, *waiting]), logs)
    return content, logs


def _batches_in_flight(store: LakeStore) -> list[tuple[int, int]] | None:
    """(content version, TurnLog version) from before each batch in flight, as its manifest
    names them; None when one names none (a torn manifest, one from before they did, or one
    of a batch that created a table)."""
    blobs = store.root.blobs
    found: list[tuple[int, int]] = []
    for name in blobs.children(_BATCHES):
        if not name.endswith(".json"):
            continue
        try:
            manifest = json.loads(blobs.read_bytes(f"{_BATCHES}/{name}"))
        except FileNotFoundError:
            continue  # the batch finished while we looked: the TurnLog check sees it
        except (OSError, ValueError):
            return None
        content, logs = (manifest.get("content_version"), manifest.get("logs_version")) \
            if isinstance(manifest, dict) else (None, None)
        if not isinstance(content, int) or not isinstance(logs, int):
            return None
        found.append((content, logs))
    return found
