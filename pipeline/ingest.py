"""``turnlake ingest``: read record files, validate, quarantine bad lines, write turns in batches.

Each batch is committed by :class:`lake.batches.BatchCommitter` (all-or-nothing per turn) under
the lake's writer lock, after recovering whatever a crashed writer left behind.
"""

from __future__ import annotations

import bisect
import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from lake.batches import BatchCommitter, PendingFile
from lake.errors import RecordError, RefError
from lake.faults import NO_FAULTS, Faults
from lake.filestore import FileStore
from lake.locks import writer_lock
from lake.projection import StoredFile, TurnProjector, month_of
from lake.records import TurnRecord, parse_record
from lake.refs import file_ref
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import QUARANTINE, Table
from lake.timelines import conversation_filter
from pipeline.sources import SourceLine, SourceProblem, discover, read_lines

TurnKey = tuple[str, str, str]
RowsHook = Callable[[pa.Table], pa.Table]


@dataclass(frozen=True)
class Quarantined:
    """A line that was not accepted, and why."""

    source_file: str
    line: int
    reason: str
    raw: str


@dataclass
class IngestReport:
    """What one ingest run did."""

    accepted: int = 0
    duplicates: int = 0
    quarantined: list[Quarantined] = field(default_factory=list)
    files_stored: int = 0
    batches: int = 0
    rows_written: int = 0
    partitions: set[tuple[str, str]] = field(default_factory=set)
    recovered: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Accepted:
    record: TurnRecord
    files: list[StoredFile]
    pending: list[PendingFile]


@dataclass
class _Existing:
    keys: set[TurnKey] = field(default_factory=set)
    starts: dict[tuple[str, str], list[datetime]] = field(default_factory=dict)


class Ingestor:
    """Ingests record lines into a lake. ``progress`` is called with the number of lines read."""

    def __init__(self, settings: Settings, *, faults: Faults = NO_FAULTS,
                 rows_hook: RowsHook | None = None,
                 progress: Callable[[int], None] | None = None) -> None:
        self._settings = settings
        self._store = LakeStore(settings.lake)
        self._files = FileStore(settings.lake)
        self._committer = BatchCommitter(self._store, self._files, faults=faults)
        self._rows_hook = rows_hook
        self._progress = progress

    def ingest_paths(self, paths: Sequence[Path]) -> IngestReport:
        """Ingest every record file under the given files and folders."""
        files = discover(paths)
        return self.ingest_lines(line for path in files for line in read_lines(path))

    def ingest_records(self, records: Iterable[TurnRecord | str], *,
                       source: str = "<api>") -> IngestReport:
        """Ingest records given in memory (models or JSON strings), e.g. from the recorder."""
        def lines() -> Iterator[SourceLine]:
            for n, item in enumerate(records, start=1):
                raw = item.to_json() if isinstance(item, TurnRecord) else item
                yield SourceLine(Path(source), n, raw.encode())
        return self.ingest_lines(lines())

    def ingest_lines(self, lines: Iterable[SourceLine | SourceProblem]) -> IngestReport:
        """Ingest raw lines; commits every ``ingest_batch_turns`` accepted turns."""
        started = datetime.now(UTC)
        report = IngestReport()
        with writer_lock(self._store.root, timeout_s=self._settings.lock_timeout_s,
                         job="turnlake ingest"):
            recovery = self._committer.recover()
            report.recovered = recovery.rolled_back + recovery.completed
            seen: set[TurnKey] = set()
            batch: list[_Accepted] = []
            quarantine: list[Quarantined] = []
            for item in lines:
                if self._progress is not None:
                    self._progress(1)
                accepted = self._accept(item, quarantine)
                if accepted is None:
                    continue
                key = accepted.record.key
                if key in seen:
                    report.duplicates += 1
                    continue
                seen.add(key)
                batch.append(accepted)
                if len(batch) >= self._settings.ingest_batch_turns:
                    self._flush(batch, quarantine, report)
                    batch, quarantine = [], []
            if batch or quarantine:
                self._flush(batch, quarantine, report)
        report.seconds = (datetime.now(UTC) - started).total_seconds()
        return report

    def quarantine(self, items: Sequence[Quarantined]) -> int:
        """Record problems found outside ingest (e.g. by an importer) in the quarantine table;
        returns how many were new."""
        with writer_lock(self._store.root, timeout_s=self._settings.lock_timeout_s,
                         job="turnlake quarantine"):
            new = self._not_yet_quarantined(list(items))
            if new:
                batch_id = f"q{datetime.now(UTC):%Y%m%d%H%M%S}-{uuid.uuid4().hex[:12]}"
                self._store.append(Table.QUARANTINE, _quarantine_table(new, batch_id))
        return len(new)

    def _accept(self, item: SourceLine | SourceProblem,
                quarantine: list[Quarantined]) -> _Accepted | None:
        if isinstance(item, SourceProblem):
            quarantine.append(Quarantined(str(item.path), item.line, item.reason, ""))
            return None
        raw_text = item.raw.decode("utf-8", errors="replace")
        try:
            if "\ufffd" in raw_text and b"\xef\xbf\xbd" not in item.raw:
                raise RecordError("line is not valid UTF-8")
            record = parse_record(item.raw)
            files, pending = self._resolve_files(record, item.path)
        except (RecordError, RefError) as exc:
            quarantine.append(Quarantined(str(item.path), item.line, str(exc), raw_text))
            return None
        return _Accepted(record, files, pending)

    def _resolve_files(self, record: TurnRecord,
                       source: Path) -> tuple[list[StoredFile], list[PendingFile]]:
        stored: list[StoredFile] = []
        pending: list[PendingFile] = []
        limit = self._settings.max_hosted_file_bytes
        seen_paths: set[str] = set()
        for hosted in record.hosted_files:
            key = self._files.key_for(record.tenant, record.conversation_id, record.turn_id,
                                      hosted.path)
            if hosted.path in seen_paths:
                raise RecordError(f"hosted_files: path {hosted.path} appears twice",
                                  field="hosted_files.path")
            seen_paths.add(hosted.path)
            data = hosted.decoded_bytes()
            if data is None:
                data = _read_source_file(hosted.source_path or "", source, limit, hosted.path)
            if len(data) > limit:
                raise RecordError(f"hosted file {hosted.path} is {len(data)} bytes, over the "
                                  f"{limit}-byte limit", field="hosted_files")
            stored.append(StoredFile(
                ref=file_ref(record.conversation_id, record.turn_id, hosted.path),
                path=hosted.path, mime=hosted.mime, size=len(data),
                sha256=hashlib.sha256(data).hexdigest(), storage_key=key,
                description=hosted.description))
            pending.append(PendingFile(key, data))
        return stored, pending

    def _flush(self, batch: list[_Accepted], quarantine: list[Quarantined],
               report: IngestReport) -> None:
        batch_id = f"b{datetime.now(UTC):%Y%m%d%H%M%S}-{uuid.uuid4().hex[:12]}"
        existing = self._existing_turns({(a.record.tenant, a.record.conversation_id)
                                         for a in batch})
        fresh = [a for a in batch if a.record.key not in existing.keys]
        report.duplicates += len(batch) - len(fresh)
        if quarantine:
            report.quarantined.extend(quarantine)
            new = self._not_yet_quarantined(quarantine)
            if new:
                self._store.append(Table.QUARANTINE, _quarantine_table(new, batch_id))
        if not fresh:
            return
        projector = TurnProjector(batch_id=batch_id, ingested_at=datetime.now(UTC),
                                  ttl=self._settings.ttl_days_for)
        ordinals = _ordinals(fresh, existing.starts)
        for accepted, ordinal in zip(fresh, ordinals, strict=True):
            projector.add(accepted.record, ordinal=ordinal, files=accepted.files,
                          payload=_payload(accepted.record))
        tables = projector.tables()
        if self._rows_hook is not None:
            tables[Table.CONTENT_ROWS] = self._rows_hook(tables[Table.CONTENT_ROWS])
        pending = [p for a in fresh for p in a.pending]
        self._committer.commit(batch_id, tables, pending)
        report.accepted += len(fresh)
        report.files_stored += len(pending)
        report.batches += 1
        report.rows_written += tables[Table.CONTENT_ROWS].num_rows
        report.partitions |= {(a.record.tenant, month_of(a.record.started_at)) for a in fresh}

    def _not_yet_quarantined(self, items: list[Quarantined]) -> list[Quarantined]:
        """Drop lines an earlier run already quarantined, so re-running changes nothing."""
        if not self._store.exists(Table.QUARANTINE):
            return items
        files = sorted({q.source_file for q in items})
        known = self._store.read(Table.QUARANTINE, columns=["source_file", "line", "raw"],
                                 filter=ds.field("source_file").isin(files))
        seen = set(zip(known["source_file"].to_pylist(), known["line"].to_pylist(),
                       known["raw"].to_pylist(), strict=True))
        return [q for q in items if (q.source_file, q.line, q.raw) not in seen]

    def _existing_turns(self, conversations: set[tuple[str, str]]) -> _Existing:
        existing = _Existing()
        keys, starts = existing.keys, existing.starts
        if conversations and self._store.exists(Table.TURN_LOGS):
            logs = pl.from_arrow(self._store.read(
                Table.TURN_LOGS, columns=["tenant", "conversation_id", "turn_id", "started_at"],
                filter=conversation_filter(conversations)))
            assert isinstance(logs, pl.DataFrame)
            for tenant, cid, tid, at in logs.iter_rows():
                keys.add((tenant, cid, tid))
                starts.setdefault((tenant, cid), []).append(at)
        return existing


def _ordinals(batch: list[_Accepted],
              existing: dict[tuple[str, str], list[datetime]]) -> list[int]:
    """1-based position of each turn in its conversation by started_at, counting stored turns."""
    by_conv = {k: sorted(v) for k, v in existing.items()}
    new_by_conv: dict[tuple[str, str], list[tuple[datetime, str, int]]] = {}
    for i, a in enumerate(batch):
        r = a.record
        new_by_conv.setdefault((r.tenant, r.conversation_id), []).append(
            (r.started_at, r.turn_id, i))
    ordinals = [0] * len(batch)
    for conv, items in new_by_conv.items():
        old = by_conv.get(conv, [])
        for position, (at, _tid, i) in enumerate(sorted(items)):
            ordinals[i] = bisect.bisect_right(old, at) + position + 1
    return ordinals


def _payload(record: TurnRecord) -> str:
    """The TurnLog payload: the accepted record, with hosted bytes replaced by their refs."""
    if not record.hosted_files:
        return record.to_json()
    files = [f.model_copy(update={"content_b64": None, "source_path": None})
             for f in record.hosted_files]
    # model_copy skips validation, so the "exactly one source" rule does not fire here.
    return record.model_copy(update={"hosted_files": files}).to_json()


def _read_source_file(source_path: str, record_file: Path, limit: int, hosted_path: str) -> bytes:
    path = Path(source_path)
    if not path.is_absolute():
        path = record_file.parent / path
    try:
        size = path.stat().st_size
        if size > limit:
            raise RecordError(f"hosted file {hosted_path}: {path} is {size} bytes, over the "
                              f"{limit}-byte limit", field="hosted_files.source_path")
        return path.read_bytes()
    except OSError as exc:
        raise RecordError(f"hosted file {hosted_path}: cannot read source_path {path}: {exc}",
                          field="hosted_files.source_path") from exc


def _quarantine_table(items: list[Quarantined], batch_id: str) -> pa.Table:
    now = datetime.now(UTC)
    return pa.Table.from_pydict({
        "quarantined_at": [now] * len(items),
        "source_file": [q.source_file for q in items],
        "line": [q.line for q in items],
        "reason": [q.reason for q in items],
        "raw": [q.raw for q in items],
        "batch_id": [batch_id] * len(items),
    }, schema=QUARANTINE)
