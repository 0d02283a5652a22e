from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lake.errors import RecordError
from lake.records import ID_PATTERN, TurnRecord
from lake.settings import Settings
from pipeline.importers import ImportResult, iter_claude_code, stable_id
from pipeline.ingest import Ingestor

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
