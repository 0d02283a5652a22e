"""``turnlake ingest``: read record files, validate, quarantine bad lines, write turns in batches.

Lines are prepared (parsed, validated, projected) in chunks — in worker processes for large
inputs — and committed in input order: each batch by :class:`lake.batches.BatchCommitter`
(all-or-nothing per turn) under the lake's writer lock, after recovering whatever a crashed
writer left behind.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lake.batches import BatchCommitter
from lake.faults import NO_FAULTS, Faults
from lake.filestore import FileStore, PendingFile, blank_staged
from lake.locks import writer_lock
from lake.records import TurnRecord
from lake.resolver import UnresolvedMention, unresolved_mentions
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import QUARANTINE, TURN_LOGS, Table
from pipeline.conflicts import Candidate, Conflict, find_conflicts
from pipeline.known_turns import KnownTurns
from pipeline.prepare import (
    PackedLines,
    PreparedChunk,
    PreparedGroup,
    Quarantined,
    TurnKey,
    differences,
    memory_lines,
    prepare_chunk,
    prepare_group,
    prepare_packed,
    raw_text,
)
from pipeline.sources import (
    FileSpan,
    LineRun,
    SourceLine,
    SourceProblem,
    discover,
    read_spans,
)
from pipeline.workers import cyclic_gc_paused, init_worker, start_worker_server, worker_context

RowsHook = Callable[[pa.Table], pa.Table]
Item = SourceLine | SourceProblem
Chunks = Generator[tuple[PackedLines, PreparedChunk], None, None]
CHUNK_LINES = 2000
PARALLEL_MIN_LINES = 8000
# Chunks the ingesting process prepares itself while a fork server starts (about 0.4 s, in
# which it prepares two).
CHUNKS_WHILE_BOOTING = 2
# How many lines workers may prepare ahead of the commits: enough for a whole batch, so they
# keep working while the main process commits the previous one.
AHEAD_LINES = 64_000
# Joins a turn's ids into one key; ids are letters, digits, '_' and '-' only.
_KEY_SEPARATOR = "\x1f"
_ROW_TABLES = (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.EVENTS, Table.FILES)
__all__ = ["Decision", "IngestReport", "Ingestor", "PendingTurns", "Quarantined", "TurnKey",
           "identities"]


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
    # Turns stored with other content: quarantined (and in ``quarantined``), or, when the
    # run holds them, in ``held`` for the job that supersedes (pipeline/supersede.py), which
    # counts the turns it superseded in ``replaced``.
    conflicts: list[Quarantined] = field(default_factory=list)
    held: list[Conflict] = field(default_factory=list)
    replaced: int = 0
    # conv:* refs the accepted turns' completions or summaries name that lead nowhere.
    unresolved_refs: list[UnresolvedMention] = field(default_factory=list)
    # The identities of the accepted turns, when the ingestor was asked for them
    # (``report_kept``): with ``quarantined`` (by line) they tell each line's outcome, every
    # other line being a duplicate. A host answering per turn asks; a bulk ingest would hold
    # millions.
    kept: set[TurnKey] = field(default_factory=set)


@dataclass(frozen=True)
class _Existing:
    """The stored TurnLogs of a batch's conversations, as _turns_of gives them."""

    turns: pa.Table

    @cached_property
    def keys(self) -> set[str]:
        """Their turn keys (see _turn_keys)."""
        return set(self.turns["key"].to_pylist())

    @cached_property
    def owners(self) -> dict[tuple[str, str], str]:
        """The user of each conversation."""
        turns = self.turns
        return dict(zip(zip(turns["tenant"].to_pylist(), turns["conversation_id"].to_pylist(),
                            strict=True), turns["user_id"].to_pylist(), strict=True))


@dataclass(frozen=True)
class _Prepared:
    """A prepared chunk, the lines it was prepared from and its turns' identities."""

    lines: PackedLines
    chunk: PreparedChunk
    turns: pa.Table  # row i: accepted turn i, as _turns_of gives it
    keys: list[str]  # the turns' keys (see _turn_keys)

    @cached_property
    def items(self) -> list[Item]:
        """The chunk's lines, unpacked only when a turn must be quarantined after all."""
        return self.lines.items()

    @classmethod
    def of(cls, lines: PackedLines, chunk: PreparedChunk) -> _Prepared:
        chunk.unspill()
        turns = _turns_of(chunk.tables[Table.TURN_LOGS])
        return cls(lines, chunk, turns, turns["key"].to_pylist())


class Ingestor:
    """Ingests record lines into a lake. ``progress`` is called with the number of lines read.

    With ``workers`` > 1, large inputs (``PARALLEL_MIN_LINES`` lines or more) are prepared by
    that many worker processes (see :func:`pipeline.workers.worker_context`); the calling
    script must then guard its entry point (``if __name__ == "__main__":``), as the CLI does.
    The default, 1, stays in-process. A turn stored with other content is a conflict
    (:mod:`pipeline.conflicts`): quarantined, or with ``hold_conflicts`` left out of the run
    and reported in ``IngestReport.held`` for the job that supersedes the stored turn
    (:mod:`pipeline.supersede`). With ``report_kept`` each report names the turns it kept
    (``IngestReport.kept``).
    """

    def __init__(self, settings: Settings, *, faults: Faults = NO_FAULTS,
                 rows_hook: RowsHook | None = None,
                 progress: Callable[[int], None] | None = None,
                 workers: int | None = None, store: LakeStore | None = None,
                 report_kept: bool = False) -> None:
        self._settings = settings
        self._workers = workers or 1
        self._store = store or LakeStore(settings.lake)
        self._materializer = TurnMaterializer(self._store)
        self._files = FileStore(settings.lake)
        self._committer = BatchCommitter(self._store, self._files, faults=faults)
        self._known = KnownTurns(self._store)  # kept across calls: a warm writer's view
        self._rows_hook = rows_hook
        self._progress = progress
        self._report_kept = report_kept

    def ingest_paths(self, paths: Sequence[Path], *,
                     hold_conflicts: bool = False) -> IngestReport:
        """Ingest every record file under the given files and folders."""
        files = discover(paths)
        return self._ingest_chunks(_packed_runs(files, self._chunk_lines()), hold_conflicts)

    def ingest_records(self, records: Iterable[TurnRecord | str], *, source: str = "<api>",
                       hold_conflicts: bool = False) -> IngestReport:
        """Ingest records given in memory (models or JSON strings), e.g. from the recorder."""
        return self.ingest_lines(memory_lines(records, source), hold_conflicts=hold_conflicts)

    def ingest_groups(self, groups: Sequence[tuple[str, Sequence[str]]]) -> IngestReport:
        """Ingest several groups of JSON lines given in memory, each with its own source name
        (lines numbered from 1 in each), in one run: one commit for all of them while they
        fit a batch. How the spools of stopped servers are committed (pipeline/service/
        spool.py).

        Each group is prepared in chunks of its own, as a run of its own would be: repeated
        lines are told apart within a group, while the turns of earlier groups count as an
        earlier batch's."""
        return self._ingest_chunks(
            PackedLines.of(chunk) for source, lines in groups
            for chunk in _chunked(memory_lines(lines, source), self._chunk_lines()))

    def ingest_prepared(self, groups: Iterable[PreparedGroup]) -> IngestReport:
        """:meth:`ingest_groups` of groups prepared already (by :meth:`decide`): the same run,
        without parsing and projecting their lines again. Which turns it keeps is decided
        anew against the stored turns, so a turn another writer committed meanwhile is a
        duplicate here whatever the decision said. ``groups`` is read inside the run, with
        the cyclic garbage collector paused (a generator that unseals them is worth it)."""
        return self._run(lambda _: (pair for group in groups for pair in group.chunks))

    def decide(self, records: Sequence[str], *, source: str,
               pending: PendingTurns | None = None) -> Decision:
        """What ingesting ``records`` (JSON lines, numbered from 1 as by
        :meth:`ingest_records`) would do — which turns it keeps, which lines it refuses and
        why — were the lake to hold, besides its stored turns, those of ``pending`` (turns
        decided but not committed yet). Nothing is written, and no lock is taken. The lines
        as prepared come with it, for :meth:`ingest_prepared` to commit.

        Decided as one batch: a turn kept earlier in ``records`` counts as an earlier batch's
        would, so the answer is an ingest's of the same lines."""
        pending = pending or PendingTurns.empty()
        group = prepare_group(records, source, self._settings, chunk_lines=self._chunk_lines())
        prepared = [_Prepared.of(lines, chunk) for lines, chunk in group.chunks]
        refused = [q for c in prepared for q in c.chunk.quarantined]
        if not prepared or not any(c.chunk.turns for c in prepared):
            return Decision(refused, _turns_of(TURN_LOGS.empty_table()), {}, group)
        turns = pa.concat_tables(c.turns for c in prepared)
        stored = self._existing_turns(turns)
        existing = _Existing(pa.concat_tables(
            [stored.turns, pending.of(turns).select(stored.turns.schema.names)]))
        sifted = _sifted(prepared, turns, set(), existing)
        refused += sifted.foreign
        if sifted.duplicates:
            refused += [c.entry for c in self._conflicting(
                prepared, sifted.drops, stored.keys, pending.payloads)]
        payloads: dict[str, str] = {}
        for c, drop in zip(prepared, sifted.drops, strict=True):
            texts = c.chunk.tables[Table.TURN_LOGS]["payload"].to_pylist()
            payloads.update((key, text) for key, text in zip(c.keys, texts, strict=True)
                            if key not in drop)
        return Decision(sorted(refused, key=lambda q: q.line), sifted.kept, payloads, group)

    def ingest_lines(self, lines: Iterable[Item], *,
                     hold_conflicts: bool = False) -> IngestReport:
        """Ingest raw lines; commits every ``ingest_batch_turns`` accepted turns."""
        return self._ingest_chunks(
            (PackedLines.of(chunk) for chunk in _chunked(lines, self._chunk_lines())),
            hold_conflicts)

    def _chunk_lines(self) -> int:
        # A chunk never holds more turns than a batch.
        return min(CHUNK_LINES, self._settings.ingest_batch_turns)

    def _ingest_chunks(self, chunks: Iterator[PackedLines],
                       hold_conflicts: bool = False) -> IngestReport:
        return self._run(lambda staging: self._prepared(chunks, staging), hold_conflicts)

    def _run(self, prepare: Callable[[str | None], Chunks],
             hold_conflicts: bool = False) -> IngestReport:
        """One ingest run under the writer lock, of the chunks ``prepare`` gives (in input
        order, with their lines) given the run's staging folder."""
        started = datetime.now(UTC)
        report = IngestReport()
        held = report.held if hold_conflicts else None
        with writer_lock(self._store.root, timeout_s=self._settings.lock_timeout_s,
                         job="turnlake ingest"), cyclic_gc_paused():
            recovery = self._committer.recover()
            report.recovered = recovery.rolled_back + recovery.completed
            # Opened after recovery, which sweeps what crashed runs staged; closed after the
            # last batch has moved its files out.
            with self._files.staging() as staging:
                self._ingest(prepare(staging), report, held)
        report.seconds = (datetime.now(UTC) - started).total_seconds()
        return report

    def _ingest(self, chunks: Chunks, report: IngestReport,
                held: list[Conflict] | None) -> None:
        seen: set[str] = set()  # keys of the turns this run kept
        waiting: list[_Prepared] = []
        turns = 0
        # Closed here, not whenever the generator is collected: a failed batch must stop the
        # workers before the staging folder they write into goes.
        with closing(chunks) as prepared:
            for lines, chunk in prepared:
                if self._progress is not None:
                    self._progress(chunk.lines)
                waiting.append(_Prepared.of(lines, chunk))
                turns += chunk.turns
                if turns >= self._settings.ingest_batch_turns:
                    self._flush(waiting, seen, report, held)
                    waiting, turns = [], 0
        if waiting:
            self._flush(waiting, seen, report, held)

    def _prepared(self, chunks: Iterator[PackedLines], staging: str | None
                  ) -> Generator[tuple[PackedLines, PreparedChunk], None, None]:
        """Prepared chunks (with their lines) in input order; large inputs are prepared by
        worker processes, which write hosted bytes into ``staging`` when it is given."""
        head: list[PackedLines] = []
        while (sum(map(len, head)) < PARALLEL_MIN_LINES
               and (nxt := next(chunks, None)) is not None):
            head.append(nxt)
        # Starting worker processes costs about a second: only worth it for large inputs.
        if sum(map(len, head)) < PARALLEL_MIN_LINES or self._workers < 2:
            return self._prepare_here(itertools.chain(head, chunks))
        return self._prepare_in_workers(itertools.chain(head, chunks), staging)

    def _prepare_here(self, chunks: Iterable[PackedLines]
                      ) -> Generator[tuple[PackedLines, PreparedChunk], None, None]:
        for lines in chunks:
            yield lines, prepare_chunk(lines.items(), self._settings)

    def _prepare_in_workers(self, chunks: Iterable[PackedLines], staging: str | None
                            ) -> Generator[tuple[PackedLines, PreparedChunk], None, None]:
        context = worker_context()
        chunks = iter(chunks)
        if start_worker_server():
            # No worker can start before the new fork server has imported what workers need:
            # the first chunks are prepared here meanwhile rather than waited for.
            for lines in itertools.islice(chunks, CHUNKS_WHILE_BOOTING):
                yield lines, prepare_packed(lines, self._settings, staging)
        ahead = max(2 * self._workers, AHEAD_LINES // self._chunk_lines())
        pool = ProcessPoolExecutor(self._workers, mp_context=context,
                                   initializer=init_worker, initargs=(os.getpid(),))
        try:
            window: deque[tuple[PackedLines, Future[PreparedChunk]]] = deque()
            for lines in chunks:
                window.append((lines, pool.submit(prepare_packed, lines, self._settings,
                                                  staging)))
                if len(window) >= ahead:
                    lines, future = window.popleft()
                    yield lines, future.result()
            while window:
                lines, future = window.popleft()
                prepared = future.result()
                if not window:
                    # Nothing is left to prepare: the workers exit while the last batch
                    # commits rather than after it (a quarter of a second of teardown).
                    pool.shutdown(wait=False)
                yield lines, prepared
        finally:
            # An ingest that stops early (a failed commit, an interrupt) must not first wait
            # for the chunks still queued ahead, which nobody will commit.
            pool.shutdown(wait=True, cancel_futures=True)

    def _flush(self, chunks: list[_Prepared], seen: set[str], report: IngestReport,
               held: list[Conflict] | None) -> None:
        """Commit one batch; conflicts go to ``held`` when it is given, else to the
        quarantine."""
        batch_id = f"b{datetime.now(UTC):%Y%m%d%H%M%S}-{uuid.uuid4().hex[:12]}"
        quarantine = [q for c in chunks for q in c.chunk.quarantined]
        report.duplicates += sum(c.chunk.duplicates for c in chunks)
        if quarantine:
            report.quarantined.extend(quarantine)
            new = self._not_yet_quarantined(quarantine)
            if new:
                self._store.append(Table.QUARANTINE, _quarantine_table(new, batch_id))
        turns = pa.concat_tables(c.turns for c in chunks)
        existing = self._existing_turns(turns)
        sifted = _sifted(chunks, turns, seen, existing)
        kept, pending = sifted.kept, sifted.pending
        report.duplicates += sifted.duplicates
        if sifted.duplicates:
            self._conflicts(chunks, sifted.drops, existing, report, batch_id, held)
        if sifted.foreign:
            report.quarantined.extend(sifted.foreign)
            new = self._not_yet_quarantined(sifted.foreign)
            if new:
                self._store.append(Table.QUARANTINE, _quarantine_table(new, batch_id))
        # Dropped turns' bytes may share a pack with kept ones: blanked before it is stored.
        blank_staged(sifted.not_stored)
        if not kept.num_rows:
            return
        report.partitions |= _pairs(kept, "tenant", "month")
        tables = {t: _with_batch_id(pa.concat_tables(
            _without_turns(c.chunk.tables[t], drop) for c, drop in zip(chunks, sifted.drops,
                                                                        strict=True)), batch_id)
                  for t in _ROW_TABLES}
        logs = tables[Table.TURN_LOGS]
        tables[Table.TURN_LOGS] = logs.set_column(
            logs.schema.get_field_index("ordinal"), "ordinal", _ordinals(kept, existing.turns))
        if self._rows_hook is not None:
            tables[Table.CONTENT_ROWS] = self._rows_hook(tables[Table.CONTENT_ROWS])
        new_conversations = _pairs(kept, "tenant", "conversation_id") - existing.owners.keys()
        self._committer.commit(batch_id, tables, pending, new_conversations=new_conversations,
                               appending=_appending(kept, existing.turns))
        report.accepted += kept.num_rows
        if self._report_kept:
            report.kept |= identities(kept)
        report.unresolved_refs += unresolved_mentions(
            self._materializer, tables[Table.TURN_LOGS], tables[Table.FILES])
        report.files_stored += len(pending)
        report.batches += 1
        report.rows_written += tables[Table.CONTENT_ROWS].num_rows

    def _conflicts(self, chunks: list[_Prepared], drops: list[set[str]], existing: _Existing,
                   report: IngestReport, batch_id: str, held: list[Conflict] | None) -> None:
        """Tell the dropped turns whose key is stored, or kept earlier in this batch, apart:
        the same content stays a duplicate, other content is a conflict, quarantined, or
        held (``held``) for the job that supersedes."""
        conflicts = self._conflicting(chunks, drops, existing.keys, {})
        report.duplicates -= len(conflicts)
        if held is not None:
            held.extend(conflicts)
            return
        entries = [c.entry for c in conflicts]
        report.conflicts.extend(entries)
        report.quarantined.extend(entries)
        new = self._not_yet_quarantined(entries) if entries else []
        if new:
            self._store.append(Table.QUARANTINE, _quarantine_table(new, batch_id))

    def _conflicting(self, chunks: list[_Prepared], drops: list[set[str]],
                     stored: set[str], undecided: Mapping[str, str]) -> list[Conflict]:
        """The dropped turns whose content differs from that of the turn of their key: the
        stored one (keys ``stored``), else one decided but not committed (``undecided``:
        key to payload), else one kept earlier in this batch."""
        candidates = []
        kept = dict(undecided)  # the payload of each turn kept so far, before this batch too
        earlier: list[Conflict] = []
        for c, drop in zip(chunks, drops, strict=True):
            payloads = c.chunk.tables[Table.TURN_LOGS]["payload"]
            for i, key in enumerate(c.keys):
                if key not in drop:
                    kept[key] = payloads[i].as_py()
                    continue
                if key not in stored and key not in kept:
                    continue  # another user's turn, or one an earlier batch kept
                tenant, conversation, turn = key.split(_KEY_SEPARATOR)
                line = c.items[c.chunk.positions[i]]
                assert isinstance(line, SourceLine)  # only parsed lines become turns
                candidate = Candidate(tenant, conversation, turn, payloads[i].as_py(), line)
                if key in stored:
                    candidates.append(candidate)
                elif candidate.payload != kept[key]:
                    earlier.append(Conflict(candidate, differences(
                        orjson.loads(kept[key]), orjson.loads(candidate.payload))))
        return find_conflicts(self._store, candidates) + earlier

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

    def _existing_turns(self, turns: pa.Table) -> _Existing:
        """The stored TurnLogs of the conversations of ``turns``."""
        pairs = _pairs(turns, "tenant", "conversation_id") if turns.num_rows else set()
        return _Existing(_turns_of(self._known.read(pairs)))


@dataclass(frozen=True)
class Decision:
    """What an ingest of some lines would do (:meth:`Ingestor.decide`)."""

    refused: list[Quarantined]  # by line: invalid, another user's conversation, a conflict
    kept: pa.Table  # the turns it keeps, as _turns_of gives them (with their keys)
    payloads: dict[str, str]  # each kept turn's TurnLog payload, by key
    prepared: PreparedGroup  # the lines as prepared, for Ingestor.ingest_prepared

    def kept_keys(self) -> set[TurnKey]:
        """The kept turns' identities (tenant, conversation_id, turn_id)."""
        return identities(self.kept)


@dataclass(frozen=True)
class PendingTurns:
    """Turns decided (kept) but not committed yet, which later decisions must count as
    stored: their rows as _turns_of gives them, and their payloads by key."""

    turns: pa.Table
    payloads: Mapping[str, str]

    @classmethod
    def empty(cls) -> PendingTurns:
        """No pending turn."""
        return cls(_turns_of(TURN_LOGS.empty_table()), {})

    def of(self, batch: pa.Table) -> pa.Table:
        """The pending turns of the conversations of ``batch`` (a _turns_of table)."""
        if not self.turns.num_rows:
            return self.turns
        wanted = pc.binary_join_element_wise(batch["tenant"], batch["conversation_id"],
                                             _KEY_SEPARATOR).unique()
        mine = pc.binary_join_element_wise(self.turns["tenant"], self.turns["conversation_id"],
                                           _KEY_SEPARATOR)
        return self.turns.filter(pc.is_in(mine, value_set=wanted))


def identities(turns: pa.Table) -> set[TurnKey]:
    """The identities (tenant, conversation_id, turn_id) of the rows of ``turns``."""
    return set(zip(turns["tenant"].to_pylist(), turns["conversation_id"].to_pylist(),
                   turns["turn_id"].to_pylist(), strict=True))


def _turns_of(logs: pa.Table) -> pa.Table:
    """What a batch needs of TurnLogs to deduplicate and number them: ids, user, month when
    there is one, start (µs since epoch) and key (see _turn_keys)."""
    turns = logs.select([name for name in ("tenant", "conversation_id", "turn_id", "user_id",
                                           "month") if name in logs.schema.names])
    turns = turns.append_column("started_at", logs["started_at"].cast(pa.int64()))
    return turns.append_column("key", _turn_keys(logs))


def _turn_keys(table: pa.Table) -> pa.ChunkedArray:
    """Each row's turn identity (tenant, conversation_id, turn_id) as one string."""
    return pc.binary_join_element_wise(table["tenant"], table["conversation_id"],
                                       table["turn_id"], _KEY_SEPARATOR)


def _pairs(table: pa.Table, first: str, second: str) -> set[tuple[str, str]]:
    """The distinct (first, second) value pairs of two string columns."""
    distinct = table.group_by([first, second], use_threads=False).aggregate([])
    return set(zip(distinct[first].to_pylist(), distinct[second].to_pylist(), strict=True))


def _all_new(turns: pa.Table, keys: list[list[str]], seen: set[str],
             existing: _Existing) -> bool:
    """Whether a batch keeps every one of its turns: none was seen before (in this run or the
    lake) or twice in the batch, and each conversation has one user, its owner's if it has
    stored turns. Column-wise, rather than one turn at a time as _sift decides."""
    if any(not seen.isdisjoint(chunk) for chunk in keys):
        return False
    if pc.count_distinct(turns["key"]).as_py() != turns.num_rows:
        return False
    if existing.turns.num_rows and pc.any(pc.is_in(
            turns["key"], value_set=existing.turns["key"].combine_chunks())).as_py():
        return False
    users = turns.group_by(["tenant", "conversation_id"], use_threads=False).aggregate(
        [("user_id", "count_distinct"), ("user_id", "min")])
    if pc.max(users["user_id_count_distinct"]).as_py() != 1:
        return False
    owners = existing.owners
    return not owners or all(
        owners.get((tenant, cid), user) == user for tenant, cid, user in zip(
            users["tenant"].to_pylist(), users["conversation_id"].to_pylist(),
            users["user_id_min"].to_pylist(), strict=True))


@dataclass(frozen=True)
class _Sifted:
    """Which turns of a batch are kept, and what becomes of the others."""

    kept: pa.Table  # the kept turns, as _turns_of gives them
    drops: list[set[str]]  # per chunk, the keys of the turns dropped from it
    pending: list[PendingFile]  # the hosted files of kept turns
    not_stored: list[PendingFile]  # those of dropped turns
    foreign: list[Quarantined]  # turns refused: another user's conversation
    duplicates: int  # turns dropped as already seen


def _sifted(chunks: list[_Prepared], turns: pa.Table, seen: set[str],
            existing: _Existing) -> _Sifted:
    """Which turns of a batch (``turns``: all of theirs) are kept: the usual batch,
    recognised column-wise, keeps every turn; any other is sifted turn by turn."""
    if _all_new(turns, [c.keys for c in chunks], seen, existing):
        return _keep_all(chunks, turns, seen)
    return _sift(chunks, seen, existing)


def _keep_all(chunks: list[_Prepared], turns: pa.Table, seen: set[str]) -> _Sifted:
    """Keep every turn of a batch (``turns``: all of theirs) that _all_new cleared."""
    for c in chunks:
        seen.update(c.keys)
    return _Sifted(turns, [set() for _ in chunks],
                   [file for c in chunks for _, file in c.chunk.pending], [], [], 0)


def _sift(chunks: list[_Prepared], seen: set[str], existing: _Existing) -> _Sifted:
    """Decide turn by turn, in input order, which turns of a batch are kept: not duplicates of
    turns seen before (in this run or the lake), nor another user's turn in a conversation."""
    owners = dict(existing.owners)
    kept: list[pa.Table] = []
    drops: list[set[str]] = []
    pending: list[PendingFile] = []
    not_stored: list[PendingFile] = []
    foreign: list[Quarantined] = []
    duplicates = 0
    for prepared in chunks:
        chunk, keys = prepared.chunk, prepared.keys
        drop = {k for k in keys if k in seen or k in existing.keys}
        duplicates += len(drop)
        kept_turns = [False] * len(keys)
        tenants = prepared.turns["tenant"].to_pylist()
        conversations = prepared.turns["conversation_id"].to_pylist()
        users = prepared.turns["user_id"].to_pylist()
        for i, key in enumerate(keys):
            if key in drop:
                continue
            owner = owners.setdefault((tenants[i], conversations[i]), users[i])
            if owner != users[i]:
                # A conversation belongs to one user: another user's turn in it would show
                # in the owner's history (and its timeline).
                foreign.append(_foreign(prepared.items[chunk.positions[i]], tenants[i],
                                        conversations[i], users[i]))
                drop.add(key)
                continue
            seen.add(key)
            kept_turns[i] = True
        for turn, file in chunk.pending:
            (pending if kept_turns[turn] else not_stored).append(file)
        kept.append(prepared.turns.filter(pa.array(kept_turns, pa.bool_())))
        drops.append(drop)
    return _Sifted(pa.concat_tables(kept), drops, pending, not_stored, foreign, duplicates)


def _ordinals(kept: pa.Table, stored: pa.Table) -> pa.Array:
    """1-based position of each kept turn in its conversation by start, counting the stored
    turns (``_turns_of`` tables both): after those that started at the same instant or
    earlier, and among themselves by start, then turn id, then input order."""
    keys = ["tenant", "conversation_id", "started_at"]
    new = pl.DataFrame(kept.select([*keys, "turn_id"])).with_columns(
        pl.lit(1, pl.Int8).alias("_new"), pl.int_range(pl.len(), dtype=pl.Int64).alias("_at"))
    old = pl.DataFrame(stored.select(keys)).with_columns(
        pl.lit("", pl.String).alias("turn_id"), pl.lit(0, pl.Int8).alias("_new"),
        pl.lit(-1, pl.Int64).alias("_at"))
    ranked = (pl.concat([new, old])
              .sort([*keys, "_new", "turn_id", "_at"])
              .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32)
                            .over(["tenant", "conversation_id"]).alias("ordinal"))
              .filter(pl.col("_new") == 1)
              .sort("_at"))
    return ranked["ordinal"].to_arrow()


def _appending(kept: pa.Table, stored: pa.Table) -> dict[tuple[str, str], int]:
    """The conversations of the kept turns that have stored turns, all of which come before
    every kept turn of theirs (by start, then turn id, as timelines order them), with how
    many turns they have stored (``_turns_of`` tables both)."""
    if not kept.num_rows or not stored.num_rows:
        return {}
    keys = ["tenant", "conversation_id"]
    order = ["started_at", "turn_id"]
    last = (pl.DataFrame(stored.select([*keys, *order])).sort([*keys, *order])
            .group_by(keys, maintain_order=True)
            .agg(pl.col("started_at").last().alias("last_at"),
                 pl.col("turn_id").last().alias("last_id"), pl.len().alias("count")))
    first = (pl.DataFrame(kept.select([*keys, *order])).sort([*keys, *order])
             .group_by(keys, maintain_order=True)
             .agg(pl.col("started_at").first(), pl.col("turn_id").first()))
    after = first.join(last, on=keys, how="inner").filter(
        (pl.col("started_at") > pl.col("last_at"))
        | ((pl.col("started_at") == pl.col("last_at")) & (pl.col("turn_id") > pl.col("last_id"))))
    return {(tenant, conversation): int(count) for tenant, conversation, count
            in after.select([*keys, "count"]).iter_rows()}


def _foreign(item: Item, tenant: str, conversation: str, user: str) -> Quarantined:
    """The quarantine entry of a turn another user's conversation refused."""
    assert isinstance(item, SourceLine)  # only parsed lines become turns
    return Quarantined(str(item.path), item.line, (
        f"conversation_id: conversation {conversation} of tenant {tenant} belongs to "
        f"another user; user {user} cannot add turns to it"), raw_text(item.raw), "user_id")


def _chunked(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _packed_runs(files: Iterable[Path], size: int) -> Iterator[PackedLines]:
    """The files' lines in chunks of at most ``size``; the runs of small files share one, and
    a large file's full runs are chunks of their own, located rather than read."""
    parts: list[LineRun | SourceProblem] = []
    count = 0
    for path in files:
        for part in read_spans(path, size):
            if isinstance(part, FileSpan):
                if parts:  # the lines before it go first
                    yield PackedLines.of_runs(parts)
                    parts, count = [], 0
                yield PackedLines.of_span(part)
                continue
            n = len(part.lines) if isinstance(part, LineRun) else 1
            if parts and count + n > size:
                yield PackedLines.of_runs(parts)
                parts, count = [], 0
            parts.append(part)
            count += n
    if parts:
        yield PackedLines.of_runs(parts)


def _without_turns(table: pa.Table, drop: set[str]) -> pa.Table:
    """The rows of turns whose keys (see _turn_keys) are not in ``drop``."""
    if not drop or table.num_rows == 0:
        return table
    dropped = pa.array(sorted(drop), pa.string())
    return table.filter(pc.invert(pc.is_in(_turn_keys(table), value_set=dropped)))


def _with_batch_id(table: pa.Table, batch_id: str) -> pa.Table:
    index = table.schema.get_field_index("batch_id")
    return table.set_column(index, "batch_id",
                            pa.repeat(pa.scalar(batch_id, pa.string()), table.num_rows))


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
