"""A rejected turn names the field its reason is about, and a conflict's advice is the
API's, not the CLI's."""

from __future__ import annotations

from typing import Any

import orjson

from lake.settings import Settings
from pipeline.ingest import Ingestor
from pipeline.prepare import Quarantined, differing_field
from pipeline.service.outcomes import LineOutcome, rejected
from tests.pipeline.service.conftest import Served
from tests.reliability.lake_audit import turn_record


def _bad_records() -> list[dict[str, Any]]:
    bad_b64 = turn_record(501, conversation="c-fields", rich=True)
    bad_b64["hosted_files"][0]["content_b64"] = "!!!"
    source = turn_record(502, conversation="c-fields", rich=True)
    source["hosted_files"] = [{"path": "files/a.csv", "mime": "text/csv",
                               "source_path": "../etc/passwd"}]
    dots = turn_record(503, conversation="c-fields", rich=True)
    dots["hosted_files"][0]["path"] = "files/../x.csv"
    twice = turn_record(504, conversation="c-fields", rich=True)
    twice["hosted_files"].append(dict(twice["hosted_files"][0]))
    conflict = turn_record(0, rich=True)  # the seeded c-1/t-0000, with other content
    conflict["submissions"][0]["text"] = "something else entirely"
    return [bad_b64, source, dots, twice, conflict, turn_record(505, user="u-ben")]


def test_rejections_name_their_own_field(served: Served) -> None:
    with served.server.client(served.keys["recorder"]) as client:
        answer = client.post("/v1/turns", json={"turns": _bad_records()})
    assert answer.status_code == 200, answer.text
    turns = answer.json()["turns"]
    assert [(t["status"], t["field"]) for t in turns] == [
        ("rejected", "hosted_files.content_b64"), ("rejected", "hosted_files.source_path"),
        ("rejected", "hosted_files.path"), ("rejected", "hosted_files.path"),
        ("rejected", "submissions"), ("rejected", "user_id")], turns
    conflict = turns[4]["reason"]
    assert "--replace" not in conflict and "cannot replace" in conflict, conflict
    assert "different content" in conflict and "differs in: submissions" in conflict


def test_a_conflict_gets_the_apis_advice() -> None:
    stored = ("conflict: turn t-1 of conversation c (tenant a) is stored with different "
              "content (differs in: completion.text, steps)")
    outcome = rejected(Quarantined("<api>", 1, stored, "{}", "completion.text", conflict=True))
    assert outcome == LineOutcome(
        "rejected", f"{stored}; the HTTP API cannot replace a recorded turn", "completion.text")
    earlier = stored.replace("is stored", "comes earlier in this input (line 1)")
    assert rejected(Quarantined("<api>", 2, earlier, "{}", None)) == LineOutcome(
        "rejected", earlier, None)


def test_a_conflict_names_the_first_field_that_differs() -> None:
    assert differing_field(("completion.text", "steps")) == "completion.text"
    assert differing_field(("field order",)) is None
    assert differing_field(()) is None


def test_a_schema_error_keeps_the_parsers_field(settings: Settings) -> None:
    line = orjson.dumps({**turn_record(1), "started_at": "yesterday"}).decode()
    [refused] = Ingestor(settings).ingest_records([line]).quarantined
    assert refused.field == "started_at"
