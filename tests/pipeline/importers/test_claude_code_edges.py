"""The Claude Code importer and live capture on transcripts a tester wrote in Claude Code's
shapes: slash commands, unreadable lines, queued prompts, split answers, legacy subagent files,
IDE context, titles across hook and import, a line still being written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lake.records import TurnRecord
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.importers import ImportResult, iter_claude_code
from pipeline.importers.claude_files import transcript_files
from pipeline.importers.common import Identity
from pipeline.importers.live import capture_transcript
from pipeline.jobs import run_ingest

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


def _import(path: Path) -> ImportResult:
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
    result = _import(path)
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
    result = _import(path)
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
    result = _import(path)
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
    assert _pairs(_import(path)) == [("Run the tests", "All tests pass.")]


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
    result = _import(path)
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
    first, second = _import(path).records
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
    first, second = _import(path).records
    assert [s.text for s in first.submissions] == ["Rename the badger module to wolverine"]
    (event,) = [e for e in first.context_events if e.kind == "task_notification"]
    assert event.data["task_id"] == "b7f2"
    assert event.data["instruction"] == ("Read the output file to retrieve the result: "
                                         "/tmp/claude/tasks/b7f2.output")
    assert second.submissions[0].text.endswith("please read it")
