from __future__ import annotations

import json

import pytest

from lake.errors import RecordError
from lake.records import json_schema, parse_record
from tests.factories import make_record, rich_record


def test_valid_minimal_and_rich_records_parse() -> None:
    assert parse_record(json.dumps(make_record())).writer == "minimal"
    rich = parse_record(json.dumps(rich_record()))
    assert rich.writer == "rich" and len(rich.submissions) == 3


@pytest.mark.parametrize(("change", "field"), [
    ({"turn_id": "has space"}, "turn_id"),
    ({"turn_id": "x" * 129}, "turn_id"),
    ({"tenant": ""}, "tenant"),
    ({"writer": "fancy"}, "writer"),
    ({"started_at": "2026-03-10T09:00:00"}, "started_at"),
    ({"submissions": []}, "submissions"),
    ({"schema": "turnlake.turn.v2"}, "schema"),
    ({"completion": None}, "completion"),
    ({"ttl_days": 0}, "ttl_days"),
    ({"unknown_field": 1}, "unknown_field"),
])
def test_validation_errors_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(RecordError) as info:
        parse_record(json.dumps(make_record(**change)))
    assert field in str(info.value)
    assert info.value.field is not None and info.value.field.startswith(field)


def test_nested_error_names_the_path() -> None:
    record = make_record()
    record["submissions"][0]["event_type"] = "shout"
    with pytest.raises(RecordError, match=r"submissions\.0\.event_type"):
        parse_record(json.dumps(record))


def test_hosted_file_needs_exactly_one_source() -> None:
    record = make_record(hosted_files=[{"path": "files/a.txt", "mime": "text/plain"}])
    with pytest.raises(RecordError, match="exactly one of content_b64 or source_path"):
        parse_record(json.dumps(record))


def test_ended_before_started_is_refused() -> None:
    record = make_record(ended_at="2020-01-01T00:00:00Z")
    with pytest.raises(RecordError, match="ended_at is before started_at"):
        parse_record(json.dumps(record))


def test_json_schema_names_the_contract_fields() -> None:
    schema = json_schema()
    assert schema["title"] == "turnlake.turn.v1"
    for name in ("schema", "tenant", "app", "agent", "user_id", "conversation_id", "turn_id",
                 "writer", "started_at", "ended_at", "submissions", "completion"):
        assert name in schema["required"]


def test_published_schema_file_is_current() -> None:
    from pathlib import Path

    published = Path(__file__).parents[2] / "lake" / "schema" / "turn.v1.schema.json"
    assert json.loads(published.read_text()) == json_schema(), (
        "regenerate with: turnlake schema > lake/schema/turn.v1.schema.json")


def test_completion_status_defaults_to_completed_and_stays_out_of_the_payload() -> None:
    record = parse_record(json.dumps(make_record()))
    assert record.completion.status == "completed"
    assert "status" not in json.loads(record.to_json())["completion"]


@pytest.mark.parametrize("status", ["interrupted", "failed"])
def test_a_turn_that_did_not_complete_may_have_an_empty_answer(status: str) -> None:
    raw = make_record(completion={"text": "", "at": "2026-03-10T09:00:30+00:00",
                                  "status": status})
    record = parse_record(json.dumps(raw))
    assert (record.completion.text, record.completion.status) == ("", status)
    assert json.loads(record.to_json())["completion"]["status"] == status


def test_an_unknown_completion_status_is_refused() -> None:
    raw = make_record(completion={"text": "x", "at": "2026-03-10T09:00:30+00:00",
                                  "status": "gave-up"})
    with pytest.raises(RecordError, match=r"completion\.status"):
        parse_record(json.dumps(raw))
