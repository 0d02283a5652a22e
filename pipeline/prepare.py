"""Preparing ingest input: parse, validate, resolve hosted files and project rows for a chunk.

This is the CPU-heavy half of ingest and has no side effects, so chunks can be prepared in
worker processes while the main process deduplicates, numbers and commits them in order.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import os
import signal
import stat
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from lake.batches import PendingFile
from lake.errors import RecordError, RefError
from lake.filestore import FileStore
from lake.projection import StoredFile, TurnProjector
from lake.records import TurnRecord, parse_record
from lake.refs import file_ref, normalize_relative_path
from lake.settings import Settings
from lake.tables import Table
from pipeline.sources import SourceLine, SourceProblem

TurnKey = tuple[str, str, str]
UNSET_BATCH = ""


@dataclass(frozen=True)
class Quarantined:
    """A line that was not accepted, and why."""

    source_file: str
    line: int
    reason: str
    raw: str


@dataclass
class PreparedChunk:
    """The accepted records of a chunk of lines, projected into rows (ordinals and batch id
    still unset), plus the lines that were refused.

    Accepted turn ``i`` is row ``i`` of the ``turn_logs`` table (its key, user, start and
    month are read from there) and came from line ``positions[i]`` of the chunk's input.
    """

    positions: list[int] = field(default_factory=list)
    pending: list[tuple[int, PendingFile]] = field(default_factory=list)  # (turn, bytes)
    tables: dict[Table, pa.Table] = field(default_factory=dict)
    quarantined: list[Quarantined] = field(default_factory=list)
    duplicates: int = 0
    lines: int = 0

    @property
    def turns(self) -> int:
        """How many turns the chunk accepted."""
        return len(self.positions)


def die_with_parent(parent: int) -> None:
    """Worker initializer: on Linux, ask the kernel to SIGKILL this worker when its parent
    (pid ``parent``) dies, so a killed ingest leaves no orphan workers behind."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died while this worker was starting
        os._exit(1)


def prepare_chunk(items: list[SourceLine | SourceProblem], settings: Settings) -> PreparedChunk:
    """Parse, validate and project a chunk of lines; a turn repeated inside the chunk is kept
    once (the first)."""
    # Nearly every object made here lives until the chunk is projected, so the cyclic
    # collector would only rescan them again and again (about a tenth of the time); the few
    # cycles (tracebacks of refused lines) wait for its next run.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _prepare(items, settings)
    finally:
        if collecting:
            gc.enable()


def _prepare(items: list[SourceLine | SourceProblem], settings: Settings) -> PreparedChunk:
    chunk = PreparedChunk(lines=len(items))
    files = FileStore(settings.lake)
    projector = TurnProjector(batch_id=UNSET_BATCH, ingested_at=datetime.now(UTC),
                              ttl=settings.ttl_days_for)
    seen: set[TurnKey] = set()
    limit = settings.max_hosted_file_bytes
    for position, item in enumerate(items):
        if isinstance(item, SourceProblem):
            chunk.quarantined.append(Quarantined(str(item.path), item.line, item.reason, ""))
            continue
        try:
            if not item.raw.isascii():
                _check_utf8(item.raw)
            record = parse_record(item.raw)
            stored, pending = _resolve_files(record, item.path, files, limit)
        except (RecordError, RefError) as exc:
            chunk.quarantined.append(Quarantined(str(item.path), item.line, str(exc),
                                                 raw_text(item.raw)))
            continue
        key = (record.tenant, record.conversation_id, record.turn_id)
        if key in seen:
            chunk.duplicates += 1
            continue
        seen.add(key)
        if pending:
            chunk.pending += [(projector.turns, p) for p in pending]
        projector.add(record, ordinal=0, files=stored, payload=_payload(record))
        chunk.positions.append(position)
    chunk.tables = projector.tables()
    return chunk


def raw_text(raw: bytes) -> str:
    """A line as text for the quarantine table (undecodable bytes become U+FFFD)."""
    return raw.decode("utf-8", errors="replace")


def _check_utf8(raw: bytes) -> None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        # A line that already holds U+FFFD itself is left to the parser, as it always was.
        if "\ufffd" in raw_text(raw) and b"\xef\xbf\xbd" not in raw:
            raise RecordError("line is not valid UTF-8") from None


def _resolve_files(record: TurnRecord, source: Path, files: FileStore,
                   limit: int) -> tuple[list[StoredFile], list[PendingFile]]:
    stored: list[StoredFile] = []
    pending: list[PendingFile] = []
    seen_paths: set[str] = set()
    for hosted in record.hosted_files:
        key = files.key_for(record.tenant, record.conversation_id, record.turn_id, hosted.path)
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


def _payload(record: TurnRecord) -> str:
    """The TurnLog payload: the accepted record, with hosted bytes replaced by their refs."""
    if not record.hosted_files:
        return record.to_json()
    hosted = [f.model_copy(update={"content_b64": None, "source_path": None})
              for f in record.hosted_files]
    # model_copy skips validation, so the "exactly one source" rule does not fire here.
    return record.model_copy(update={"hosted_files": hosted}).to_json()


def _read_source_file(source_path: str, record_file: Path, limit: int, hosted_path: str) -> bytes:
    """The bytes of a ``source_path``: a regular file inside the record file's folder.

    Absolute paths, ``..`` and symlinks that leave the folder are refused, so a record cannot
    pull an arbitrary file the ingesting process can read (``/etc/passwd``) into the lake."""
    where = "hosted_files.source_path"
    try:
        relative = normalize_relative_path(source_path)
    except RefError as exc:
        raise RecordError(f"hosted file {hosted_path}: source_path {source_path!r} must be a "
                          f"relative path inside the record's folder ({exc})",
                          field=where) from exc
    base = record_file.parent.resolve()
    path = (base / relative).resolve()
    if not path.is_relative_to(base):
        raise RecordError(f"hosted file {hosted_path}: source_path {source_path!r} leaves the "
                          "record's folder", field=where)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise RecordError(f"hosted file {hosted_path}: source_path {source_path!r} is not "
                              "a regular file", field=where)
        if info.st_size > limit:
            raise RecordError(f"hosted file {hosted_path}: {path} is {info.st_size} bytes, over "
                              f"the {limit}-byte limit", field=where)
        return path.read_bytes()
    except OSError as exc:
        raise RecordError(f"hosted file {hosted_path}: cannot read source_path {path}: {exc}",
                          field=where) from exc
