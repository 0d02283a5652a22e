"""The writers: project accepted turn records into the rows of every lake table.

A minimal writer's turn yields one TurnLog, one ``user`` row per folded submission and one
``assistant`` row for the completion. A rich writer adds ``summary``, ``anchor``, ``note`` and
``attachment`` rows and timeline blocks.

Ingest projects tens of thousands of turns per batch, so rows are not walked out of the
records one Python object at a time: ``tables()`` has Arrow's JSON reader parse the canonical
payloads of all turns at once (in C++, timestamps included), and flattens, filters, sorts and
joins them column-wise into one Arrow table per Delta table, timeline blocks included. Per
turn, Python keeps only what needs the record's objects: TTL lookups and the JSON text of
event data.
On demo turns this takes 22 µs per turn, against 26 µs for a Python tuple per row: much of
that went to converting timestamps, since each of pydantic's carries a tzinfo whose
``utcoffset()`` is a call into Rust (0.49 µs per value for ``pa.array``). The plain
equivalent — rows walked out of each record — is the oracle of
``tests/lake/test_projection.py`` (search rows and timeline blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from lake.errors import RecordError
from lake.payload_schema import payload_schema
from lake.records import ContextEvent, LiveEvent, TurnRecord
from lake.tables import CONTENT_ROWS, EVENTS, FILES, ROLES, TS, TURN_LOGS, Table

# (tenant, app, role or None) -> ttl days, from the settings' policy.
TtlPolicy = Callable[[str, str, str | None], int]

_DAY_US = 86_400_000_000
_MAX_US = (datetime.max.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
    microseconds=1)
_STRING = pa.string()
_INT32 = pa.int32()
_INT64 = pa.int64()
# The roles a TTL is looked up for; None is the TurnLog's own (and its events' and files').
_TTL_ROLES: tuple[str | None, ...] = (None, *ROLES)


@dataclass(frozen=True)
class StoredFile:
    """A hosted file whose bytes are already in the file store."""

    ref: str
    path: str
    mime: str
    size: int
    sha256: str
    storage_key: str
    description: str | None


def month_of(dt: datetime) -> str:
    """The partition month ("YYYY-MM", UTC) of a timestamp."""
    return dt.astimezone(UTC).strftime("%Y-%m")


def months_of(instants: pa.Array) -> pa.Array:
    """The partition months ("YYYY-MM", UTC) of an array of UTC timestamps."""
    return pc.strftime(instants, format="%Y-%m")


def row_id(conversation_id: str, turn_id: str, role: str, seq: int) -> str:
    """The stable id of a content row, unique within its tenant."""
    return f"{conversation_id}.{turn_id}.{role}.{seq}"


# The JSON text of a record's context events' data, then of its live events' data.
EventData = tuple[list[str], list[str]]


def event_data(record: TurnRecord) -> EventData:
    """The JSON text the events table stores for the data of each of a record's context
    events and live events.

    Raises RecordError naming the event when orjson cannot store its data: an integer beyond
    64 bits, or nesting past 255 levels. Ingest calls this before it accepts a turn.
    """
    return (_data_texts(record.context_events, "context_events"),
            _data_texts(record.events, "events"))


def _data_texts(events: Sequence[ContextEvent | LiveEvent], where: str) -> list[str]:
    if not events:
        return []
    try:
        return [orjson.dumps(e.data).decode() for e in events]
    except orjson.JSONEncodeError:
        for i, e in enumerate(events):
            try:
                orjson.dumps(e.data)
            except orjson.JSONEncodeError as exc:
                raise RecordError(f"{where}.{i}.data: cannot be stored as JSON: {exc}",
                                  field=f"{where}.{i}.data") from None
        raise


# A files row: turn index, then the StoredFile's fields in FILES column order.
_FileRow = tuple[int, str, str, str, int, str, str | None, str]
# What add() keeps of a turn beyond its payload: ordinal, hosted files and the TTL days of
# each of _TTL_ROLES.
_TurnExtra = tuple[int, int, tuple[int, ...]]

# The parts of a canonical payload (TurnRecord.to_json_bytes) the rows are made of, typed by
# the record model itself. Arrow's JSON reader skips every other field; timestamps are parsed
# from pydantic's RFC 3339 spelling. The instants timeline blocks show are read as text (see
# _timeline_blocks) and cast after.
_PAYLOAD = payload_schema(TurnRecord, {
    **dict.fromkeys(("tenant", "app", "agent", "user_id", "conversation_id", "turn_id",
                     "writer", "started_at", "ended_at", "conversation_title"), True),
    "submissions": dict.fromkeys(("text", "event_type", "batch", "arrived_at"), True),
    "completion": dict.fromkeys(("text", "at", "status"), True),
    **dict.fromkeys(("summary", "anchors", "notes"), True),
    "attachments": dict.fromkeys(("text", "ref"), True),
    "context_events": dict.fromkeys(("kind", "at"), True),
    "steps": dict.fromkeys(("name", "status", "at", "detail"), True),
    "events": dict.fromkeys(("type", "at"), True),
    "usage": dict.fromkeys(("tokens_in", "tokens_out", "cost_usd", "duration_ms"), True),
    "feedback": dict.fromkeys(("rating", "comment"), True),
}, instants_as_timestamps=frozenset({"context_events.at", "steps.at", "events.at"}),
    timestamp=TS)
# One block for all payloads: a JSON object may not straddle two blocks, and a payload is as
# long as its texts make it (a completion of several megabytes would exceed the default 1 MB).
_READ = pa_json.ReadOptions(use_threads=False, block_size=1 << 30)
_PARSE = pa_json.ParseOptions(explicit_schema=_PAYLOAD, unexpected_field_behavior="ignore")


class TurnProjector:
    """Accumulates the rows of many turns; ``tables()`` returns one Arrow table per Delta table.

    A turn's rows are read from its payload, which must be the record's canonical JSON
    (:meth:`TurnRecord.to_json_bytes`, with or without hosted bytes); see the module docstring.
    """

    def __init__(self, *, batch_id: str, ingested_at: datetime, ttl: TtlPolicy) -> None:
        self._batch_id = batch_id
        self._ingested_at = ingested_at
        self._ttl = ttl
        # The policy is a pure function of the settings; most turns share (tenant, app), and
        # records with their own ttl_days share a few values: days per role, cached per each.
        self._policy_days: dict[tuple[str, str], tuple[int, ...]] = {}
        self._own_days: dict[int, tuple[int, ...]] = {}
        self._payloads: list[bytes] = []
        self._extras: list[_TurnExtra] = []
        # The JSON text of each context event's and live event's data, in payload order (a
        # step's data is made of its fields, column-wise).
        self._event_data: tuple[list[str], list[str]] = ([], [])
        self._files: list[_FileRow] = []
        self.turns = 0

    def add(self, record: TurnRecord, *, ordinal: int, files: list[StoredFile],
            payload: bytes, data: EventData | None = None) -> None:
        """Project one accepted record (its hosted files already stored) into rows;
        ``payload`` is its canonical JSON, UTF-8 encoded, and ``data`` its
        :func:`event_data`, made here when not given."""
        context, events = event_data(record) if data is None else data
        turn = self.turns
        self._payloads.append(payload)
        self._extras.append((ordinal, len(files), self._days_by_role(record)))
        self._event_data[0].extend(context)
        self._event_data[1].extend(events)
        if files:
            self._files += [(turn, f.ref, f.path, f.mime, f.size, f.sha256, f.description,
                             f.storage_key) for f in files]
        self.turns += 1

    def tables(self) -> dict[Table, pa.Table]:
        """The accumulated rows as Arrow tables in the lake's schemas."""
        if not self._payloads:
            return {t: s.empty_table() for t, s in ((Table.TURN_LOGS, TURN_LOGS),
                                                    (Table.CONTENT_ROWS, CONTENT_ROWS),
                                                    (Table.EVENTS, EVENTS), (Table.FILES, FILES))}
        parsed = _parse_payloads(self._payloads)
        column = parsed.column
        started_at = column("started_at").cast(TS)
        turn = _Turns(
            tenant=column("tenant"), month=months_of(started_at), app=column("app"),
            agent=column("agent"), user_id=column("user_id"),
            conversation_id=column("conversation_id"), turn_id=column("turn_id"),
            started_at=started_at, ended_at=column("ended_at").cast(TS))
        ordinal, hosted, days = zip(*self._extras, strict=True)
        blocks, block_count = self._timeline_blocks(parsed)
        # One row per turn, one column per entry of _TTL_ROLES.
        days_by_role = np.array(days, dtype=np.int64)
        expires_at = _plus_days(turn.ended_at, pa.array(days_by_role[:, 0]))
        usage = column("usage").flatten()
        rating, comment = column("feedback").flatten()
        n = parsed.num_rows
        logs = {
            "tenant": turn.tenant, "month": turn.month, "app": turn.app, "agent": turn.agent,
            "user_id": turn.user_id, "conversation_id": turn.conversation_id,
            "turn_id": turn.turn_id, "writer": column("writer"),
            "started_at": turn.started_at, "ended_at": turn.ended_at,
            "ordinal": pa.array(ordinal, _INT32),
            "submission_count": _lengths(column("submissions")),
            "block_count": block_count,
            "attachment_count": _lengths(column("attachments")),
            "hosted_file_count": pa.array(hosted, _INT32),
            "tokens_in": usage[0], "tokens_out": usage[1], "cost_usd": usage[2],
            "duration_ms": usage[3], "feedback_rating": rating,
            "feedback_has_comment": _non_empty(comment),
            "blocks": blocks, "title": column("conversation_title"),
            "expires_at": expires_at, "ingested_at": _constant(self._ingested_at, TS, n),
            "batch_id": _constant(self._batch_id, _STRING, n),
            "payload": pa.array(self._payloads, _STRING),
            "completion_status": _completion_status(column("completion")),
        }
        return {
            Table.TURN_LOGS: pa.Table.from_pydict(logs, schema=TURN_LOGS),
            Table.CONTENT_ROWS: self._content_table(parsed, turn, days_by_role),
            Table.EVENTS: self._events_table(parsed, turn, expires_at),
            Table.FILES: self._files_table(turn, expires_at),
        }

    def _days_by_role(self, record: TurnRecord) -> tuple[int, ...]:
        """The TTL in days of each of _TTL_ROLES (None first: the TurnLog's) for a record: its
        own ``ttl_days``, else the policy's for its tenant and app."""
        own = record.ttl_days
        if own:
            days = self._own_days.get(own)
            if days is None:
                days = self._own_days[own] = (own,) * len(_TTL_ROLES)
            return days
        key = (record.tenant, record.app)
        days = self._policy_days.get(key)
        if days is None:
            days = self._policy_days[key] = tuple(self._ttl(*key, role) for role in _TTL_ROLES)
        return days

    def _timeline_blocks(self, parsed: pa.Table) -> tuple[pa.Array, pa.Array]:
        """Each turn's blocks for its conversation's conv.timeline.v1, as compact JSON text,
        and how many there are.

        A minimal writer's turn has none. A rich writer's has, in this order, one per
        submission (``user.<event_type>``), attachment, hosted file and summary, then the
        completion's. Each is ``{"turn_id", "type", "at", "ref"}``: it names what was accepted,
        when (as ``datetime.isoformat()`` spells the record's instant) and where to find it,
        never the text itself.

        Built column-wise: per turn in Python, each instant's ``isoformat()`` alone cost 2 µs
        (pydantic's tzinfo answers ``utcoffset()`` from Rust), a tenth of preparing a turn.
        """
        column = parsed.column
        n = parsed.num_rows
        rich = pc.equal(column("writer"), "rich")
        every_turn = pa.array(np.arange(n, dtype=np.int32))
        rich_turns = every_turn.filter(rich)
        base = pc.binary_join_element_wise(
            "conv_", column("conversation_id"), ".turn_", column("turn_id"), "")
        started, ended = _isoformat(column("started_at")), _isoformat(column("ended_at"))
        submissions = _Items.of(column("submissions")).of_turns(rich)
        attachments = _Items.of(column("attachments")).of_turns(rich)
        files = self._file_refs().of_turns(rich)
        summarized = every_turn.filter(pc.and_(rich, _non_empty(column("summary"))))
        completion_at = pc.struct_field(column("completion"), "at")
        attachment_ref = attachments.field("ref")
        parts = [
            _block_rows(submissions.parent, submissions.seq,
                        pc.binary_join_element_wise("user.", submissions.field("event_type"), ""),
                        _isoformat(submissions.field("arrived_at")),
                        _ar_refs(base, submissions, "submissions")),
            _block_rows(attachments.parent, attachments.seq, "attachment",
                        started.take(attachments.parent),
                        pc.if_else(_non_empty(attachment_ref), _json_text(attachment_ref),
                                   _ar_refs(base, attachments, "attachments"))),
            _block_rows(files.parent, files.seq, "file", ended.take(files.parent),
                        _json_text(files.values)),
            _block_rows(summarized, None, "summary", ended.take(summarized),
                        pc.binary_join_element_wise("conv:ws:", base.take(summarized),
                                                    ".summary", "")),
            _block_rows(rich_turns, None, "assistant.completion",
                        _isoformat(completion_at.take(rich_turns)),
                        pc.binary_join_element_wise("conv:ar:", base.take(rich_turns),
                                                    ".completion", "")),
        ]
        # A turn's blocks in the order above: by kind, then position.
        rows = pa.concat_tables(
            part.append_column("rank", _constant(rank, _INT32, part.num_rows))
            for rank, part in enumerate(parts)).sort_by(
                [("turn", "ascending"), ("rank", "ascending"), ("seq", "ascending")])
        ids = column("turn_id").take(rows.column("turn"))
        elements = pc.binary_join_element_wise(
            '{"turn_id":"', ids, '","type":"', rows.column("type"), '","at":"', rows.column("at"),
            '","ref":"', rows.column("ref"), '"}', "")
        counts = np.bincount(rows.column("turn").to_numpy(), minlength=n).astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        lists = pa.ListArray.from_arrays(pa.array(offsets), elements.combine_chunks())
        blocks = pc.binary_join_element_wise("[", pc.binary_join(lists, ","), "]", "")
        return blocks, pa.array(counts, _INT32)

    def _file_refs(self) -> _Items:
        """The refs of the hosted files, as items of their turns' lists."""
        turns = np.fromiter((row[0] for row in self._files), np.int32, len(self._files))
        # The files of a turn are added together, in order.
        return _Items(pa.array([row[1] for row in self._files], _STRING), pa.array(turns),
                      pa.array(_positions_in_turn(turns), _INT32))

    def _content_table(self, parsed: pa.Table, turn: _Turns,
                       days_by_role: np.ndarray[Any, Any]) -> pa.Table:
        column = parsed.column
        n = parsed.num_rows
        every_turn = pa.array(np.arange(n, dtype=np.int32))
        rich = pc.equal(column("writer"), "rich")
        submissions = _Items.of(column("submissions"))
        completion = column("completion").flatten()
        anchors, notes = _Items.of(column("anchors")), _Items.of(column("notes"))
        attachments = _Items.of(column("attachments"))
        summary = column("summary")
        parts = [
            _role_rows("user", submissions.parent, submissions.seq, submissions.field("text"),
                       submissions.field("arrived_at").cast(TS), submissions.field("event_type"),
                       submissions.field("batch")),
            # An interrupted turn may have no answer: it gets no empty assistant row.
            _role_rows("assistant", every_turn, None, completion[0], completion[1].cast(TS),
                       keep=_non_empty(completion[0])),
            _role_rows("summary", every_turn, None, summary, turn.ended_at,
                       keep=pc.and_(rich, _non_empty(summary))),
            *(_role_rows(role, items.parent, items.seq, items.values,
                         turn.ended_at.take(items.parent), keep=rich.take(items.parent))
              for role, items in (("anchor", anchors), ("note", notes))),
            _role_rows("attachment", attachments.parent, attachments.seq,
                       attachments.field("text"), turn.started_at.take(attachments.parent),
                       keep=_non_empty(attachments.field("text"))),
        ]
        rows = pa.concat_tables(parts).sort_by([("turn", "ascending"), ("rank", "ascending"),
                                                ("seq", "ascending")])
        index = rows.column("turn").combine_chunks()
        role_array, seq_array = rows.column("role"), rows.column("seq")
        days = days_by_role[index.to_numpy(), rows.column("rank").to_numpy() + 1]
        at = turn.take(index)
        count = rows.num_rows
        return pa.Table.from_pydict({
            "tenant": at.tenant, "month": at.month,
            "row_id": pc.binary_join_element_wise(
                at.conversation_id, at.turn_id, role_array, seq_array.cast(_STRING), "."),
            "app": at.app, "agent": at.agent, "user_id": at.user_id,
            "conversation_id": at.conversation_id, "turn_id": at.turn_id,
            "role": role_array, "seq": seq_array, "event_type": rows.column("event_type"),
            "batch": rows.column("batch"), "ts": rows.column("ts"),
            "turn_at": at.started_at, "text": rows.column("text"),
            "expires_at": _plus_days(at.ended_at, pa.array(days)),
            "embedding": pa.nulls(count, CONTENT_ROWS.field("embedding").type),
            "embedding_model": pa.nulls(count, _STRING),
            "embedding_status": _constant("pending", _STRING, count),
            "batch_id": _constant(self._batch_id, _STRING, count),
            "passage_embeddings": pa.nulls(count, CONTENT_ROWS.field("passage_embeddings").type),
            "embedding_sampled": pa.nulls(count, pa.bool_()),
        }, schema=CONTENT_ROWS)

    def _events_table(self, parsed: pa.Table, turn: _Turns, expires_at: pa.Array) -> pa.Table:
        context = _Items.of(parsed.column("context_events"))
        steps = _Items.of(parsed.column("steps"))
        events = _Items.of(parsed.column("events"))
        context_data, event_data = self._event_data
        sources = (
            ("context", context, pc.binary_join_element_wise(
                "context.", context.field("kind"), ""), _recorded(context, context_data)),
            ("step", steps, _constant("chat.step", _STRING, len(steps.parent)),
             _step_data(steps)),
            ("event", events, events.field("type"), _recorded(events, event_data)),
        )
        parts = []
        for rank, (source, items, types, data) in enumerate(sources):
            n = len(items.parent)
            parts.append(pa.table({
                "turn": items.parent, "at": items.field("at"),
                "rank": _constant(rank, _INT32, n), "pos": items.seq,
                "source": _constant(source, _STRING, n), "type": types, "data": data}))
        # Ordered by time; events at the same instant keep the record's own order.
        rows = pa.concat_tables(parts).sort_by([
            ("turn", "ascending"), ("at", "ascending"), ("rank", "ascending"),
            ("pos", "ascending")])
        if rows.num_rows == 0:
            return EVENTS.empty_table()
        index = rows.column("turn").combine_chunks()
        turns = index.to_numpy()
        seq = _positions_in_turn(turns)
        at = turn.take(index)
        return pa.Table.from_pydict({
            "tenant": at.tenant, "month": at.month, "user_id": at.user_id,
            "conversation_id": at.conversation_id, "turn_id": at.turn_id,
            "seq": pa.array(seq, _INT32), "source": rows.column("source"),
            "type": rows.column("type"), "at": rows.column("at"),
            "data": rows.column("data"), "expires_at": expires_at.take(index),
            "batch_id": _constant(self._batch_id, _STRING, len(turns)),
        }, schema=EVENTS)

    def _files_table(self, turn: _Turns, expires_at: pa.Array) -> pa.Table:
        if not self._files:
            return FILES.empty_table()
        index, ref, path, mime, size, sha256, description, key = zip(*self._files, strict=True)
        take = pa.array(index, _INT32)
        rows = turn.take(take)
        return pa.Table.from_pydict({
            "tenant": rows.tenant, "month": rows.month, "ref": pa.array(ref, _STRING),
            "user_id": rows.user_id, "conversation_id": rows.conversation_id,
            "turn_id": rows.turn_id, "path": pa.array(path, _STRING),
            "mime": pa.array(mime, _STRING), "size": pa.array(size, _INT64),
            "sha256": pa.array(sha256, _STRING), "description": pa.array(description, _STRING),
            "storage_key": pa.array(key, _STRING), "expires_at": expires_at.take(take),
            "batch_id": _constant(self._batch_id, _STRING, len(index)),
        }, schema=FILES)


def _parse_payloads(payloads: list[bytes]) -> pa.Table:
    """The row-making fields of canonical payloads, one row per payload, in one pass."""
    buffer = pa.py_buffer(b"\n".join(payloads))
    table = pa_json.read_json(buffer, read_options=_READ, parse_options=_PARSE)
    if table.num_rows != len(payloads):
        raise ValueError(f"{len(payloads)} payloads parsed into {table.num_rows} rows: "
                         "a payload is not one JSON object")
    return table.combine_chunks()


@dataclass(frozen=True)
class _Items:
    """The elements of a list column, flattened: which turn each came from (``parent``) and
    its position in that turn's list (``seq``)."""

    values: pa.Array
    parent: pa.Array
    seq: pa.Array

    @classmethod
    def of(cls, lists: pa.ChunkedArray) -> _Items:
        array = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
        values = pc.list_flatten(array)
        parent = pc.list_parent_indices(array).cast(_INT32)
        # An element's position in its list: its index among all elements minus that of its
        # list's first (offsets count from the start of the values a slice may not start at).
        offsets = array.offsets.to_numpy()
        seq = np.arange(offsets[0], offsets[0] + len(values)) - offsets[parent.to_numpy()]
        return cls(values, parent, pa.array(seq, _INT32))

    def field(self, name: str) -> pa.Array:
        """A field of struct elements."""
        return pc.struct_field(self.values, name)

    def of_turns(self, selected: pa.Array) -> _Items:
        """The elements of the turns ``selected`` marks (a boolean per turn)."""
        keep = selected.take(self.parent)
        return _Items(self.values.filter(keep), self.parent.filter(keep), self.seq.filter(keep))


def _role_rows(role: str, turn: pa.Array, seq: pa.Array | None, text: pa.Array,
               ts: pa.Array, event_type: pa.Array | None = None,
               batch: pa.Array | None = None, *, keep: pa.Array | None = None) -> pa.Table:
    """Content rows of one role, one per entry of ``turn`` (which turn each belongs to), those
    ``keep`` marks only; ``seq`` None numbers them all 0."""
    n = len(turn)
    table = pa.table({
        "turn": turn, "rank": _constant(ROLES.index(role), _INT32, n),
        "role": _constant(role, _STRING, n),
        "seq": seq if seq is not None else _constant(0, _INT32, n),
        "event_type": event_type if event_type is not None else pa.nulls(n, _STRING),
        "batch": batch if batch is not None else pa.nulls(n, _INT32),
        "ts": ts, "text": text})
    return table.filter(keep) if keep is not None else table


def _recorded(items: _Items, data: list[str]) -> pa.Array:
    """The data of events as add() recorded it from the records, one per payload item."""
    if len(data) != len(items.parent):
        raise ValueError(f"{len(items.parent)} events in the payloads, {len(data)} in the "
                         "records: a payload is not its record's")
    return pa.array(data, _STRING)


def _step_data(steps: _Items) -> pa.Array:
    """Each step's data: its name, status and detail, as the JSON object orjson makes."""
    detail = steps.field("detail")
    return pc.binary_join_element_wise(
        '{"name":"', _json_text(steps.field("name")), '","status":"', steps.field("status"),
        '","detail":', pc.if_else(pc.is_null(detail), "null", pc.binary_join_element_wise(
            '"', _json_text(detail), '"', "")), "}", "")


def _block_rows(turn: pa.Array, seq: pa.Array | None, type_: str | pa.Array, at: pa.Array,
                ref: pa.Array) -> pa.Table:
    """Timeline blocks of one kind, one per entry of ``turn`` (which turn each belongs to);
    ``type_``, ``at`` and ``ref`` as JSON string bodies; ``seq`` None numbers them all 0."""
    n = len(turn)
    return pa.table({
        "turn": turn, "seq": seq if seq is not None else _constant(0, _INT32, n),
        "type": type_ if not isinstance(type_, str) else _constant(type_, _STRING, n),
        "at": at, "ref": ref})


def _ar_refs(base: pa.Array, items: _Items, name: str) -> pa.Array:
    """``conv:ar:`` refs of list elements of the record: ``conv:ar:<base>.<name>/<seq>``."""
    return pc.binary_join_element_wise("conv:ar:", base.take(items.parent), f".{name}/",
                                       items.seq.cast(_STRING), "")


def _isoformat(instants: pa.Array | pa.ChunkedArray) -> pa.Array:
    """What ``datetime.isoformat()`` gives for instants as a canonical payload spells them:
    pydantic writes UTC as ``Z``, isoformat as ``+00:00``; all else is the same."""
    return pc.replace_substring(instants, "Z", "+00:00")


def _json_text(strings: pa.Array) -> pa.Array:
    """Strings as the body of a JSON string (between its quotes), escaped as orjson does."""
    needs_escape = pc.match_substring_regex(strings, r'["\\\x00-\x1f]')
    if not pc.any(needs_escape).as_py():
        return strings
    return pa.array([None if s is None else orjson.dumps(s).decode()[1:-1]
                     for s in strings.to_pylist()], _STRING)


def _positions_in_turn(turns: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each row's position among its turn's rows, for rows grouped by turn (``turns``, sorted):
    its index minus that of its turn's first row."""
    return np.arange(len(turns)) - np.searchsorted(turns, turns, side="left")


def _lengths(lists: pa.ChunkedArray) -> pa.Array:
    """Elements per list, as int32; an absent list counts as empty."""
    return pc.fill_null(pc.list_value_length(lists), 0).cast(_INT32)


def _completion_status(completion: pa.ChunkedArray) -> pa.Array:
    """Each turn's completion status: the canonical JSON leaves "completed" out (records
    written before the field existed keep their payload), so an absent status is that."""
    return pc.fill_null(pc.struct_field(completion, "status"), "completed")


def _non_empty(strings: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Whether each string is present and not empty (Python's truthiness of ``str | None``)."""
    return pc.fill_null(pc.not_equal(strings, ""), False)


@dataclass(frozen=True)
class _Turns:
    """The per-turn columns every table repeats on each row of the turn."""

    tenant: pa.Array
    month: pa.Array
    app: pa.Array
    agent: pa.Array
    user_id: pa.Array
    conversation_id: pa.Array
    turn_id: pa.Array
    started_at: pa.Array
    ended_at: pa.Array

    def take(self, index: pa.Array) -> _Turns:
        """These columns for a row per entry of ``index`` (a turn number)."""
        return _Turns(*(getattr(self, f.name).take(index) for f in fields(self)))


def _plus_days(instants: pa.Array, days: pa.Array) -> pa.Array:
    """``instants`` + ``days`` whole days, as timestamps (what ``datetime + timedelta`` gives).

    Like that addition, a result past year 9999 (only a TTL policy of millennia gets there)
    raises OverflowError rather than storing an instant no reader could load.
    """
    total = pc.add_checked(instants.cast(_INT64), pc.multiply_checked(days, _DAY_US))
    latest = pc.max(total).as_py()
    if latest is not None and latest > _MAX_US:
        raise OverflowError("date value out of range")
    return total.cast(TS)


def _constant(value: object, type_: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)
