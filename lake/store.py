"""The only module that talks to deltalake: open, append, upsert, delete and scan lake tables.

deltalake's errors are translated here into turnlake's (``ConcurrentWriteError``, ``LakeError``).
Per-file column statistics are restricted to non-text columns so that the Delta log never holds
conversation text (its min/max statistics otherwise would).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from deltalake import ColumnProperties, DeltaTable, Field, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from lake.embedding.precision import half_precision_column
from lake.errors import ConcurrentWriteError, LakeError
from lake.location import LakeLocation
from lake.tables import PARTITIONS, SCHEMAS, Table

# A checkpoint every this many commits (delta-rs writes it after the commit that reaches it).
# Opening a table replays every commit since the last checkpoint: with delta-rs's default of
# 100, a live lake's tables (a commit per recorded turn) took ~12 ms to open at 45 commits past
# a checkpoint against ~4 ms just after one, and a live writer opens three tables a turn.
CHECKPOINT_INTERVAL = 10

# Columns whose per-file minimum and maximum the Delta log keeps: a filtered read skips the
# files whose range cannot match without opening them. conversation_id is what the writer's
# reads filter on (deduplication, timelines, erasure); a live-written table has a file per
# commit, and reading two conversations out of 301 files took 21 ms without it, 5 ms with.
_STATS_COLUMNS: dict[Table, str] = {
    Table.TURN_LOGS: "conversation_id,started_at,ended_at,expires_at,ordinal",
    Table.CONTENT_ROWS: "conversation_id,ts,turn_at,expires_at",
    Table.TIMELINES: "conversation_id,started_at,last_activity_at,expires_at",
    Table.EVENTS: "conversation_id,at,expires_at",
    Table.FILES: "conversation_id,size,expires_at",
    Table.QUARANTINE: "quarantined_at",
    Table.AUDIT: "at",
}

Partition = tuple[str, str]  # (tenant, month)
# Parquet's own min/max statistics (per page and per file) are left out for the free-text
# columns, which no reader filters on: for 1.6 kB payloads they cost CPU on every write, and
# a file's footer and page index would hold whole texts. Compression is named: given any
# properties, deltalake would otherwise write uncompressed files.
_FREE_TEXT = ("payload", "blocks", "text", "data", "raw")
_WRITER = WriterProperties(
    compression="SNAPPY",
    column_properties={name: ColumnProperties(statistics_enabled="NONE") for name in _FREE_TEXT})
# Vectors are written at half precision (lake.embedding.precision): Parquet's dictionary then
# stores a value in about two bytes, and the indexes rebuilt from the table keep the same.
_VECTOR_COLUMNS = ("embedding", "passage_embeddings")
_LOG_RETENTION = "delta.logRetentionDuration"
_NO_LOG_RETENTION = "interval 0 days"
# Delta's own default, set explicitly because the log cleanup below lowers it for a moment:
# a table left at zero days drops every older log entry at each automatic checkpoint (every
# CHECKPOINT_INTERVAL commits), under readers still reading them, and fails their reads.
_STANDING_LOG_RETENTION = "interval 30 days"
# Compaction's file size: a month of a busy tenant's rows in a few files, each still small
# enough that a filtered scan skips most of the others.
COMPACT_TARGET_BYTES = 128 * 1024 * 1024


@contextmanager
def _translated(table: Table, action: str) -> Iterator[None]:
    try:
        yield
    except CommitFailedError as exc:
        raise ConcurrentWriteError(
            f"{action} on table {table.value} lost a race with another writer ({exc}); "
            "nothing was committed, re-run the job"
        ) from exc
    except TableNotFoundError as exc:
        raise LakeError(f"table {table.value} not found: {exc}") from exc
    except DeltaError as exc:
        message = str(exc)
        if "conflict" in message.lower() or "concurrent" in message.lower():
            raise ConcurrentWriteError(
                f"{action} on table {table.value} conflicted with another writer; re-run the job"
            ) from exc
        raise LakeError(f"{action} on table {table.value} failed: {message}") from exc
    except OSError as exc:
        raise LakeError(f"{action} on table {table.value} failed: {exc}") from exc


def _table_properties(table: Table) -> dict[str, str]:
    """The Delta table properties every table of the lake is created with."""
    return {"delta.dataSkippingStatsColumns": _STATS_COLUMNS[table],
            "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
            _LOG_RETENTION: _STANDING_LOG_RETENTION}


def _evolved(dt: DeltaTable, table: Table) -> DeltaTable:
    """The table with every column of SCHEMAS[table] it lacks added, in one commit, and the
    table properties of :func:`_table_properties` (a lake made before may lack some: files
    written before a statistics column was named carry no statistics for it, and are read
    as before).

    Schema evolution: a column added to lake/tables.py reaches a lake written before it the
    first time that table is written; files written earlier read the column as null. Only a
    nullable column can be added so (old rows have no value for it).
    """
    configured = dt.metadata().configuration
    changed = {k: v for k, v in _table_properties(table).items() if configured.get(k) != v}
    if changed:
        with _translated(table, "configure"):
            dt.alter.set_table_properties(changed)
            dt.update_incremental()
    have = {field.name for field in dt.schema().fields}
    missing = [field for field in SCHEMAS[table] if field.name not in have]
    if not missing:
        return dt
    required = [field.name for field in missing if not field.nullable]
    if required:
        raise LakeError(f"table {table}: new column(s) {', '.join(required)} are not nullable, "
                        f"so rows already in the lake at {dt.table_uri} would have no value")
    with _translated(table, "add columns to"):
        dt.alter.add_columns([Field.from_arrow(field) for field in missing])
        dt.update_incremental()
    return dt


def files_fingerprint(paths: Collection[str]) -> str:
    """The fingerprint :meth:`LakeStore.partition_fingerprints` gives a partition's files."""
    return hashlib.sha256("\n".join(sorted(paths)).encode()).hexdigest()[:16]


def _relative(path: str, root: str) -> str:
    """A fragment's path relative to its table folder (fragments may carry the table's
    absolute path, or its path without the URI scheme)."""
    for prefix in (root, root.split("://", 1)[-1]):
        if path.startswith(prefix + "/"):
            return path[len(prefix) + 1:]
    return path


def _stored(table: Table, data: pa.Table) -> pa.Table:
    """``data`` in the table's schema, its vector columns rounded to half precision."""
    data = data.cast(SCHEMAS[table])
    for name in _VECTOR_COLUMNS:
        if name in data.column_names:
            data = data.set_column(data.schema.get_field_index(name), name,
                                   half_precision_column(data.column(name)))
    return data


def _partition_expression(names: Sequence[str], values: Partition) -> ds.Expression:
    """The filter a hive-partitioned file's folder stands for (its partition columns' values
    are in the log, not in the file)."""
    expression = ds.scalar(True)
    for name, value in zip(names, values, strict=True):
        expression = expression & (ds.field(name) == value)
    return expression


def _row_count(dt: DeltaTable) -> int:
    """Rows in the table's current version, from the log's per-file record counts."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


class LakeStore:
    """Delta tables under ``<root>/tables``; one instance per lake root, cheap to create.

    The root is a local folder or an ``s3://bucket/prefix`` location (see lake.location).
    """

    def __init__(self, root: Path | str | LakeLocation) -> None:
        self.root = LakeLocation.of(root)
        self._options = self.root.delta_options()

    def path(self, table: Table) -> Path:
        """The folder of a table in a local lake."""
        return self.root.local / "tables" / table.value

    def uri(self, table: Table) -> str:
        """Where a table lives: a local path or an s3:// URI."""
        return self.root.child_uri("tables", table.value)

    def exists(self, table: Table) -> bool:
        """Whether the table has been created."""
        if _SNAPSHOTS.holds(self.uri(table)):
            return True  # tables are never dropped; the lookup replays the log (~1.5 ms)
        with _translated(table, "look up"):
            return DeltaTable.is_deltatable(self.uri(table), storage_options=self._options)

    def open(self, table: Table, version: int | None = None) -> DeltaTable | None:
        """The Delta table (at a version), or None when it does not exist yet: a snapshot to
        read, which callers must not write through (writers use :meth:`ensure`).

        The newest snapshots opened in this process are kept (for every store of the lake)
        and handed out again for their versions (the latest while the table has no newer
        commit): opening replays the log since its last checkpoint, ~7 ms a table on the
        bench machine, and a warm writer recording one turn opened tables 16 times, the
        search that then found it a few more. The commit file's stamp is part of the key, so
        a table removed and created again is never confused with the one it replaced. One
        handle may serve several threads: deltalake serializes calls on it.
        """
        snapshot = self._snapshot(table, version)
        return None if snapshot is None else snapshot.table

    def warm(self) -> None:
        """Open every table there is, so the first read or write of a long-running process
        does not pay for replaying the logs."""
        for table in Table:
            self.open(table)

    def _snapshot(self, table: Table, version: int | None) -> _Snapshot | None:
        """The kept snapshot of a version (the latest: None), opened and kept when needed."""
        wanted = self.latest_version(table) if version is None else version
        if wanted is None:
            return None
        stamp = self.root.blobs.stamp(self._commit_key(table, wanted))
        if stamp is not None:
            found = _SNAPSHOTS.find(self.uri(table), (wanted, stamp))
            if found is not None:
                return found
        dt = self._open_fresh(table, wanted)
        if dt is None:
            return None
        if stamp is None:  # its commit is gone from the log: not worth keeping
            return _Snapshot((wanted, ""), dt)
        return self._keep(table, dt, stamp)

    def _keep(self, table: Table, dt: DeltaTable, stamp: str | None = None) -> _Snapshot:
        """Remember ``dt`` (which nobody writes through any more) as a snapshot of its version;
        the two newest versions are kept (an index build reads the one it indexed last beside
        the latest)."""
        version = dt.version()
        stamp = stamp or self.root.blobs.stamp(self._commit_key(table, version))
        snapshot = _Snapshot((version, stamp or ""), dt)
        if stamp is None:
            return snapshot
        _SNAPSHOTS.keep(self.uri(table), snapshot)
        return snapshot

    def _open_fresh(self, table: Table, version: int | None = None) -> DeltaTable | None:
        """A handle of the table of its own (at a version), or None when it does not exist."""
        with _translated(table, "open"):
            try:
                return DeltaTable(self.uri(table), version=version,
                                  storage_options=self._options)
            except TableNotFoundError:
                if self.exists(table):
                    raise  # the table is there, that version of it is not
                return None

    @staticmethod
    def _commit_key(table: Table, version: int) -> str:
        return f"tables/{table.value}/_delta_log/{version:020d}.json"

    def _log_names(self, table: Table) -> list[str]:
        return self.root.blobs.children(f"tables/{table.value}/_delta_log")

    def version(self, table: Table) -> int | None:
        """The table's current version, or None when it does not exist yet."""
        return self.latest_version(table)

    def latest_version(self, table: Table) -> int | None:
        """The newest committed version, read cheaply from the log folder's file names."""
        versions = [int(name[:-5]) for name in self._log_names(table)
                    if name.endswith(".json") and name[:-5].isdigit()]
        return max(versions) if versions else None

    def ensure(self, table: Table) -> DeltaTable:
        """Create the table (empty, with its schema and partitioning) if it does not exist; a
        handle of its own, to write through."""
        existing = self._open_fresh(table)
        if existing is not None:
            return _evolved(existing, table)
        if not self.root.remote:
            self.path(table).mkdir(parents=True, exist_ok=True)
        with _translated(table, "create"):
            return DeltaTable.create(
                self.uri(table), SCHEMAS[table], mode="ignore",
                partition_by=PARTITIONS[table] or None,
                configuration=_table_properties(table),
                storage_options=self._options,
            )

    def append(self, table: Table, data: pa.Table) -> int | None:
        """Append rows in one commit; returns the new version (None when nothing was written)."""
        if data.num_rows == 0:
            return self.version(table)
        dt = self.ensure(table)
        with _translated(table, "append"):
            write_deltalake(dt, _stored(table, data), mode="append",
                            writer_properties=_WRITER)
            dt.update_incremental()
        self._keep(table, dt)
        return dt.version()

    def replace_where(self, table: Table, data: pa.Table, predicate: str) -> None:
        """Atomically replace the rows matching a SQL predicate with ``data`` (one commit).

        Every row of ``data`` must match the predicate. Used instead of MERGE, whose files
        come back with string_view columns that pyarrow filters cannot compare.
        """
        dt = self.ensure(table)
        with _translated(table, "replace"):
            write_deltalake(dt, _stored(table, data), mode="overwrite",
                            predicate=predicate, writer_properties=_WRITER)
            dt.update_incremental()
        self._keep(table, dt)

    def delete(self, table: Table, predicate: str) -> int:
        """Delete the rows matching a SQL predicate in one commit; returns how many went."""
        dt = self._open_fresh(table)
        if dt is None:
            return 0
        with _translated(table, "delete"):
            before = _row_count(dt)
            # DeltaTable.delete rewrites files through DataFusion, which stores string_view
            # columns that filtered pyarrow scans then cannot compare with plain strings;
            # replacing the matching rows with no rows rewrites the same files as strings.
            write_deltalake(dt, SCHEMAS[table].empty_table(), mode="overwrite",
                            predicate=predicate, writer_properties=_WRITER)
            dt.update_incremental()
        self._keep(table, dt)
        return before - _row_count(dt)

    def dataset(self, table: Table, version: int | None = None) -> ds.Dataset:
        """A pyarrow dataset of the table (an empty one with the schema when it does not exist)."""
        snapshot = self._snapshot(table, version)
        if snapshot is None:
            return ds.dataset(SCHEMAS[table].empty_table())
        if snapshot.dataset is None:
            # Made once per snapshot (a dataset never changes either): building one lists
            # every data file with its partition values, ~8 ms on a live-written table.
            with _translated(table, "read"):
                # Merges may write string_view columns; reading through our schema keeps
                # every file (and every filter) on plain string types. A local table is read
                # through arrow's own file system: deltalake's default is a Python one, whose
                # pre-buffered reads left arrow I/O threads that still needed the interpreter
                # when it shut down, and the process then aborted ("terminate called without
                # an active exception", exit 134) after a command had done its work.
                native = None if self.root.remote else pafs.SubTreeFileSystem(
                    str(self.path(table)), pafs.LocalFileSystem())
                snapshot.dataset = snapshot.table.to_pyarrow_dataset(schema=SCHEMAS[table],
                                                                     filesystem=native)
        return snapshot.dataset

    def read(self, table: Table, *, columns: Sequence[str] | None = None,
             filter: ds.Expression | None = None, version: int | None = None) -> pa.Table:
        """Read selected columns of the rows matching a filter (pushed down to the scan)."""
        with _translated(table, "read"):
            return self.dataset(table, version).to_table(
                columns=list(columns) if columns is not None else None, filter=filter)

    def read_sparse(self, table: Table, *, columns: Sequence[str], filter: ds.Expression,
                    probe: str = "turn_id", version: int | None = None) -> pa.Table:
        """:meth:`read` for a filter few rows match (one conversation, one turn), when
        ``columns`` hold a wide one (``payload``, ``text``).

        A data file is one row group, so a filtered read decodes the wide column of every
        file the statistics cannot rule out (each file holds many conversations): 190 ms for
        one conversation's payloads at 100k turns. The files holding a match are found first
        by reading the narrow ``probe`` column alone; the wanted columns are then read from
        those files only.
        """
        dataset = self.dataset(table, version)
        if not isinstance(dataset, ds.FileSystemDataset):
            return self.read(table, columns=columns, filter=filter, version=version)
        with _translated(table, "read"):
            holding = [fragment for fragment in dataset.get_fragments(filter=filter)
                       if fragment.scanner(schema=dataset.schema, columns=[probe],
                                           filter=filter).count_rows()]
            return ds.FileSystemDataset(holding, dataset.schema, dataset.format,
                                        dataset.filesystem).to_table(columns=list(columns),
                                                                     filter=filter)

    def scan(self, table: Table, version: int | None = None) -> pl.LazyFrame:
        """A polars lazy scan of the table; filters and projections push down to parquet."""
        return pl.scan_pyarrow_dataset(self.dataset(table, version))

    def tenant_file_sizes(self, table: Table, tenant: str,
                          version: int | None = None) -> dict[str | None, tuple[int, int]]:
        """Rows and bytes of one tenant's data files per month (None for a table not
        partitioned by month), read from the commit log's file entries: no data file is
        opened (a footer each cost ~290 ms over a 100k-turn lake's five tenant tables).
        A file whose entry carries no row count is counted from its footer."""
        snapshot = self._snapshot(table, version)
        if snapshot is None:
            return {}
        with _translated(table, "inspect"):
            actions = pa.table(snapshot.table.get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return {}
        months = (actions.column("partition.month").to_pylist()
                  if "partition.month" in actions.column_names else [None] * actions.num_rows)
        records = (actions.column("num_records").to_pylist()
                   if "num_records" in actions.column_names else [None] * actions.num_rows)
        sizes: dict[str | None, list[int]] = {}
        for path, owner, month, rows, size in zip(
                actions.column("path").to_pylist(),
                actions.column("partition.tenant").to_pylist(), months, records,
                actions.column("size_bytes").to_pylist(), strict=True):
            if owner != tenant:
                continue
            if rows is None:
                rows = self.read_files(table, {path}, columns=["tenant"],
                                       version=version).num_rows
            tally = sizes.setdefault(month, [0, 0])
            tally[0] += int(rows)
            tally[1] += int(size or 0)
        return {month: (rows, size) for month, (rows, size) in sizes.items()}

    def partition_fingerprints(self, table: Table,
                               version: int | None = None) -> dict[Partition, str]:
        """For each (tenant, month) partition, a hash of its data files at a version.

        Two versions give the same fingerprint for a partition exactly when no commit between
        them added or removed a file of that partition.
        """
        snapshot = self._snapshot(table, version)
        if snapshot is None:
            return {}
        if snapshot.fingerprints is None:
            snapshot.fingerprints = {part: files_fingerprint(paths) for part, paths
                                     in self._partition_paths(table, snapshot).items()}
        return dict(snapshot.fingerprints)

    def partition_files(self, table: Table, tenant: str, month: str,
                        version: int | None = None) -> frozenset[str]:
        """The data files (paths relative to the table) of one partition at a version.

        Raises LakeError when that version can no longer be read (its log was truncated)."""
        snapshot = self._snapshot(table, version)
        if snapshot is None:
            return frozenset()
        return self._partition_paths(table, snapshot).get((tenant, month), frozenset())

    def data_files(self, table: Table, version: int | None = None) -> frozenset[str]:
        """Every data file (paths relative to the table) of a version, empty when the table
        does not exist. Raises LakeError when that version can no longer be read."""
        snapshot = self._snapshot(table, version)
        if snapshot is None:
            return frozenset()
        if snapshot.files is None:
            snapshot.files = frozenset().union(*self._partition_paths(table, snapshot).values())
        return snapshot.files

    @staticmethod
    def _partition_paths(table: Table, snapshot: _Snapshot) -> dict[Partition, frozenset[str]]:
        """A snapshot's data files by (tenant, month), worked out once per snapshot (an index
        build asks for them at every turn a live writer records)."""
        if snapshot.paths is None:
            with _translated(table, "inspect"):
                actions = pl.from_arrow(pa.table(snapshot.table.get_add_actions(flatten=True)))
            assert isinstance(actions, pl.DataFrame)
            grouped: dict[Partition, set[str]] = {}
            if actions.height:
                for path, tenant, month in actions.select(
                        "path", "partition.tenant", "partition.month").iter_rows():
                    grouped.setdefault((tenant, month), set()).add(path)
            snapshot.paths = {part: frozenset(paths) for part, paths in grouped.items()}
        return snapshot.paths

    def read_files(self, table: Table, paths: Collection[str], *, columns: Sequence[str],
                   version: int | None = None) -> pa.Table:
        """Read columns of the given data files only (paths as :meth:`partition_files` names
        them): what an append added, without scanning the rest of its partition."""
        wanted = set(paths)
        snapshot = self._snapshot(table, version) if wanted else None
        if snapshot is None:
            return SCHEMAS[table].empty_table().select(list(columns))
        if not self.root.remote:
            return self._read_local_files(table, snapshot, wanted, columns)
        dataset = self.dataset(table, version)
        if not isinstance(dataset, ds.FileSystemDataset):
            return SCHEMAS[table].empty_table().select(list(columns))
        root = self.uri(table).rstrip("/")
        fragments = [f for f in dataset.get_fragments() if _relative(f.path, root) in wanted]
        with _translated(table, "read"):
            return ds.FileSystemDataset(fragments, dataset.schema, dataset.format,
                                        dataset.filesystem).to_table(columns=list(columns))

    def read_partition(self, table: Table, tenant: str, month: str, *, columns: Sequence[str],
                       version: int | None = None) -> pa.Table:
        """Read columns of one partition at a version, from its own data files: a filtered
        scan would list every file of the version with its partition values first (~200 ms
        a table at 1,012 partitions, against 13-40 ms for the partition's files)."""
        return self.read_files(table, self.partition_files(table, tenant, month, version),
                               columns=columns, version=version)

    def _read_local_files(self, table: Table, snapshot: _Snapshot, wanted: set[str],
                          columns: Sequence[str]) -> pa.Table:
        """:meth:`read_files` on a local lake: a dataset of just those files. (Listing the
        whole version's files into a dataset, then picking fragments out of it, cost ~6 ms a
        read on a live-written table, twice for every turn a live writer indexes.)"""
        partition_of = self._partition_of(table, snapshot)
        unknown = sorted(wanted - partition_of.keys())
        if unknown:
            raise LakeError(f"read on table {table.value}: {unknown[0]!r} is not a data file "
                            f"of version {snapshot.key[0]}")
        chosen = sorted(wanted)
        names = PARTITIONS[table]
        folder = self.path(table)
        with _translated(table, "read"):
            dataset = ds.FileSystemDataset.from_paths(
                [str(folder / path) for path in chosen], schema=SCHEMAS[table],
                format=ds.ParquetFileFormat(), filesystem=pafs.LocalFileSystem(),
                partitions=[_partition_expression(names, partition_of[path])
                            for path in chosen])
            return dataset.to_table(columns=list(columns))

    @classmethod
    def _partition_of(cls, table: Table, snapshot: _Snapshot) -> dict[str, Partition]:
        """Each data file's (tenant, month), once per snapshot."""
        if snapshot.partition_of is None:
            snapshot.partition_of = {path: part for part, paths
                                     in cls._partition_paths(table, snapshot).items()
                                     for path in paths}
        return snapshot.partition_of

    def vacuum(self, table: Table, *, full: bool = False) -> list[str]:
        """Physically remove data files no longer referenced by the current version.

        ``full`` also removes files no commit ever referenced (left by crashed writers).
        """
        return self._vacuum(table, full=full, dry_run=False)

    def truncate_log(self, table: Table) -> int:
        """Checkpoint the table and delete every older log entry; returns log files removed.

        Old commits name removed files and carry delete predicates; after a purge nobody may
        travel back to them (their data files are vacuumed), so they are dropped too.
        """
        self.checkpoint(table)
        return self.cleanup_log(table)

    # -- table upkeep (turnlake maintain): file statistics and compaction --------------------
    # Kept apart from the readers and writers above: these only rewrite files into fewer,
    # larger ones (a commit with dataChange=false) or report on them.

    def file_stats(self, table: Table) -> dict[tuple[str, ...], FileStats]:
        """The current version's data files per partition (partition values in the order of
        the table's partition columns; ``()`` for an unpartitioned table)."""
        dt = self.open(table)
        if dt is None:
            return {}
        with _translated(table, "inspect"):
            actions = pa.table(dt.get_add_actions(flatten=True))
        columns = [f"partition.{name}" for name in PARTITIONS[table]]
        keys = zip(*(actions.column(c).to_pylist() for c in columns), strict=True) \
            if columns else (() for _ in range(actions.num_rows))
        out: dict[tuple[str, ...], FileStats] = {}
        for key, size, records in zip(keys, actions.column("size_bytes").to_pylist(),
                                      actions.column("num_records").to_pylist(), strict=True):
            seen = out.get(tuple(key), FileStats())
            out[tuple(key)] = FileStats(seen.files + 1, seen.bytes + int(size),
                                        seen.rows + int(records or 0))
        return out

    def compact(self, table: Table, partition: tuple[str, ...], *,
                target_bytes: int = COMPACT_TARGET_BYTES) -> Compaction:
        """Rewrite one partition's small data files into files of about ``target_bytes``, in
        one commit that changes no row (none when there is nothing to merge).

        The replaced files stay on disk, referenced by older versions, until a vacuum.
        """
        names = PARTITIONS[table]
        if len(partition) != len(names):
            raise LakeError(f"compact on table {table.value}: partition {partition!r} does "
                            f"not name the partition columns {names}")
        dt = self.ensure(table)
        filters: list[tuple[str, str, Any]] = [
            (name, "=", value) for name, value in zip(names, partition, strict=True)]
        with _translated(table, "compact"):
            metrics = dt.optimize.compact(partition_filters=filters or None,
                                          target_size=target_bytes, writer_properties=_WRITER)
        return Compaction(files_removed=int(metrics.get("numFilesRemoved", 0)),
                          files_added=int(metrics.get("numFilesAdded", 0)))

    def log_files(self, table: Table) -> int:
        """How many entries (commits and checkpoints) the table's Delta log folder holds."""
        return sum(1 for name in self._log_names(table)
                   if name.endswith((".json", ".parquet")) and name[:1].isdigit())

    def committed_at(self, table: Table) -> float | None:
        """When the table's newest commit was made (seconds since the epoch), or None."""
        dt = self.open(table)
        if dt is None:
            return None
        with _translated(table, "history"):
            history = dt.history(1)
        return float(history[0]["timestamp"]) / 1000.0 if history else None

    def checkpoint(self, table: Table) -> None:
        """Write a checkpoint of the current version, so that ``cleanup_log`` may then drop
        every older entry (see ``truncate_log``)."""
        dt = self._open_fresh(table)
        if dt is None:
            return
        with _translated(table, "checkpoint"):
            dt.create_checkpoint()

    def cleanup_log(self, table: Table) -> int:
        """Delete the log entries older than the newest checkpoint; returns how many went.

        A reader opening the table lists the log first and reads the entries after, so one
        that listed before the checkpoint was written needs the older entries a moment longer.
        The table's log retention is lowered to none for the cleanup only: left so, every
        automatic checkpoint would do the same behind the readers of a live lake.
        """
        dt = self._open_fresh(table)
        if dt is None:
            return 0
        before = set(self._log_names(table))
        with _translated(table, "log cleanup"):
            dt.alter.set_table_properties({_LOG_RETENTION: _NO_LOG_RETENTION})
            dt.update_incremental()
            try:
                dt.cleanup_metadata()
            finally:
                # A crash before this leaves zero days: the next write through ensure()
                # sets the standing retention again (_evolved).
                dt.alter.set_table_properties({_LOG_RETENTION: _STANDING_LOG_RETENTION})
                dt.update_incremental()
        return len(before - set(self._log_names(table)))

    def _vacuum(self, table: Table, *, full: bool, dry_run: bool) -> list[str]:
        # Zero retention, deliberately: deltalake's default keeps a week of old files.
        dt = self._open_fresh(table)
        if dt is None:
            return []
        with _translated(table, "vacuum dry run" if dry_run else "vacuum"):
            paths: list[str] = dt.vacuum(retention_hours=0, dry_run=dry_run,
                                         enforce_retention_duration=False, full=full)
        return paths

    def vacuumable(self, table: Table) -> list[str]:
        """The data files a ``vacuum(full=True)`` would remove now (nothing is removed)."""
        found = self._vacuum(table, full=True, dry_run=True)
        # The checkpoint keeps tombstones of files already vacuumed (for the table's deleted
        # file retention); deltalake lists those again.
        return [path for path in found
                if self.root.blobs.exists(f"tables/{table.value}/{path}")]


class _SnapshotRegistry:
    """The process's kept table snapshots: the two newest versions of each table (an index
    build reads the one it indexed last beside the latest), for the most recently used
    tables (a test run or a multi-lake host opens many)."""

    def __init__(self, per_table: int = 2, tables: int = 256) -> None:
        self._per_table = per_table
        self._tables = tables
        self._kept: OrderedDict[str, list[_Snapshot]] = OrderedDict()
        self._lock = threading.Lock()

    def find(self, uri: str, key: tuple[int, str]) -> _Snapshot | None:
        """The kept snapshot of the table at ``uri`` with ``key``, if there is one."""
        with self._lock:
            for kept in self._kept.get(uri, ()):
                if kept.key == key:
                    self._kept.move_to_end(uri)
                    return kept
        return None

    def holds(self, uri: str) -> bool:
        """Whether a snapshot of the table at ``uri`` is kept."""
        with self._lock:
            return uri in self._kept

    def keep(self, uri: str, snapshot: _Snapshot) -> None:
        """Keep ``snapshot`` of the table at ``uri`` (replacing one of the same version)."""
        with self._lock:
            kept = [k for k in self._kept.get(uri, []) if k.key[0] != snapshot.key[0]]
            kept.append(snapshot)
            kept.sort(key=lambda k: k.key[0])
            self._kept[uri] = kept[-self._per_table:]
            self._kept.move_to_end(uri)
            while len(self._kept) > self._tables:
                self._kept.popitem(last=False)


@dataclass
class _Snapshot:
    """A table handle at one commit (``key``: its version and the commit file's stamp), and
    what has been worked out of it: a snapshot never changes, so neither do these."""

    key: tuple[int, str]
    table: DeltaTable
    paths: dict[Partition, frozenset[str]] | None = None
    files: frozenset[str] | None = None
    fingerprints: dict[Partition, str] | None = None
    dataset: ds.Dataset | None = None
    partition_of: dict[str, Partition] | None = None


_SNAPSHOTS = _SnapshotRegistry()


@dataclass(frozen=True)
class FileStats:
    """Data files of one partition at a table's current version."""

    files: int = 0
    bytes: int = 0
    rows: int = 0


@dataclass(frozen=True)
class Compaction:
    """What compacting one partition did."""

    files_removed: int
    files_added: int
