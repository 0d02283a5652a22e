"""Preparing ingest input: parse, validate, resolve hosted files and project rows for a chunk.

This is the CPU-heavy half of ingest and changes nothing a reader or a later batch can see, so
chunks can be prepared in worker processes while the main process deduplicates, numbers and
commits them in order. Its only writes go to the run's staging folder, in worker processes:
the costly file-system half of storing hosted bytes (small files packed, one pack per chunk,
large ones each in a file of its own, whose key's folders are made too), from which a batch's
commit moves them into place, and each chunk's rows, handed to the main process as an Arrow
file it maps rather than through the pipe (see PreparedChunk.spill).
"""

from __future__ import annotations

import array
import hashlib
import itertools
import os
import pickle
import stat
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from lake.errors import LakeError, RecordError, RefError
from lake.filestore import PACKED_FILE_BYTES, FileStore, PackWriter, PendingFile
from lake.projection import StoredFile, TurnProjector, event_data
from lake.records import TurnRecord, parse_record
from lake.refs import file_ref, normalize_relative_path
from lake.settings import Settings
from lake.tables import Table
from pipeline.sources import FileSpan, LineRun, SourceLine, SourceProblem
from pipeline.workers import cyclic_gc_paused

TurnKey = tuple[str, str, str]
UNSET_BATCH = ""
_SPILLED = (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.EVENTS, Table.FILES)


@dataclass(frozen=True)
class Quarantined:
    """A line that was not accepted, and why."""

    source_file: str
    line: int
    reason: str
    raw: str
    field: str | None = None  # the record field at fault, when there is one
    # A turn stored with other content (pipeline/conflicts.py): the one refusal a front end
    # has a way out of to advise (the CLI's --replace), each its own.
    conflict: bool = False


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
    spilled: str | None = None  # the Arrow file holding ``tables`` (see spill)

    @property
    def turns(self) -> int:
        """How many turns the chunk accepted."""
        return len(self.positions)

    def spill(self, folder: str) -> None:
        """Move the tables into a new Arrow IPC file of a staging folder.

        A worker's chunk reaches the main process through a pipe: pickled, its tables (about
        4 kB per turn) are copied into the pipe, out of it and into new memory again, with a
        page fault for every 4 kB, all in the serial half of an ingest. Written to a file once
        and memory-mapped by :meth:`unspill`, they are read in place from the page cache.
        """
        path = FileStore.stage_path(folder, f"{uuid.uuid4().hex}.arrows")
        try:
            with pa.OSFile(path, "wb") as sink:
                for table in _SPILLED:
                    with pa.ipc.new_stream(sink, self.tables[table].schema) as stream:
                        stream.write_table(self.tables[table])
        except OSError as exc:
            raise LakeError(f"could not stage a prepared chunk in {folder}: {exc}") from exc
        self.tables, self.spilled = {}, path

    def unspill(self) -> None:
        """Map the tables :meth:`spill` wrote (zero-copy) and remove their file, whose pages
        the mapping keeps until the tables are freed."""
        if self.spilled is None:
            return
        path, self.spilled = self.spilled, None
        try:
            source = pa.memory_map(path)
            os.unlink(path)
            tables: dict[Table, pa.Table] = {}
            for table in _SPILLED:
                with pa.ipc.open_stream(source) as stream:
                    tables[table] = stream.read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            raise LakeError(f"could not read the prepared chunk staged in {path}: {exc}") from exc
        self.tables = tables


@dataclass(frozen=True)
class PackedLines:
    """A chunk of input in the form sent to a worker process: each path once, then flat
    arrays: per line the index of its path and its line number, the raw lines joined in one
    bytes object (``ends`` marks where each stops) and, for a problem, its reason in
    ``reasons`` (its raw text is empty). Lines ``as_read`` from a file are stripped, and
    blank ones dropped, by :meth:`items`, in the worker.

    The main process, the serial part of an ingest, pickles a few buffers per chunk, not a
    tuple and a bytes object per line: a third of the time. A chunk that is one ``span`` of
    a large file holds none of its lines: the worker reads them.
    """

    paths: list[Path]
    path_of: array.array[int]
    numbers: array.array[int]
    ends: array.array[int]
    data: bytes
    reasons: dict[int, str]
    as_read: bool = False
    span: FileSpan | None = None  # lines located in a file, read by items() (see of_span)

    @classmethod
    def of(cls, items: list[SourceLine | SourceProblem]) -> PackedLines:
        """Pack a chunk of lines."""
        index: dict[Path, int] = {}
        path_of, numbers = array.array("i"), array.array("q")
        raws: list[bytes] = []
        reasons: dict[int, str] = {}
        last, number = None, -1
        for position, item in enumerate(items):
            if item.path is not last:  # runs of lines share one Path object
                last = item.path
                number = index.setdefault(last, len(index))
            path_of.append(number)
            numbers.append(item.line)
            if isinstance(item, SourceLine):
                raws.append(item.raw)
            else:
                raws.append(b"")
                reasons[position] = item.reason
        return cls._joined(index, path_of, numbers, raws, reasons)

    @classmethod
    def of_runs(cls, parts: list[LineRun | SourceProblem]) -> PackedLines:
        """Pack runs of lines as read from files (see :func:`pipeline.sources.read_runs`):
        nothing is done per line here, in the reading process."""
        index: dict[Path, int] = {}
        path_of, numbers = array.array("i"), array.array("q")
        raws: list[bytes] = []
        reasons: dict[int, str] = {}
        for part in parts:
            number = index.setdefault(part.path, len(index))
            if isinstance(part, SourceProblem):
                reasons[len(raws)] = part.reason
                path_of.append(number)
                numbers.append(part.line)
                raws.append(b"")
            else:
                path_of.extend(itertools.repeat(number, len(part.lines)))
                numbers.extend(range(part.first, part.first + len(part.lines)))
                raws += part.lines
        return cls._joined(index, path_of, numbers, raws, reasons, as_read=True)

    @classmethod
    def of_span(cls, span: FileSpan) -> PackedLines:
        """A chunk of lines located in a file and not read yet: the worker preparing it reads
        them, and nothing but their place is sent to it."""
        return cls([span.path], array.array("i"), array.array("q"), array.array("q"), b"", {},
                   as_read=True, span=span)

    @classmethod
    def _joined(cls, index: dict[Path, int], path_of: array.array[int],
                numbers: array.array[int], raws: list[bytes], reasons: dict[int, str],
                *, as_read: bool = False) -> PackedLines:
        ends = array.array("q", itertools.accumulate(map(len, raws)))
        return cls(list(index), path_of, numbers, ends, b"".join(raws), reasons, as_read)

    def __len__(self) -> int:
        """How many lines the chunk holds (blank ones included)."""
        return self.span.line_count if self.span is not None else len(self.numbers)

    def items(self) -> list[SourceLine | SourceProblem]:
        """The chunk's lines as read_lines would give them: blank ones dropped."""
        if self.span is not None:
            return self.span.items()
        paths, reasons, data, as_read = self.paths, self.reasons, self.data, self.as_read
        items: list[SourceLine | SourceProblem] = []
        start = 0
        for position, (path, line, end) in enumerate(
                zip(self.path_of, self.numbers, self.ends, strict=True)):
            if position in reasons:
                items.append(SourceProblem(paths[path], line, reasons[position]))
            else:
                raw = data[start:end].strip() if as_read else data[start:end]
                if raw or not as_read:
                    items.append(SourceLine(paths[path], line, raw))
            start = end
        return items


@dataclass(frozen=True)
class PreparedGroup:
    """A group of JSON lines given in memory under one source name (numbered from 1), prepared
    chunk by chunk as an ingest run prepares them (:func:`prepare_group`): what the service's
    decision on a recording hands to its commit (``Ingestor.ingest_prepared``), so that a
    turn recorded over HTTP is parsed, validated and projected once."""

    source: str
    chunks: list[tuple[PackedLines, PreparedChunk]]

    @property
    def lines(self) -> int:
        """How many lines the group holds."""
        return sum(chunk.lines for _, chunk in self.chunks)

    def sealed(self) -> SealedGroup:
        """The group as one bytes object (see :class:`SealedGroup`)."""
        return SealedGroup(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))


@dataclass(frozen=True)
class SealedGroup:
    """A :class:`PreparedGroup` pickled into one bytes object. The server hands a group from
    its acceptor child to its writer child through its own process: sealed, that process
    copies one buffer each way rather than rebuilding every Arrow column of the group and
    taking it apart again (about 2 ms a group, beside the searches). Only ever made by this
    module from our own children's groups, never from a request's bytes."""

    data: bytes

    def opened(self) -> PreparedGroup:
        """The prepared group again."""
        group = pickle.loads(self.data)  # only ever made by PreparedGroup.sealed
        assert isinstance(group, PreparedGroup)
        return group


def prepare_group(lines: Sequence[str], source: str, settings: Settings, *,
                  chunk_lines: int) -> PreparedGroup:
    """Prepare JSON ``lines`` given in memory under ``source`` in chunks of ``chunk_lines``,
    as an ingest run of them would (:func:`prepare_chunk` each)."""
    items: list[SourceLine | SourceProblem] = list(memory_lines(lines, source))
    chunks = []
    for start in range(0, len(items), chunk_lines):
        packed = PackedLines.of(items[start:start + chunk_lines])
        chunks.append((packed, prepare_chunk(packed.items(), settings)))
    return PreparedGroup(source, chunks)


def memory_lines(records: Iterable[TurnRecord | str], source: str) -> Iterator[SourceLine]:
    """Records given in memory as the lines of a source named ``source``, from line 1."""
    path = memory_source(source)
    for n, item in enumerate(records, start=1):
        raw = item.to_json() if isinstance(item, TurnRecord) else item
        yield SourceLine(path, n, raw.encode())


def prepare_packed(packed: PackedLines, settings: Settings,
                   staging: str | None = None) -> PreparedChunk:
    """:func:`prepare_chunk` for a chunk packed for a worker process; with ``staging`` (a
    folder of :meth:`FileStore.staging`) hosted bytes and the rows are written there rather
    than returned (:meth:`PreparedChunk.unspill` reads the rows back).
    """
    with cyclic_gc_paused():
        chunk = _prepare(packed.items(), settings, staging)
    if staging is not None:
        chunk.spill(staging)
    return chunk


def prepare_chunk(items: list[SourceLine | SourceProblem], settings: Settings) -> PreparedChunk:
    """Parse, validate and project a chunk of lines; a turn repeated inside the chunk is kept
    once (the first)."""
    with cyclic_gc_paused():
        return _prepare(items, settings)


def _prepare(items: list[SourceLine | SourceProblem], settings: Settings,
             staging: str | None = None) -> PreparedChunk:
    chunk = PreparedChunk(lines=len(items))
    files = FileStore(settings.lake)
    projector = TurnProjector(batch_id=UNSET_BATCH, ingested_at=datetime.now(UTC),
                              ttl=settings.ttl_days_for)
    seen: dict[TurnKey, tuple[int, bytes]] = {}  # the first line and payload of each turn
    limit = settings.max_hosted_file_bytes
    packs = PackWriter(staging) if staging is not None else None
    for position, item in enumerate(items):
        if isinstance(item, SourceProblem):
            chunk.quarantined.append(Quarantined(str(item.path), item.line, item.reason, ""))
            continue
        try:
            if not item.raw.isascii():
                _check_utf8(item.raw)
            record = parse_record(item.raw)
            hosted = _read_hosted_files(record, item.path, files, limit)
            texts = event_data(record)
        except (RecordError, RefError) as exc:
            chunk.quarantined.append(Quarantined(str(item.path), item.line, str(exc),
                                                 raw_text(item.raw), getattr(exc, "field", None)))
            continue
        key = (record.tenant, record.conversation_id, record.turn_id)
        payload = _payload(record)
        if key in seen:
            first_line, first_payload = seen[key]
            if payload == first_payload:
                chunk.duplicates += 1
            else:  # the same turn twice with other content: neither copy may vanish
                differs = differences(orjson.loads(first_payload), orjson.loads(payload))
                chunk.quarantined.append(Quarantined(str(item.path), item.line, (
                    f"conflict: turn {record.turn_id} of conversation {record.conversation_id} "
                    f"(tenant {record.tenant}) comes earlier in this input (line {first_line}) "
                    f"with different content (differs in: {', '.join(differs)})"
                    ), raw_text(item.raw), differing_field(differs)))
            continue
        seen[key] = (item.line, payload)
        stored: list[StoredFile] = []
        for file, data in hosted:
            # Only now, with the turn accepted: nothing is staged for a refused line.
            pending = _place(file.storage_key, data, files, packs)
            # Not dataclasses.replace, which costs several µs per call.
            stored.append(StoredFile(ref=file.ref, path=file.path, mime=file.mime,
                                     size=file.size, sha256=file.sha256,
                                     storage_key=pending.key, description=file.description))
            chunk.pending.append((projector.turns, pending))
        projector.add(record, ordinal=0, files=stored, payload=payload, data=texts)
        chunk.positions.append(position)
    if packs is not None:
        packs.close()
    chunk.tables = projector.tables()
    # Outside the per-line handling: a symlinked folder in the store is the lake's problem,
    # not the line's, and fails the ingest as storing the bytes would.
    files.make_folders(file.key for _, file in chunk.pending)
    return chunk


# Fields whose items are compared one level deeper, so a reason says "completion.status".
_NESTED = ("completion", "usage", "feedback")
_MAX_NAMED = 6


def differences(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, ...]:
    """The names of the record fields that differ (``completion.text``, ``steps``...)."""
    names: list[str] = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if name in _NESTED and isinstance(before, dict) and isinstance(after, dict):
            names.extend(f"{name}.{k}" for k in sorted(set(before) | set(after))
                         if before.get(k) != after.get(k))
        else:
            names.append(name)
    if len(names) > _MAX_NAMED:
        names = [*names[:_MAX_NAMED], f"{len(names) - _MAX_NAMED} more"]
    return tuple(names) or ("field order",)


def differing_field(differs: tuple[str, ...]) -> str | None:
    """The field a conflict is first about (None when only the field order differs)."""
    if not differs or differs[0] == "field order" or differs[0].endswith(" more"):
        return None
    return differs[0]


def raw_text(raw: bytes) -> str:
    """A line as text for the quarantine table (undecodable bytes become U+FFFD)."""
    return raw.decode("utf-8", errors="replace")


def _check_utf8(raw: bytes) -> None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        # A line that already holds U+FFFD itself is left to the parser, as it always was.
        if b"\xef\xbf\xbd" not in raw:
            raise RecordError("line is not valid UTF-8") from None


def _place(loose_key: str, data: bytes, files: FileStore,
           packs: PackWriter | None) -> PendingFile:
    """Where a hosted file's bytes go: into a pack (small files, in a worker), a staged file
    of their own under ``loose_key`` in the packs' staging folder (large ones, in a worker),
    or to the commit as they are (no staging, no packs)."""
    if packs is None:
        return PendingFile(loose_key, data)
    if len(data) <= PACKED_FILE_BYTES:
        return packs.add(data)
    return PendingFile(loose_key, staged=files.stage(data, packs.folder))


def _read_hosted_files(record: TurnRecord, source: Path, files: FileStore,
                       limit: int) -> list[tuple[StoredFile, bytes]]:
    """A record's hosted files, checked and read: each catalog entry (keyed as a loose
    object until placed) with its bytes."""
    hosted_bytes: list[tuple[StoredFile, bytes]] = []
    seen_paths: set[str] = set()
    for hosted in record.hosted_files:
        try:
            key = files.key_for(record.tenant, record.conversation_id, record.turn_id,
                                hosted.path)
        except RefError as exc:
            raise RecordError(str(exc), field="hosted_files.path") from exc
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
        hosted_bytes.append((StoredFile(
            ref=file_ref(record.conversation_id, record.turn_id, hosted.path),
            path=hosted.path, mime=hosted.mime, size=len(data),
            sha256=hashlib.sha256(data).hexdigest(), storage_key=key,
            description=hosted.description), data))
    return hosted_bytes


def _payload(record: TurnRecord) -> bytes:
    """The TurnLog payload: the accepted record, with hosted bytes replaced by their refs."""
    return record.to_json_bytes(without_hosted_bytes=True)


def memory_source(label: str) -> Path:
    """The stand-in path of records given in memory (``<label>``): they have no record file,
    so no folder a ``source_path`` could be read from."""
    return Path(label if label.startswith("<") and label.endswith(">") else f"<{label}>")


def is_memory_source(path: Path) -> bool:
    """Whether ``path`` stands for records given in memory (see :func:`memory_source`)."""
    return path.parent == Path(".") and path.name.startswith("<") and path.name.endswith(">")


def _read_source_file(source_path: str, record_file: Path, limit: int, hosted_path: str) -> bytes:
    """The bytes of a ``source_path``: a regular file inside the record file's folder.

    Absolute paths, ``..`` and symlinks that leave the folder are refused, so a record cannot
    pull an arbitrary file the ingesting process can read (``/etc/passwd``) into the lake.
    Records given in memory (the service's, a live writer's) have no folder: the current
    directory of the process that ingests them is nobody's to read from, so they are refused."""
    where = "hosted_files.source_path"
    if is_memory_source(record_file):
        raise RecordError(f"hosted file {hosted_path}: source_path is only read beside a record "
                          "file; a record sent as data (over HTTP, to a live writer) must carry "
                          "the file's bytes in content_b64", field=where)
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
