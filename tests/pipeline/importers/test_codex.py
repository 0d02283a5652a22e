"""Codex rollouts: both shapes, copies that must not double a turn, harness text, tool steps,
reasoning, usage, compaction, aborted turns, quarantined lines."""

from __future__ import annotations

from pathlib import Path

from lake.records import TurnRecord
from pipeline.importers.codex import iter_codex
from pipeline.importers.common import ImportResult

FIXTURES = Path(__file__).parent / "fixtures" / "codex"
SESSION = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
OLDER = "5973b6c0-94b8-487b-a530-2aeb6098ae0e"


def _import(*paths: Path) -> ImportResult:
    return iter_codex(list(paths) or [FIXTURES], tenant="acme", user_id="u-ana").collect()


def _turns(result: ImportResult, conversation: str) -> dict[str, TurnRecord]:
    return {r.turn_id: r for r in result.records if r.conversation_id == conversation}


def test_a_current_rollout_makes_one_turn_per_request_without_copies() -> None:
    result = _import()
    turns = _turns(result, SESSION)
    assert list(turns) == ["turn-1", "turn-2", "turn-3"]
    first = result.records[1]
    assert first.turn_id == "turn-1" and first.agent == "codex" and first.app == "codex"
    # The user_message and agent_message events repeat the items: one prompt, one answer.
    assert [s.text for s in first.submissions] == [
        "Why does the sourdough timer test fail? Fix it."]
    assert first.completion.text.startswith("The timer rounded proofing minutes up")
    assert "\n\n" not in first.completion.text
    assert result.skipped["user_message event (a copy of the prompt)"] == 2
    assert result.skipped["agent_message event (a copy of the answer)"] == 2
    assert first.conversation_title == "Why does the sourdough timer test fail? Fix it."


def test_harness_text_and_instructions_are_context_not_the_users_words() -> None:
    first = _import().records[1]
    kinds = [e.kind for e in first.context_events]
    assert kinds == ["session", "instructions", "instructions", "environment", "turn_context"]
    session = first.context_events[0].data
    assert session["git_branch"] == "main" and session["cwd"] == "/home/ana/bakery"
    assert first.context_events[1].data["role"] == "developer"
    assert "AGENTS.md" in first.context_events[2].data["text"]
    assert first.context_events[3].data["approval_policy"] == "on-request"
    # turn_context is written for each model request: the turn keeps the first.
    assert first.context_events[4].data["model"] == "gpt-5-codex"
    assert all("AGENTS" not in s.text and "environment" not in s.text
               for s in first.submissions)


def test_tool_calls_reasoning_and_usage_become_steps_and_usage() -> None:
    first = _import().records[1]
    steps = [(s.name, s.status) for s in first.steps]
    assert steps == [("reasoning", "completed"), ("shell", "started"), ("shell", "failed"),
                     ("apply_patch", "started"), ("apply_patch", "completed"),
                     ("web_search", "completed")]
    assert first.steps[1].detail == "pytest tests/test_timer.py -q"
    assert "assert 45 == 44" in (first.steps[2].detail or "")
    assert "*** Update File: bakery/timer.py" in (first.steps[3].detail or "")
    assert first.steps[5].detail == "python round half to even banker's rounding"
    assert "SECRET" not in first.model_dump_json()
    # The second token_count repeats the first (same total): counted once.
    assert first.usage is not None
    assert (first.usage.tokens_in, first.usage.tokens_out) == (2700, 180)
    assert [a.name for a in first.attachments] == ["image-1.png"]
    assert first.attachments[0].size == len(b"\x89PNG fake image bytes")


def test_ide_context_event_only_words_and_an_aborted_turn() -> None:
    turns = _turns(_import(), SESSION)
    second = turns["turn-2"]
    assert [s.text for s in second.submissions] == ["Rename preheat() to warm_up() everywhere"]
    ide = [e for e in second.context_events if e.kind == "ide_context"]
    assert len(ide) == 1 and "Active file: bakery/oven.py" in ide[0].data["text"]
    assert second.completion.status == "interrupted" and second.completion.text == ""
    assert [s.name for s in second.steps] == ["shell"]


def test_compaction_goes_with_the_turn_after_it() -> None:
    third = _turns(_import(), SESSION)["turn-3"]
    assert third.context_events[0].kind == "compaction"
    assert "timer rounding" in third.context_events[0].data["summary"]
    assert third.completion.text == "The rye loaf bakes at 230 °C for 40 minutes."


def test_the_older_shape_reads_bare_items_and_skips_state_lines() -> None:
    result = _import()
    older = [r for r in result.records if r.conversation_id == OLDER]
    assert len(older) == 1
    turn = older[0]
    assert [s.text for s in turn.submissions] == ["List the bread recipes in this repo"]
    assert [e.kind for e in turn.context_events] == ["session", "instructions", "environment"]
    assert turn.context_events[0].data["instructions"] == "Prefer small commits."
    assert [(s.name, s.status) for s in turn.steps] == [("shell", "started"),
                                                        ("shell", "completed")]
    assert turn.completion.text == "There are three: rye, sourdough and baguette."
    assert result.skipped["state line (older rollout)"] == 3
    assert result.skipped["reasoning without a readable summary"] == 1


def test_a_malformed_line_is_a_problem_and_ids_are_stable() -> None:
    result = _import()
    assert [(p.location, p.reason.split(":")[0]) for p in result.problems] == [
        ("line 38", "malformed JSON")]
    again = _import()
    assert [r.key for r in again.records] == [r.key for r in result.records]
