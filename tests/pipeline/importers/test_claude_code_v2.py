"""The Claude Code importer on a v2.1 session: harness messages, subagents, interrupts,
compaction, file-history snapshots (fixture written by hand from the format's shapes)."""

from __future__ import annotations

from pathlib import Path

from lake.records import TurnRecord
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.importers import ImportResult, iter_claude_code
from pipeline.ingest import Ingestor

PROJECT = Path(__file__).parent / "fixtures" / "claude_code_v2" / "-home-dev-search-api"
SESSION = PROJECT / "c41d8e2a-7b3f-4e19-a6d2-5f0b9c8e7a13.jsonl"
FIRST = "11111111-aaaa-4bbb-8ccc-000000000001"
SECOND = "66666666-aaaa-4bbb-8ccc-000000000015"
THIRD = "77777777-aaaa-4bbb-8ccc-000000000021"


def _import() -> ImportResult:
    return iter_claude_code([PROJECT.parent], tenant="acme", user_id="u-dev").collect()


def _turns() -> dict[str, TurnRecord]:
    return {r.turn_id: r for r in _import().records}


def _kinds(record: TurnRecord) -> list[str]:
    return [e.kind for e in record.context_events]


def test_only_the_users_own_words_are_submissions() -> None:
    result = _import()
    assert [r.turn_id for r in result.records] == [FIRST, SECOND, THIRD]
    texts = [s.text for r in result.records for s in r.submissions]
    assert texts == [
        "Add rate limiting to the /v1/search endpoint: 60 requests per minute per API key.",
        "Now make the limit configurable in settings.toml; this is what the settings page shows:",
        "Where did we leave the rate limit config?"]
    # The summary line comes after the first turn: the title is the first prompt, as live
    # capture (which stored that turn before the summary was written) has it.
    assert {r.conversation_title for r in result.records} == {
        "Add rate limiting to the /v1/search endpoint: 60 requests per minute per API ke…"}


def test_harness_messages_become_context_events_without_ansi_codes() -> None:
    turns = _turns()
    first, second = turns[FIRST], turns[SECOND]
    (notification,) = [e for e in first.context_events if e.kind == "task_notification"]
    assert notification.data == {
        "task_id": "bash_7f2a", "status": "completed",
        "summary": 'Background command "npm run build" completed (exit code 0)'}
    (hook,) = [e for e in first.context_events if e.kind == "system"]
    assert hook.data == {"subtype": "informational", "level": "info",
                         "text": "PostToolUse:Bash hook [ruff check] completed"}
    # A slash command, its output and the caveat before them precede the next request.
    assert _kinds(second)[:3] == ["caveat", "command", "command_output"]
    command, output = second.context_events[1:3]
    assert command.data == {"command_name": "/cost", "command_message": "cost",
                            "command_args": ""}
    assert output.data["local_command_stdout"].startswith("Total cost:            $0.42")
    assert "\x1b" not in output.data["local_command_stdout"]


def test_tool_calls_are_steps_with_a_short_input_summary_and_an_error_flag() -> None:
    first = _turns()[FIRST]
    assert [(s.name, s.status) for s in first.steps] == [
        ("Task", "started"), ("subagent:a3f9c21", "completed"), ("Task", "completed"),
        ("Write", "started"), ("Write", "completed"), ("Bash", "started"), ("Bash", "failed")]
    assert first.steps[3].detail == "/home/dev/search-api/src/api/rate_limit.py"
    assert first.steps[5].detail == "pytest tests/test_rate_limit.py -q"
    assert first.steps[6].detail == "F.\n1 failed, 1 passed in 0.41s\nE   assert 429 == 200"


def test_a_subagent_run_is_one_step_with_its_final_answer() -> None:
    run = _turns()[FIRST].steps[1]
    assert run.detail == (
        "[2 tool calls] Requests enter through build_app() in src/api/app.py; middleware is "
        "registered in the MIDDLEWARE list of src/api/middleware.py (cors, auth).")
    assert run.at.isoformat() == "2026-02-03T10:00:40+00:00"
    texts = [s.text for r in _import().records for s in r.submissions]
    assert not any("HTTP requests enter" in t for t in texts)


def test_an_interrupted_turn_keeps_its_prompt_image_and_steps() -> None:
    second = _turns()[SECOND]
    assert (second.completion.status, second.completion.text) == ("interrupted", "")
    assert second.completion.at.isoformat() == "2026-02-03T10:05:09+00:00"
    assert [(a.name, a.mime) for a in second.attachments] == [("image-1.png", "image/png")]
    assert [(s.name, s.status) for s in second.steps] == [("Read", "started"),
                                                          ("Read", "completed")]


def test_compaction_is_a_context_event_of_the_turn_it_precedes() -> None:
    third = _turns()[THIRD]
    assert _kinds(third) == ["system", "compaction", "workspace"]
    assert third.context_events[0].data["subtype"] == "compact_boundary"
    assert third.context_events[1].data["summary"].startswith(
        "This session is being continued from a previous conversation")
    assert third.completion.status == "completed"


def test_file_history_snapshots_list_the_files_the_turn_edited() -> None:
    first = _turns()[FIRST]
    (edited,) = [e for e in first.context_events if e.kind == "files_edited"]
    assert edited.data == {"files": ["src/api/middleware.py", "src/api/rate_limit.py"]}


def test_every_kind_is_counted() -> None:
    result = _import()
    assert result.problems == []
    assert result.skipped == {
        "queue-operation event": 1, "unknown event type: worktree-state": 1,
        "file-history snapshot without edited files": 2, "thinking block": 1,
        "compaction subagent transcript": 1, "summary written after the first turn": 1}
    assert result.counted == {
        "subagent event": 6, "context event: system": 2,
        "context event: task_notification": 1, "context event: caveat": 1,
        "context event: command": 1, "context event: command_output": 1,
        "context event: compaction": 1, "context event: files_edited": 1,
        "interrupted turn": 1, "turn without answer (interrupted)": 1}


def test_the_interrupted_turn_is_searchable_by_its_prompt_only(settings: Settings) -> None:
    report = Ingestor(settings).ingest_records(
        iter_claude_code([PROJECT], tenant="acme", user_id="u-dev"))
    assert (report.accepted, report.duplicates) == (3, 0)
    rows = LakeStore(settings.lake).read(Table.CONTENT_ROWS, columns=["turn_id", "role"])
    roles = sorted((r["turn_id"], r["role"]) for r in rows.to_pylist())
    assert (SECOND, "user") in roles and (SECOND, "assistant") not in roles
    again = Ingestor(settings).ingest_records(
        iter_claude_code([PROJECT], tenant="acme", user_id="u-dev"))
    assert (again.accepted, again.duplicates) == (0, 3)
