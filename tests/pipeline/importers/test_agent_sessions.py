"""Gemini CLI, Claude.ai, Copilot CLI and Aider: each class of record their files hold."""

from __future__ import annotations

from pathlib import Path

from pipeline.importers.aider import iter_aider
from pipeline.importers.claude_ai import iter_claude_ai
from pipeline.importers.common import ImportResult
from pipeline.importers.copilot_cli import iter_copilot_cli
from pipeline.importers.gemini_cli import iter_gemini_cli

FIXTURES = Path(__file__).parent / "fixtures"
IDENTITY = {"tenant": "acme", "user_id": "u-ana"}


def _gemini() -> ImportResult:
    return iter_gemini_cli([FIXTURES / "gemini_cli"], **IDENTITY).collect()


def test_gemini_json_session_words_thoughts_tools_tokens_and_continuation() -> None:
    result = _gemini()
    first = result.records[0]
    assert first.agent == "gemini-cli" and first.turn_id == "m-u1"
    assert first.conversation_title == "Proofing schedule review"
    # The slash command is what the user typed; the expanded prompt is context.
    assert [s.text for s in first.submissions] == ["/review schedule.py"]
    kinds = [e.kind for e in first.context_events]
    assert kinds == ["expanded_prompt", "model", "continuation"]
    assert "Content from @schedule.py" in first.context_events[0].data["text"]
    # Thoughts are a reasoning step, not the answer; the empty message with tool calls adds
    # only steps; the continuation did not open a turn.
    assert first.steps[0].name == "reasoning" and "Checking proof times" in (
        first.steps[0].detail or "")
    assert [(s.name, s.status) for s in first.steps[1:]] == [
        ("read_file", "started"), ("read_file", "completed"),
        ("run_shell_command", "started"), ("run_shell_command", "failed")]
    assert first.completion.text.startswith("The proofing step is 45 minutes")
    assert first.completion.text.endswith("cooling rack timings; they match.")
    assert "Checking proof times" not in first.completion.text
    assert first.usage is not None and (first.usage.tokens_in, first.usage.tokens_out) == (
        3200, 120)


def test_gemini_cancelled_request_error_message_and_bad_message() -> None:
    result = _gemini()
    by_id = {r.turn_id: r for r in result.records}
    assert by_id["m-u3"].completion.status == "interrupted"
    assert [e.kind for e in by_id["m-u4"].context_events] == ["model", "error"]
    assert next(p.location for p in result.problems).endswith("id=bad")


def test_gemini_jsonl_rewrites_rewinds_metadata_and_logs_json() -> None:
    result = _gemini()
    recorded = [r for r in result.records if r.conversation_id.startswith("a7b8c9d0")]
    assert [r.turn_id for r in recorded] == ["j-u1", "j-u3"]
    # The message id written twice keeps its last version; the rewind dropped j-u2 and j-g2.
    assert recorded[0].completion.text == "Bake focaccia at 220 °C for about 25 minutes."
    assert recorded[1].conversation_title == "Oven temperatures for Italian breads"
    assert result.skipped["message dropped by a rewind"] == 2
    assert result.skipped["logs.json (it repeats the prompts the sessions hold)"] == 1
    assert any(p.reason == "line is not a JSON object" for p in result.problems)


def test_claude_ai_current_branch_blocks_attachments_and_placeholders() -> None:
    result = iter_claude_ai(FIXTURES / "claude_ai" / "conversations.json",
                            **IDENTITY).collect()
    first, second, other = result.records
    assert first.agent == "claude-ai" and first.turn_id == "m1"
    assert first.conversation_title == "Rye starter troubleshooting"
    assert first.completion.text == ("An acetone smell means the starter is hungry: feed it "
                                     "twice a day at a 1:1:1 ratio.")
    assert "not supported on your current device" not in first.model_dump_json()
    assert "private chain of thought" not in first.model_dump_json()
    assert [(s.name, s.status) for s in first.steps] == [
        ("reasoning", "completed"), ("web_search", "started"), ("web_search", "completed")]
    assert [c.url for c in first.citations] == ["https://example.org/starter"]
    log, photo = first.attachments
    assert log.text == "Day 1: 50g rye, 50g water. Day 2: skipped feeding."
    assert (photo.name, photo.mime) == ("starter.jpg", "image/jpeg")
    # The retried answer is on another branch: the current leaf's answer is kept.
    assert second.completion.text == "Keep it at 24 to 26 °C."
    assert result.skipped["message on another branch"] == 1
    assert result.skipped["token_budget block"] == 1
    # A conversation without parent links is read in order, its flat text used.
    assert other.completion.text.startswith("Whisk 1 part olive oil")
    assert len(result.problems) == 2


def test_copilot_cli_session_context_transformed_prompt_harness_tools_and_abort() -> None:
    result = iter_copilot_cli([FIXTURES / "copilot_cli"], **IDENTITY).collect()
    first, second = result.records
    assert first.agent == "copilot-cli" and first.turn_id == "ev-004"
    assert first.conversation_id == "3f2e1d0c-aaaa-4bbb-8ccc-000000000001"
    assert [s.text for s in first.submissions] == [
        "Add a test for the croissant lamination count"]
    kinds = [e.kind for e in first.context_events]
    assert kinds == ["session", "info", "model_change", "transformed_prompt", "harness_message"]
    assert first.context_events[0].data["branch"] == "main"
    assert [(s.name, s.status) for s in first.steps] == [
        ("bash", "started"), ("bash", "completed"), ("create", "started"), ("create", "failed")]
    assert first.completion.text.endswith("asserting three folds.")
    assert [a.name for a in first.attachments] == ["croissant.py"]
    assert second.completion.status == "interrupted"
    assert [p.reason for p in result.problems] == ["truncated last line"]


def test_aider_sessions_commands_edits_commits_tokens_and_interrupt() -> None:
    result = iter_aider([FIXTURES / "aider"], **IDENTITY).collect()
    first, asked, cut, later = result.records
    assert first.agent == "aider" and first.conversation_id != later.conversation_id
    assert [s.text for s in first.submissions] == [
        "Add a cooling step to the bread recipe\nit should last 30 minutes"]
    assert [e.kind for e in first.context_events] == ["session", "command"]
    assert first.context_events[1].data == {"command": "/add recipes/bread.py",
                                            "output": "Added recipes/bread.py to the chat"}
    assert ">>>>>>> REPLACE" in first.completion.text
    assert [(s.name, s.detail) for s in first.steps] == [
        ("edit", "recipes/bread.py"),
        ("commit", "1a2b3c4 feat: Add a 30 minute cooling step to the bread recipe")]
    assert first.usage is not None and (first.usage.tokens_in, first.usage.tokens_out) == (
        2100, 150)
    assert asked.submissions[0].text == "/ask what hydration does the rye use?"
    assert cut.completion.status == "interrupted"
    assert cut.completion.text == "I'll change the water amou"
    assert later.context_events[1].data["output"] == "Running pytest -q\n3 passed"


def test_aider_grown_history_keeps_ids_and_adds_the_new_turn(tmp_path: Path) -> None:
    source = (FIXTURES / "aider" / "bakery" / ".aider.chat.history.md").read_text()
    history = tmp_path / "bakery" / ".aider.chat.history.md"
    history.parent.mkdir()
    history.write_text(source)
    before = [r.key for r in iter_aider([history], **IDENTITY).collect().records]
    history.write_text(source + "\n#### And the baguette?  \n\nBake it at 250 °C.\n")
    after = iter_aider([history], **IDENTITY).collect().records
    assert [r.key for r in after][:len(before)] == before
    assert after[-1].completion.text == "Bake it at 250 °C."
