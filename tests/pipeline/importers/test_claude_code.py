"""The Claude Code importer: the hand-written project fixtures, a v2.1 session (harness
messages, subagents, interrupts, compaction, file-history snapshots), and transcripts a tester
wrote in Claude Code's shapes (slash commands, unreadable lines, queued prompts, split
answers, legacy subagent files, IDE context, titles across hook and import, a line still
being written)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from lake.errors import RecordError
from lake.records import ID_PATTERN, TurnRecord
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.importers import ImportResult, iter_claude_code, stable_id
from pipeline.importers.claude_files import transcript_files
from pipeline.importers.common import Identity
from pipeline.importers.live import capture_transcript
from pipeline.ingest import Ingestor
from pipeline.jobs import run_ingest

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
PROJECT = FIXTURES / "-home-dev-webapp"
MAIN_SESSION = PROJECT / "6f1c2a9e-3b7d-4c1e-9a2f-0d5e8b7c4a11.jsonl"
IMAGE_SESSION = PROJECT / "9d7e2b14-5c3a-4f8e-b1d0-7a6c5e4f3b21.jsonl"


def _import(*paths: Path) -> ImportResult:
    return iter_claude_code(list(paths), tenant="acme", user_id="u-dev").collect()


def _by_turn(result: ImportResult) -> dict[str, TurnRecord]:
    return {r.turn_id: r for r in result.records}


def test_each_session_is_a_conversation_and_user_texts_open_turns() -> None:
    result = _import(FIXTURES)
    assert [(r.conversation_id, r.turn_id) for r in result.records] == [
        ("6f1c2a9e-3b7d-4c1e-9a2f-0d5e8b7c4a11", "3b2f4e10-9d8c-4a7b-b6e5-1f0a2c3d4e5f"),
        ("6f1c2a9e-3b7d-4c1e-9a2f-0d5e8b7c4a11", "1b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e"),
        ("6f1c2a9e-3b7d-4c1e-9a2f-0d5e8b7c4a11", "4e5f6a7b-8c9d-4e0f-9a1b-2c3d4e5f6a7b"),
        ("9d7e2b14-5c3a-4f8e-b1d0-7a6c5e4f3b21", "8c1d2e3f-4a5b-4c6d-9e7f-8a9b0c1d2e3f"),
    ]
    first = result.records[0]
    assert (first.tenant, first.user_id, first.app, first.agent, first.writer) == (
        "acme", "u-dev", "claude-code", "claude-code", "minimal")
    assert [(s.text, s.event_type, s.batch) for s in first.submissions] == [
        ("The login tests fail since the session refactor; can you find out why?", "prompt", 0),
        ("They only fail on CI, locally everything passes.", "followup", 1),
    ]
    assert first.started_at.isoformat() == "2025-06-02T09:14:05.311000+00:00"
    assert first.ended_at == first.completion.at
    assert [e.kind for e in first.context_events] == ["caveat", "workspace", "system"]
    assert first.context_events[1].data == {"cwd": "/home/dev/webapp", "git_branch": "main",
                                            "version": "1.0.51"}


def test_tool_calls_become_steps_and_chat_step_events() -> None:
    first = _by_turn(_import(MAIN_SESSION))["3b2f4e10-9d8c-4a7b-b6e5-1f0a2c3d4e5f"]
    assert [(s.name, s.status) for s in first.steps] == [
        ("Bash", "started"), ("Bash", "completed"), ("Read", "started"), ("Read", "failed")]
    # A started step says what the tool was asked to do in one short line.
    assert first.steps[0].detail == "grep -rn SESSION_BACKEND .github/ config/"
    assert first.steps[3].detail == "<tool_use_error>File does not exist.</tool_use_error>"
    assert first.events == []  # steps are replayed as chat.step events by the lake


def test_the_assistant_texts_joined_are_the_answer_and_usage_counts_each_message_once(
        ) -> None:
    turns = _by_turn(_import(MAIN_SESSION))
    first = turns["3b2f4e10-9d8c-4a7b-b6e5-1f0a2c3d4e5f"]
    second = turns["1b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e"]
    assert first.completion.text.startswith("Found it: CI sets `SESSION_BACKEND=redis`")
    # The remark written before a tool call is part of the answer, in order.
    assert second.completion.text.startswith(
        "I'll double-check the diff.\n\nDone: the CI test job")
    # msg_01 is split over two events repeating its usage; it must count once.
    assert first.usage is not None
    assert (first.usage.tokens_in, first.usage.tokens_out) == (1520 + 380 + 220, 148 + 74 + 81)
    assert second.usage is not None
    assert (second.usage.tokens_in, second.usage.tokens_out) == (410 + 260, 132 + 58)


def test_title_comes_from_summary_else_from_the_first_prompt() -> None:
    result = _import(FIXTURES)
    titles = {r.conversation_id: r.conversation_title for r in result.records}
    assert titles["6f1c2a9e-3b7d-4c1e-9a2f-0d5e8b7c4a11"] == "Fix flaky login tests on CI"
    fallback = titles["9d7e2b14-5c3a-4f8e-b1d0-7a6c5e4f3b21"]
    assert fallback is not None and len(fallback) == 80
    assert fallback.startswith("This screenshot shows the settings page rendering the avatar")


def test_skipped_events_are_counted_by_reason() -> None:
    result = _import(MAIN_SESSION)
    assert result.skipped == {"file-history snapshot without edited files": 1,
                              "thinking block": 1}
    assert result.counted == {"context event: caveat": 1, "context event: system": 1,
                              "subagent event": 2, "interrupted turn": 1,
                              "turn without answer (interrupted)": 1}
    assert result.problems == []
    texts = [s.text for r in result.records for s in r.submissions]
    # The interrupted request keeps the user's words; the subagent's prompt is not theirs.
    assert "Thanks! Open a pull request for it." in texts
    assert all("SESSION_BACKEND overrides" not in t for t in texts)
    assert all(not t.startswith("[Request interrupted") for t in texts)


def test_pasted_image_becomes_an_attachment() -> None:
    (record,) = _import(IMAGE_SESSION).records
    assert [(a.name, a.mime, a.size) for a in record.attachments] == [
        ("image-1.png", "image/png", 70)]


def test_damaged_lines_become_problems_and_the_rest_is_imported(tmp_path: Path) -> None:
    lines = MAIN_SESSION.read_bytes().splitlines(keepends=True)
    damaged = [*lines[:4], b'{"type":"user","message": {oops\n', lines[4],
               lines[5].replace(b"CI differs", b"CI \xff\xfe differs"), *lines[6:],
               lines[-3][:120]]
    path = tmp_path / MAIN_SESSION.name
    path.write_bytes(b"".join(damaged))
    result = _import(path)
    assert [(p.location, p.reason.split(":")[0].split(" (")[0]) for p in result.problems] == [
        ("line 5", "malformed JSON"), ("line 7", "line is not valid UTF-8"),
        (f"line {len(damaged)}", "truncated last line")]
    assert all(p.source == str(path) for p in result.problems)
    assert result.problems[0].raw == '{"type":"user","message": {oops'
    assert [r.turn_id for r in result.records] == [r.turn_id for r in _import(MAIN_SESSION).records]


def test_events_without_timestamp_or_message_are_problems(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    events = [
        {"type": "user", "sessionId": "s1", "uuid": "u1", "message": {"content": "hi"}},
        {"type": "assistant", "sessionId": "s1", "uuid": "a1", "timestamp": "2025-01-01T00:00:00Z"},
        ["not", "an", "object"],
        {"type": "user", "sessionId": "s1", "uuid": "u2", "timestamp": "2025-01-01T00:00:01Z",
         "message": {"role": "user", "content": "What is 2+2?"}},
        {"type": "assistant", "sessionId": "s1", "uuid": "a2", "timestamp": "2025-01-01T00:00:02Z",
         "message": {"role": "assistant", "content": "4", "usage": {"input_tokens": 3}}},
    ]
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    result = _import(path)
    assert [(p.location, p.reason) for p in result.problems] == [
        ("line 1", "user event has no valid timestamp"),
        ("line 2", "assistant event has no message object"),
        ("line 3", "line is not a JSON object")]
    (record,) = result.records
    assert (record.turn_id, record.completion.text, record.conversation_title) == (
        "u2", "4", "What is 2+2?")
    assert record.usage is not None and record.usage.tokens_out == 0


def test_reimport_gives_identical_records_and_ingest_accepts_then_skips(
        settings: Settings) -> None:
    stream = iter_claude_code([FIXTURES], tenant="acme", user_id="u-dev")
    first = list(stream)
    assert stream.counted["turn without answer (interrupted)"] == 1
    assert [r.to_json() for r in first] == [r.to_json() for r in stream]
    report = Ingestor(settings).ingest_records(stream)
    assert (report.accepted, report.duplicates, report.quarantined) == (4, 0, [])
    again = Ingestor(settings).ingest_records(
        iter_claude_code([FIXTURES], tenant="acme", user_id="u-dev"))
    assert (again.accepted, again.duplicates, again.quarantined) == (0, 4, [])


def test_iterating_again_resets_the_tallies() -> None:
    stream = iter_claude_code([MAIN_SESSION], tenant="acme", user_id="u-dev")
    assert len(list(stream)) == 3
    assert len(list(stream)) == 3
    assert stream.counted["subagent event"] == 2


def test_bad_paths_and_identities_raise_record_error(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="does not exist"):
        iter_claude_code([tmp_path / "missing"], tenant="acme", user_id="u")
    with pytest.raises(RecordError, match="tenant 'a b' is not a valid id"):
        iter_claude_code([FIXTURES], tenant="a b", user_id="u")


def test_folder_import_reads_only_jsonl_files(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "projects")
    (tmp_path / "projects" / "-home-dev-webapp" / "sessions-index.json").write_text("{}")
    assert len(_import(tmp_path / "projects").records) == 4


@pytest.mark.parametrize("external", [
    "plain-id_1", "with spaces/and:colons", "x" * 129, "ünïcode", "!!!", "a.b", "a_b"])
def test_stable_id_fits_the_id_alphabet_and_is_deterministic(external: str) -> None:
    derived = stable_id(external)
    assert re.fullmatch(ID_PATTERN, derived)
    assert derived == stable_id(external)
    if re.fullmatch(ID_PATTERN, external):
        assert derived == external
    else:
        assert derived != stable_id(external + " ")


def test_stable_id_keeps_sanitized_lookalikes_apart() -> None:
    assert stable_id("a.b") != stable_id("a_b") == "a_b"
    assert stable_id("x" * 129) != stable_id("x" * 130)


# -- a v2.1 session: harness messages, subagents, interrupts, compaction, file-history --------

V2_PROJECT = Path(__file__).parent / "fixtures" / "claude_code_v2" / "-home-dev-search-api"
V2_SESSION = V2_PROJECT / "c41d8e2a-7b3f-4e19-a6d2-5f0b9c8e7a13.jsonl"
FIRST = "11111111-aaaa-4bbb-8ccc-000000000001"
SECOND = "66666666-aaaa-4bbb-8ccc-000000000015"
THIRD = "77777777-aaaa-4bbb-8ccc-000000000021"


def _import_v2() -> ImportResult:
    return iter_claude_code([V2_PROJECT.parent], tenant="acme", user_id="u-dev").collect()


def _turns() -> dict[str, TurnRecord]:
    return {r.turn_id: r for r in _import_v2().records}


def _kinds(record: TurnRecord) -> list[str]:
    return [e.kind for e in record.context_events]


def test_only_the_users_own_words_are_submissions() -> None:
    result = _import_v2()
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
    texts = [s.text for r in _import_v2().records for s in r.submissions]
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
    result = _import_v2()
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
        iter_claude_code([V2_PROJECT], tenant="acme", user_id="u-dev"))
    assert (report.accepted, report.duplicates) == (3, 0)
    rows = LakeStore(settings.lake).read(Table.CONTENT_ROWS, columns=["turn_id", "role"])
    roles = sorted((r["turn_id"], r["role"]) for r in rows.to_pylist())
    assert (SECOND, "user") in roles and (SECOND, "assistant") not in roles
    again = Ingestor(settings).ingest_records(
        iter_claude_code([V2_PROJECT], tenant="acme", user_id="u-dev"))
    assert (again.accepted, again.duplicates) == (0, 3)


# -- transcripts a tester wrote: slash commands, unreadable lines, queued prompts, titles -----

SESSION = "12121212-1111-4222-8333-444444444444"
IDENTITY = Identity(tenant="acme", user_id="u-ana", app="claude-code", agent="claude-code")


def ev(kind: str, uuid: str, second: int, content: Any, parent: str | None = None,
       **extra: Any) -> str:
    """One transcript line in Claude Code's shape (``second`` seconds after 10:00)."""
    event: dict[str, Any] = {
        "parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/p",
        "sessionId": SESSION, "version": "2.1.14", "gitBranch": "main", "type": kind,
        "uuid": uuid, "timestamp": f"2026-03-16T10:{second // 60:02d}:{second % 60:02d}.000Z"}
    if kind == "user":
        event["message"] = {"role": "user", "content": content}
    else:
        event["message"] = {"id": f"msg_{uuid}", "type": "message", "role": "assistant",
                            "content": content, "usage": {"input_tokens": 1,
                                                          "output_tokens": 1}}
    event.update(extra)
    return json.dumps(event, ensure_ascii=False)


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


def _write(folder: Path, lines: list[str], name: str = SESSION) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _import_as_ana(path: Path) -> ImportResult:
    return iter_claude_code([path], tenant="acme", user_id="u-ana").collect()


def _pairs(result: ImportResult) -> list[tuple[str, str]]:
    return [(r.submissions[0].text, r.completion.text) for r in result.records]


def _first_turn() -> list[str]:
    return [ev("user", "s-1", 0, "Rename the badger module to wolverine"),
            ev("assistant", "s-2", 5, text("Renamed badger to wolverine."), "s-1")]


def test_a_slash_command_is_a_turn_of_its_own_and_never_answers_the_previous_one(
        tmp_path: Path) -> None:
    path = _write(tmp_path, [
        *_first_turn(),
        ev("user", "s-3", 120, "<command-message>review is running…</command-message>\n"
           "<command-name>/review</command-name>\n"
           "<command-args>PR 42 focus on the otter cache</command-args>", "s-2"),
        ev("user", "s-4", 121, text("Review pull request PR 42. Check correctness."), "s-3",
           isMeta=True),
        ev("assistant", "s-5", 150, text("Review of PR 42: the otter cache leaks."), "s-4")])
    result = _import_as_ana(path)
    assert _pairs(result) == [
        ("Rename the badger module to wolverine", "Renamed badger to wolverine."),
        ("/review PR 42 focus on the otter cache", "Review of PR 42: the otter cache leaks.")]
    first, second = result.records
    assert second.turn_id == "s-3"
    assert "meta" not in [e.kind for e in first.context_events]
    assert [e.kind for e in second.context_events] == ["command", "meta", "workspace"]
    assert second.context_events[1].data == {
        "text": "Review pull request PR 42. Check correctness."}
    assert "context event before a turn not yet written" not in result.skipped


def test_a_lone_surrogate_is_replaced_and_the_line_kept(tmp_path: Path) -> None:
    prompt = ev("user", "s-3", 60, "PLACEHOLDER", "s-2").replace(
        "PLACEHOLDER", "Why does my flamingo emoji break here: \\ud83d please check")
    path = _write(tmp_path, [*_first_turn(), prompt,
                             ev("assistant", "s-4", 62, text("The emoji was cut in half."),
                                "s-3")])
    result = _import_as_ana(path)
    assert result.problems == []
    assert _pairs(result) == [
        ("Rename the badger module to wolverine", "Renamed badger to wolverine."),
        ("Why does my flamingo emoji break here: \ufffd please check",
         "The emoji was cut in half.")]
    assert result.counted["lone surrogate replaced with U+FFFD"] == 1


def test_an_answer_after_an_unreadable_prompt_never_lands_on_the_previous_turn(
        tmp_path: Path) -> None:
    path = _write(tmp_path, [
        *_first_turn(),
        '{"type":"user","uuid":"s-3", this is not json',
        ev("assistant", "s-4", 62, text("The emoji was cut in half."), "s-3"),
        ev("user", "s-5", 120, "Last question about ostriches", "s-4"),
        ev("assistant", "s-6", 122, text("Ostriches are fast."), "s-5")])
    result = _import_as_ana(path)
    assert _pairs(result) == [
        ("Rename the badger module to wolverine", "Renamed badger to wolverine."),
        ("Last question about ostriches", "Ostriches are fast.")]
    assert [p.location for p in result.problems] == ["line 3"]
    assert result.skipped["answer whose prompt line could not be read"] == 1


def test_an_unreadable_line_inside_a_turn_keeps_the_answers_that_continue_it(
        tmp_path: Path) -> None:
    path = _write(tmp_path, [
        ev("user", "s-1", 0, "Run the tests"),
        ev("assistant", "s-2", 1, [{"type": "tool_use", "id": "t1", "name": "Bash",
                                    "input": {"command": "pytest"}}], "s-1"),
        "{garbage",
        ev("assistant", "s-4", 3, text("All tests pass."), "s-2")])
    assert _pairs(_import_as_ana(path)) == [("Run the tests", "All tests pass.")]


def test_queued_prompts_and_every_answer_piece_are_kept_in_order(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        ev("user", "d-1", 0, "Export the invoices to CSV"),
        ev("assistant", "d-2", 2, [
            {"type": "text", "text": "Amounts are stored in cents, so I divide by 100."},
            {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "/x.py"}}],
           "d-1"),
        ev("user", "d-3", 3, [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
           "d-2"),
        json.dumps({"type": "queue-operation", "operation": "enqueue", "sessionId": SESSION,
                    "timestamp": "2026-03-16T10:00:03.500Z",
                    "content": "and convert the prices to euros"}),
        json.dumps({"parentUuid": "d-3", "isSidechain": False, "type": "attachment",
                    "uuid": "d-4", "timestamp": "2026-03-16T10:00:03.700Z",
                    "sessionId": SESSION, "attachment": {
                        "type": "queued_command", "commandMode": "prompt",
                        "prompt": "and convert the prices to euros",
                        "origin": {"kind": "human"}}}),
        ev("assistant", "d-5", 5, text("Done. Prices are converted too."), "d-4")])
    result = _import_as_ana(path)
    (turn,) = result.records
    assert [(s.text, s.event_type) for s in turn.submissions] == [
        ("Export the invoices to CSV", "prompt"),
        ("and convert the prices to euros", "followup")]
    assert turn.completion.text == ("Amounts are stored in cents, so I divide by 100.\n\n"
                                    "Done. Prices are converted too.")
    assert "unknown event type: attachment" not in result.skipped
    assert result.counted["queued prompt"] == 1


def test_ide_context_blocks_are_context_of_the_turn_not_the_users_words(
        tmp_path: Path) -> None:
    opened = ("<ide_opened_file>The user opened the file /x/export.py in the IDE."
              "</ide_opened_file>")
    selection = "<ide_selection>The user selected lines 3-4: header = []</ide_selection>"
    path = _write(tmp_path, [
        *_first_turn(),
        ev("user", "s-3", 60, [*text(opened), *text(selection),
                               *text("why is the header row missing?")], "s-2"),
        ev("assistant", "s-4", 62, text("The writer skipped it."), "s-3")])
    first, second = _import_as_ana(path).records
    assert [s.text for s in second.submissions] == ["why is the header row missing?"]
    assert [e.kind for e in first.context_events] == ["workspace"]
    ide = [e.data for e in second.context_events if e.kind == "ide_context"]
    assert ide == [
        {"ide_opened_file": "The user opened the file /x/export.py in the IDE."},
        {"ide_selection": "The user selected lines 3-4: header = []"}]


def test_legacy_subagent_transcripts_beside_the_session_are_linked(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    session = _write(project, [
        ev("user", "f-1", 0, "Find where the llama config is loaded"),
        ev("assistant", "f-2", 2, [{"type": "tool_use", "id": "tk1", "name": "Task", "input": {
            "description": "find config", "subagent_type": "Explore"}}], "f-1"),
        ev("user", "f-3", 30, [{"type": "tool_result", "tool_use_id": "tk1",
                                "content": text("Config is loaded in settings.py")}], "f-2",
           toolUseResult={"agentId": "a7c9e1", "status": "completed"}),
        ev("assistant", "f-4", 32, text("It is loaded in settings.py."), "f-3")])
    _write(project, [
        ev("user", "g-1", 3, "Find llama config loading", isSidechain=True, agentId="a7c9e1"),
        ev("assistant", "g-2", 29, text("Config is loaded in settings.py"), "g-1",
           isSidechain=True, agentId="a7c9e1")], name="agent-a7c9e1")
    assert transcript_files([project]) == [session]
    result = iter_claude_code([project], tenant="acme", user_id="u-ana").collect()
    (turn,) = result.records
    assert [(s.name, s.status) for s in turn.steps] == [
        ("Task", "started"), ("subagent:a7c9e1", "completed"), ("Task", "completed")]
    assert "subagent run outside the turns read" not in result.skipped


def _stored(settings: Settings) -> dict[str, TurnRecord]:
    rows = LakeStore(settings.lake).read(Table.TURN_LOGS, columns=["turn_id", "payload"])
    return {r["turn_id"]: TurnRecord.model_validate_json(r["payload"])
            for r in rows.to_pylist()}


def test_import_after_hook_captures_is_idempotent_when_a_summary_comes_later(
        hashing_settings: Settings, tmp_path: Path) -> None:
    settings = hashing_settings
    lines = [*_first_turn(),
             ev("user", "s-3", 60, "Question number 2 about narwhal tusks", "s-2"),
             ev("assistant", "s-4", 62, text("They are teeth."), "s-3")]
    path = _write(tmp_path / "hook", lines)
    capture_transcript(settings, SESSION, path, IDENTITY, final=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"type":"summary","summary":"Narwhal tusk research","leafUuid":"s-4"}\n')
    imported = run_ingest(settings, records=iter_claude_code(  # type: ignore[arg-type]
        [path], tenant="acme", user_id="u-ana"), embed=False, index=False, replace=True).ingest
    assert (imported.accepted, imported.duplicates, imported.replaced) == (0, 2, 0)
    again = capture_transcript(settings, SESSION, path, IDENTITY, final=True)
    assert (again.records, again.accepted, again.replaced) == (0, 0, 0)
    assert {t.conversation_title for t in _stored(settings).values()} == {
        "Rename the badger module to wolverine"}


def test_a_line_still_being_written_is_not_left_in_quarantine_once_captured(
        hashing_settings: Settings, tmp_path: Path) -> None:
    settings = hashing_settings
    complete = ev("user", "s-3", 60, "And gannets?", "s-2")
    path = _write(tmp_path / "hook", _first_turn())
    with path.open("a", encoding="utf-8") as fh:
        fh.write(complete[:50])
    first = capture_transcript(settings, SESSION, path, IDENTITY)
    assert [p.split(": ", 1)[1] for p in first.problems] == ["truncated last line"]
    with path.open("a", encoding="utf-8") as fh:
        fh.write(complete[50:] + "\n")
    second = capture_transcript(settings, SESSION, path, IDENTITY)
    assert (second.accepted, second.problems, second.held) == (1, [], True)
    ended = capture_transcript(settings, SESSION, path, IDENTITY, final=True)
    assert (ended.accepted, ended.problems) == (1, [])
    store = LakeStore(settings.lake)
    assert not store.exists(Table.QUARANTINE) or store.read(Table.QUARANTINE).num_rows == 0
    assert sorted(t.submissions[0].text for t in _stored(settings).values()) == [
        "And gannets?", "Rename the badger module to wolverine"]


def test_a_task_notification_with_its_trailing_instruction_line_is_harness_text(
        tmp_path: Path) -> None:
    notification = ("<task-notification>\n<task-id>b7f2</task-id>\n"
                    "<output-file>/tmp/claude/tasks/b7f2.output</output-file>\n"
                    "<status>completed</status>\n<summary>Background command \"pytest\" "
                    "completed (exit code 0)</summary>\n</task-notification>\n"
                    "Read the output file to retrieve the result: /tmp/claude/tasks/b7f2.output")
    path = _write(tmp_path, [
        *_first_turn(),
        ev("user", "s-3", 60, notification, "s-2"),
        ev("assistant", "s-4", 62, text("The tests pass."), "s-3"),
        # A user's words that merely follow a notification's shape stay theirs.
        ev("user", "s-5", 90, "<task-notification>x</task-notification>\nplease read it", "s-4"),
        ev("assistant", "s-6", 92, text("Read."), "s-5")])
    first, second = _import_as_ana(path).records
    assert [s.text for s in first.submissions] == ["Rename the badger module to wolverine"]
    (event,) = [e for e in first.context_events if e.kind == "task_notification"]
    assert event.data["task_id"] == "b7f2"
    assert event.data["instruction"] == ("Read the output file to retrieve the result: "
                                         "/tmp/claude/tasks/b7f2.output")
    assert second.submissions[0].text.endswith("please read it")
