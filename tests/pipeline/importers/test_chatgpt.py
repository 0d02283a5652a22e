from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from lake.errors import RecordError
from lake.records import TurnRecord
from lake.settings import Settings
from pipeline.importers import ImportResult, iter_chatgpt
from pipeline.ingest import Ingestor

EXPORT = Path(__file__).parent / "fixtures" / "chatgpt" / "conversations.json"
SOURDOUGH = "665d8f10-2b3c-8004-a1b2-c3d4e5f6a7b8"
REPORT = "6667a2b0-9c8d-8004-b1c2-d3e4f5a6b7c8"


def _import(path: Path = EXPORT) -> ImportResult:
    return iter_chatgpt(path, tenant="acme", user_id="u-ana").collect()


def _turns(result: ImportResult, conversation: str) -> list[TurnRecord]:
    return [r for r in result.records if r.conversation_id == conversation]


def test_only_the_branch_ending_at_current_node_is_imported() -> None:
    first, _ = _turns(_import(), SOURDOUGH)
    assert first.turn_id == "b7c8d9e0-2f1a-4b3c-9d4e-5f6a7b8c9d0e"
    assert first.completion.text.startswith("Feed it about 8 hours before you mix the dough")
    every_text = " ".join(r.to_json() for r in _import().records)
    assert "first answer, later regenerated" not in every_text


def test_consecutive_user_messages_fold_and_every_answer_piece_is_kept_in_order() -> None:
    _, second = _turns(_import(), SOURDOUGH)
    assert [(s.text, s.event_type, s.batch) for s in second.submissions] == [
        ("And if I keep it in the fridge during the week?", "prompt", 0),
        ("Also: should the weekly feed use rye or wheat flour?", "followup", 1),
    ]
    # The answer split around the browsing call is one completion, its pieces in order.
    assert second.completion.text == (
        "In the fridge, feed it once a week and take it out 12 hours before baking.\n\n"
        "Keep feeding it rye: it stays more active in the cold than wheat.")
    assert second.events == []
    assert [(s.name, s.status) for s in second.steps] == [("browser", "started"),
                                                          ("browser", "completed")]
    assert second.started_at.isoformat() == "2024-06-03T09:03:22.120000+00:00"
    assert second.ended_at.isoformat() == "2024-06-03T09:03:53.008000+00:00"
    assert (second.conversation_title, second.writer, second.app, second.agent) == (
        "Sourdough starter schedule", "minimal", "chatgpt", "chatgpt")


def test_attachments_and_image_parts() -> None:
    turn, _ = _turns(_import(), REPORT)
    assert turn.submissions[0].text == (
        "[image]\nSummarize the revenue chart and the attached report in three bullets.")
    assert [(a.name, a.mime, a.size) for a in turn.attachments] == [
        ("q2-revenue.png", "image/png", 48213), ("Q2 report.pdf", "application/pdf", 391022)]


def test_hidden_system_and_tool_messages_and_unanswered_turns_are_counted() -> None:
    result = _import()
    assert result.skipped == {"system message": 1,
                              "custom instructions (user_editable_context)": 1}
    assert result.counted == {"tool call (browser)": 1, "tool message (browser)": 1,
                              "assistant message joined to the answer": 1,
                              "turn without answer (interrupted)": 1}
    # A prompt the assistant never answered keeps the user's words.
    _, unanswered = _turns(result, REPORT)
    assert unanswered.submissions[0].text == "And how does that compare with Q3 guidance?"
    assert (unanswered.completion.text, unanswered.completion.status) == ("", "interrupted")


def test_malformed_conversations_and_nodes_are_problems_and_the_rest_continues() -> None:
    result = _import()
    assert [(p.location, p.reason) for p in result.problems] == [
        ("conversations[2] id=666ab120-0000-8004-9999-000000000000",
         "conversation has no mapping of nodes"),
        ("conversations[3] id=team workspace/666c 9d10 node=broken",
         "message is not a JSON object"),
    ]
    assert result.problems[1].raw == '"this node was damaged"'
    (regex_turn,) = [r for r in result.records if r.conversation_title == "Regex for ISO dates"]
    assert regex_turn.conversation_id.startswith("team_workspace_666c_9d10-")
    assert regex_turn.turn_id.startswith("q1-msg_user_1-")
    assert len(result.records) == 5


def test_truncated_export_keeps_the_conversations_before_the_cut(tmp_path: Path) -> None:
    raw = EXPORT.read_bytes()
    path = tmp_path / "conversations.json"
    path.write_bytes(raw[: raw.index(b'"title": "Quarterly report review"') + 200])
    result = _import(path)
    assert [r.conversation_id for r in result.records] == [SOURDOUGH, SOURDOUGH]
    (problem,) = result.problems
    assert problem.location == "conversations[1]"
    assert problem.reason.startswith("export is not valid JSON here")


def test_non_utf8_bytes_are_replaced_and_reported(tmp_path: Path) -> None:
    raw = EXPORT.read_bytes()
    damaged = raw.replace(b"Saturday morning?", b"Saturday \xff\xfe morning?")
    bad_at = damaged.index(b"\xff")
    path = tmp_path / "conversations.json"
    path.write_bytes(damaged)
    result = _import(path)
    assert len(result.records) == 5
    assert result.records[0].submissions[0].text.endswith("Saturday \ufffd\ufffd morning?")
    (problem,) = [p for p in result.problems if "UTF-8" in p.reason]
    assert problem.location == f"byte {bad_at}"


def test_zip_export_and_single_conversation_file(tmp_path: Path) -> None:
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(EXPORT, "conversations.json")
        zf.writestr("user.json", "{}")
    assert [r.to_json() for r in _import(archive).records] == [
        r.to_json() for r in _import().records]
    single = tmp_path / "one.json"
    single.write_text(json.dumps(json.loads(EXPORT.read_text())[1]))
    assert [r.conversation_id for r in _import(single).records] == [REPORT, REPORT]


def test_bad_inputs_raise_record_error(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="does not exist"):
        iter_chatgpt(tmp_path / "nope.json", tenant="acme", user_id="u-ana")
    empty_zip = tmp_path / "export.zip"
    with zipfile.ZipFile(empty_zip, "w") as zf:
        zf.writestr("user.json", "{}")
    with pytest.raises(RecordError, match=r"without conversations\.json"):
        iter_chatgpt(empty_zip, tenant="acme", user_id="u-ana")
    with pytest.raises(RecordError, match="user_id"):
        iter_chatgpt(EXPORT, tenant="acme", user_id="ana@example.com")


def test_importing_twice_into_a_lake_accepts_then_finds_duplicates(settings: Settings) -> None:
    report = Ingestor(settings).ingest_records(
        iter_chatgpt(EXPORT, tenant="acme", user_id="u-ana"))
    assert (report.accepted, report.duplicates, report.quarantined) == (5, 0, [])
    again = Ingestor(settings).ingest_records(
        iter_chatgpt(EXPORT, tenant="acme", user_id="u-ana"))
    assert (again.accepted, again.duplicates, again.quarantined) == (0, 5, [])
