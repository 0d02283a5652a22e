from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pyarrow.compute as pc
import pytest

from lake.projection import StoredFile, TurnProjector, month_of, row_id
from lake.records import TurnRecord
from lake.settings import RetentionRule, Settings
from lake.tables import CONTENT_ROWS, EVENTS, FILES, TURN_LOGS, Table
from tests.factories import make_record, rich_record

NOW = datetime(2026, 4, 1, tzinfo=UTC)


def _record(data: dict[str, object]) -> TurnRecord:
    return TurnRecord.model_validate(data)


def _projector(settings: Settings, batch_id: str = "b-1") -> TurnProjector:
    return TurnProjector(batch_id=batch_id, ingested_at=NOW, ttl=settings.ttl_days_for)


def _file(record: TurnRecord, name: str = "forecast.csv") -> StoredFile:
    return StoredFile(ref=f"conv:fi:conv_{record.conversation_id}.turn_{record.turn_id}."
                          f"files/{name}",
                      path=f"files/{name}", mime="text/csv", size=17, sha256="ab" * 32,
                      storage_key=f"acme/{record.conversation_id}/{record.turn_id}/"
                                  f"files/{name}",
                      description="corrected forecast")


def _expected_blocks(record: TurnRecord, files: list[StoredFile]) -> list[dict[str, Any]]:
    """The timeline blocks of a turn, one record at a time: what the projection builds
    column-wise."""
    if record.writer != "rich":
        return []
    base = f"conv_{record.conversation_id}.turn_{record.turn_id}"

    def block(type_: str, at: datetime, ref: str) -> dict[str, Any]:
        return {"turn_id": record.turn_id, "type": type_, "at": at.isoformat(), "ref": ref}

    blocks = [block(f"user.{s.event_type}", s.arrived_at, f"conv:ar:{base}.submissions/{i}")
              for i, s in enumerate(record.submissions)]
    blocks += [block("attachment", record.started_at, a.ref or f"conv:ar:{base}.attachments/{i}")
               for i, a in enumerate(record.attachments)]
    blocks += [block("file", record.ended_at, f.ref) for f in files]
    if record.summary:
        blocks.append(block("summary", record.ended_at, f"conv:ws:{base}.summary"))
    blocks.append(block("assistant.completion", record.completion.at,
                        f"conv:ar:{base}.completion"))
    return blocks


def test_rich_turn_rows_carry_ids_times_and_role_ttls(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path, retention=(
        RetentionRule(tenant="acme", ttl_days=30, role="user"),
        RetentionRule(tenant="acme", app="support-desk", ttl_days=90)))
    record = _record(rich_record(3))
    projector = _projector(settings)
    projector.add(record, ordinal=4, files=[_file(record)], payload=record.to_json_bytes())
    tables = projector.tables()
    rows = tables[Table.CONTENT_ROWS].to_pylist()
    assert [(r["role"], r["seq"]) for r in rows] == [
        ("user", 0), ("user", 1), ("user", 2), ("assistant", 0), ("summary", 0),
        ("anchor", 0), ("anchor", 1), ("note", 0), ("attachment", 0)]
    assert [r["row_id"] for r in rows[:2]] == [row_id("c-1", "t-0003", "user", 0),
                                               row_id("c-1", "t-0003", "user", 1)]
    ended = record.ended_at.astimezone(UTC)
    by_role = {r["role"]: r["expires_at"] for r in rows}
    assert by_role["user"] == ended + timedelta(days=30)  # the role rule is the most specific
    assert by_role["assistant"] == ended + timedelta(days=90)
    assert {r["turn_at"] for r in rows} == {record.started_at.astimezone(UTC)}
    assert rows[-1]["text"] == "March forecast sheet hours column"  # only the attachment with text
    assert {r["embedding_status"] for r in rows} == {"pending"}
    assert {r["batch_id"] for r in rows} == {"b-1"}
    assert all(r["embedding"] is None and r["embedding_model"] is None for r in rows)
    log = tables[Table.TURN_LOGS].to_pylist()[0]
    assert log["ordinal"] == 4 and log["hosted_file_count"] == 1
    assert log["expires_at"] == ended + timedelta(days=90)
    assert json.loads(log["blocks"]) == _expected_blocks(record, [_file(record)])
    assert log["block_count"] == len(json.loads(log["blocks"]))
    assert json.loads(log["payload"]) == json.loads(record.to_json())
    files = tables[Table.FILES].to_pylist()
    assert files[0]["storage_key"] == "acme/c-1/t-0003/files/forecast.csv"
    assert files[0]["expires_at"] == log["expires_at"] and files[0]["month"] == "2026-03"


def test_timeline_blocks_spell_instants_and_refs_as_the_record_does(
        settings: Settings) -> None:
    odd_refs = ['conv:ar:x "quoted"', "back\\slash", "line\nbreak", "\x01", "ünïcode", "",
                None]
    offset = rich_record(0)
    offset["submissions"][0]["arrived_at"] = "2026-03-10T09:00:00.5-05:30"
    records = [
        _record({**offset, "started_at": "2026-03-10T09:00:00.5-05:30",
                 "ended_at": "2026-03-10T17:00:00.000001+02:00",
                 "completion": {"text": "done", "at": "2026-03-10T15:00:00Z"}}),
        _record({**rich_record(1), "summary": "", "attachments": [
            {"name": f"a{i}", "mime": "text/plain", "size": 1, "ref": ref}
            for i, ref in enumerate(odd_refs)]}),
        _record(make_record(2)),  # a minimal writer's turn has none
        _record({**rich_record(3), "summary": None, "attachments": []}),
    ]
    files = [[_file(records[0], 'say "hi".csv'), _file(records[0], "ä\\b.txt")], [], [],
             [_file(records[3])]]
    projector = _projector(settings)
    for record, stored in zip(records, files, strict=True):
        projector.add(record, ordinal=1, files=stored, payload=record.to_json_bytes())
    logs = projector.tables()[Table.TURN_LOGS].to_pylist()
    for log, record, stored in zip(logs, records, files, strict=True):
        expected = _expected_blocks(record, stored)
        assert log["blocks"] == orjson.dumps(expected).decode()  # the same text, byte for byte
        assert log["block_count"] == len(expected)
    assert json.loads(logs[0]["blocks"])[0]["at"] == "2026-03-10T09:00:00.500000-05:30"
    assert logs[2]["blocks"] == "[]"


def test_record_ttl_days_overrides_the_policy(settings: Settings) -> None:
    record = _record(make_record(0, ttl_days=7))
    projector = _projector(settings)
    projector.add(record, ordinal=1, files=[], payload=record.to_json_bytes())
    tables = projector.tables()
    week = record.ended_at.astimezone(UTC) + timedelta(days=7)
    assert {r["expires_at"] for r in tables[Table.CONTENT_ROWS].to_pylist()} == {week}
    assert tables[Table.TURN_LOGS]["expires_at"].to_pylist() == [week]


def test_month_is_the_utc_month_of_started_at(settings: Settings) -> None:
    late = _record(make_record(0, at=datetime(2026, 3, 31, 23, 30, tzinfo=UTC),
                               started_at="2026-03-31T20:30:00-05:00",
                               ended_at="2026-04-01T02:00:00+00:00"))
    projector = _projector(settings)
    projector.add(late, ordinal=1, files=[], payload=late.to_json_bytes())
    tables = projector.tables()
    assert month_of(late.started_at) == "2026-04"
    for table in (Table.TURN_LOGS, Table.CONTENT_ROWS):
        assert set(tables[table]["month"].to_pylist()) == {"2026-04"}


def test_events_are_ordered_by_time_keeping_the_record_order_on_ties(
        settings: Settings) -> None:
    at = "2026-03-10T09:00:05+00:00"
    record = _record(make_record(
        0,
        context_events=[{"kind": "page_opened", "at": at, "data": {"page": "a"}}],
        steps=[{"name": "run", "status": "started", "at": "2026-03-10T09:00:01+00:00"}],
        events=[{"type": "badge.cost", "at": at, "data": {"usd": 0.5}},
                {"type": "panel.code", "at": "2026-03-10T09:00:00+00:00", "data": {}}]))
    projector = _projector(settings)
    projector.add(record, ordinal=1, files=[], payload=record.to_json_bytes())
    events = projector.tables()[Table.EVENTS].to_pylist()
    assert [(e["seq"], e["source"], e["type"]) for e in events] == [
        (0, "event", "panel.code"), (1, "step", "chat.step"),
        (2, "context", "context.page_opened"), (3, "event", "badge.cost")]
    assert json.loads(events[1]["data"]) == {"name": "run", "status": "started", "detail": None}
    assert json.loads(events[3]["data"]) == {"usd": 0.5}


def test_step_data_is_the_json_object_of_its_name_status_and_detail(
        settings: Settings) -> None:
    at = "2026-03-10T09:00:05+00:00"
    steps = [{"name": 'run "python"', "status": "failed", "at": at, "detail": "line\none\\ ü"},
             {"name": "plot", "status": "completed", "at": at, "detail": ""},
             {"name": "\x01ctl", "status": "started", "at": at}]
    record = _record(make_record(0, steps=steps))
    projector = _projector(settings)
    projector.add(record, ordinal=1, files=[], payload=record.to_json_bytes())
    data = projector.tables()[Table.EVENTS]["data"].to_pylist()
    assert data == [orjson.dumps({"name": s["name"], "status": s["status"],
                                  "detail": s.get("detail")}).decode() for s in steps]


def test_a_payload_of_several_megabytes_is_projected(settings: Settings) -> None:
    answer = "long answer " * 300_000  # 3.6 MB, past the JSON reader's default block
    records = [_record(make_record(0, answer=answer)), _record(make_record(1))]
    projector = _projector(settings)
    for record in records:
        projector.add(record, ordinal=1, files=[], payload=record.to_json_bytes())
    rows = projector.tables()[Table.CONTENT_ROWS]
    assert rows.filter(pc.equal(rows["role"], "assistant"))["text"].to_pylist()[0] == answer


def test_attachment_rows_keep_their_position_and_skip_empty_texts(settings: Settings) -> None:
    record = _record(make_record(0, attachments=[
        {"name": "a.pdf", "mime": "application/pdf", "size": 1},
        {"name": "b.txt", "mime": "text/plain", "size": 2, "text": "second"},
        {"name": "c.txt", "mime": "text/plain", "size": 3, "text": ""},
        {"name": "d.txt", "mime": "text/plain", "size": 4, "text": "fourth"}],
        feedback={"rating": 1, "comment": ""}))
    projector = _projector(settings)
    projector.add(record, ordinal=1, files=[], payload=record.to_json_bytes())
    tables = projector.tables()
    rows = [(r["seq"], r["text"]) for r in tables[Table.CONTENT_ROWS].to_pylist()
            if r["role"] == "attachment"]
    assert rows == [(1, "second"), (3, "fourth")]
    log = tables[Table.TURN_LOGS].to_pylist()[0]
    assert (log["attachment_count"], log["feedback_has_comment"]) == (4, False)
    assert log["tokens_in"] is None and log["feedback_rating"] == 1


def test_a_payload_that_is_not_its_records_is_refused(settings: Settings) -> None:
    with_events = _record(make_record(0, events=[
        {"type": "badge", "at": "2026-03-10T09:00:05+00:00"}]))
    projector = _projector(settings)
    projector.add(with_events, ordinal=1, files=[], payload=_record(make_record(0)).to_json_bytes())
    with pytest.raises(ValueError, match="not its record"):
        projector.tables()


def test_many_turns_keep_their_own_rows(settings: Settings) -> None:
    records = [_record(make_record(i, conversation=f"c-{i % 3}", user=f"u-{i % 3}"))
               for i in range(10)]
    projector = _projector(settings)
    for i, record in enumerate(records):
        projector.add(record, ordinal=i, files=[], payload=record.to_json_bytes())
    tables = projector.tables()
    logs = tables[Table.TURN_LOGS]
    assert logs["turn_id"].to_pylist() == [r.turn_id for r in records]
    rows = tables[Table.CONTENT_ROWS].to_pylist()
    for row in rows:
        turn = int(row["turn_id"][2:])
        assert row["conversation_id"] == f"c-{turn % 3}" and row["user_id"] == f"u-{turn % 3}"
        assert row["row_id"].startswith(f"{row['conversation_id']}.{row['turn_id']}.")
    assert len(rows) == 2 * len(records)


def test_no_turns_give_empty_tables_in_the_lake_schemas(settings: Settings) -> None:
    tables = _projector(settings).tables()
    for table, schema in ((Table.TURN_LOGS, TURN_LOGS), (Table.CONTENT_ROWS, CONTENT_ROWS),
                          (Table.EVENTS, EVENTS), (Table.FILES, FILES)):
        assert tables[table].num_rows == 0 and tables[table].schema == schema


def test_a_policy_ttl_past_year_9999_is_refused(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path, default_ttl_days=3_000_000)
    record = _record(make_record(0))
    projector = _projector(settings)
    with pytest.raises(OverflowError):
        projector.add(record, ordinal=1, files=[], payload=record.to_json_bytes())
        projector.tables()


def _plain_role_rows(record: TurnRecord) -> list[tuple[object, ...]]:
    """A turn's search rows walked out of the record one object at a time: the plain
    equivalent of the column-wise projection, and its oracle."""
    def row(role: str, seq: int, text: str, ts: datetime, event_type: str | None = None,
            batch: int | None = None) -> tuple[object, ...]:
        return (record.conversation_id, record.turn_id, role, seq, text, event_type, batch,
                ts.astimezone(UTC), record.started_at.astimezone(UTC),
                row_id(record.conversation_id, record.turn_id, role, seq))

    rich = record.writer == "rich"
    rows = [row("user", i, s.text, s.arrived_at, s.event_type, s.batch)
            for i, s in enumerate(record.submissions)]
    if record.completion.text:
        rows.append(row("assistant", 0, record.completion.text, record.completion.at))
    if rich and record.summary:
        rows.append(row("summary", 0, record.summary, record.ended_at))
    if rich:
        rows += [row("anchor", i, a, record.ended_at) for i, a in enumerate(record.anchors)]
        rows += [row("note", i, n, record.ended_at) for i, n in enumerate(record.notes)]
    rows += [row("attachment", i, a.text, record.started_at)
             for i, a in enumerate(record.attachments) if a.text]
    return rows


def test_the_column_wise_rows_equal_the_rows_walked_out_of_each_record(
        settings: Settings) -> None:
    interrupted = make_record(5, conversation="c-2")
    interrupted["completion"] = {"text": "", "at": interrupted["ended_at"],
                                 "status": "interrupted"}
    minimal_with_rich_parts = make_record(6, summary="ignored", anchors=["ignored"])
    records = [_record(r) for r in (
        rich_record(1), make_record(2), rich_record(3, conversation="c-9"), interrupted,
        minimal_with_rich_parts, make_record(7, user="u-ben", conversation="c-3"))]
    projector = _projector(settings)
    for i, record in enumerate(records):
        projector.add(record, ordinal=i, files=[], payload=record.to_json_bytes())
    got = [(r["conversation_id"], r["turn_id"], r["role"], r["seq"], r["text"],
            r["event_type"], r["batch"], r["ts"], r["turn_at"], r["row_id"])
           for r in projector.tables()[Table.CONTENT_ROWS].to_pylist()]
    assert got == [row for record in records for row in _plain_role_rows(record)]


def test_each_turn_log_says_how_its_completion_ended(settings: Settings) -> None:
    def ended(turn: int, status: str | None) -> TurnRecord:
        completion: dict[str, object] = {"text": "" if status else "done",
                                         "at": "2026-03-10T09:00:30+00:00"}
        if status:
            completion["status"] = status
        return _record(make_record(turn, completion=completion))

    projector = _projector(settings)
    for turn, status in enumerate((None, "interrupted", "failed", "completed")):
        record = ended(turn, status)
        projector.add(record, ordinal=turn, files=[], payload=record.to_json_bytes())
    logs = projector.tables()[Table.TURN_LOGS]
    assert logs["completion_status"].to_pylist() == [
        "completed", "interrupted", "failed", "completed"]
