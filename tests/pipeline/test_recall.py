"""Recall at the prompt: `turnlake hook claude-code-recall` through the console script's fast
path, straight from a lake and through a real `turnlake serve`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lake.settings import Settings
from pipeline.importers.common import Identity
from pipeline.importers.live import capture_transcript
from pipeline.recall import HEADER, PastTurn, render, select
from tests.pipeline.importers.claude_session import TURNS, SessionWriter
from tests.pipeline.service.server import Server, make_keys, server_env

ROOT = Path(__file__).resolve().parents[2]
PAST = "5e55a0b1-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
OTHER = "0ther000-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
NOW = "9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
EXPORT_PROMPT = "the nightly invoice export times out again, what did we change last time?"


def hit(turn: str, conversation: str, relevance: float, answer: str = "An answer.\nMore.",
        prompt: str = "A question") -> dict[str, Any]:
    return {"turn_id": turn, "conversation_id": conversation, "turn_at": "2026-11-20T09:00:00Z",
            "relevance": relevance, "role": "user", "text": prompt,
            "snippets": {"user": prompt, "assistant": answer}}


def test_render_keeps_to_the_budget_and_always_names_the_turn() -> None:
    long = "word " * 2000
    turns = [PastTurn.of(hit(f"t-{n}", "c-1", 0.9, answer=long, prompt=long)) for n in range(5)]
    text = render(turns, budget_tokens=200, max_turns=3)
    assert text is not None and text.startswith(HEADER)
    assert len(text) <= 200 * 4
    assert [f"turn t-{n})" in text for n in range(5)] == [True, True, True, False, False]
    assert render([], budget_tokens=600) is None
    assert render(turns, budget_tokens=10) is None  # not even the header fits


def test_select_drops_the_current_session_and_what_misses_the_floor() -> None:
    hits = [hit("t-1", NOW, 0.99), hit("t-2", PAST, 0.95), hit("t-3", PAST, 0.5)]
    assert [t.turn_id for t in select(hits, NOW, 0.8)] == ["t-2"]


def _history(settings: Settings, tmp_path: Path) -> None:
    """u-ana's past session (the replay's turns) and u-ben's session on the same subject."""
    for user, session, turns in (("u-ana", PAST, TURNS),
                                 ("u-ben", OTHER, [TURNS[0]])):
        writer = SessionWriter(tmp_path / user / f"{session}.jsonl", session, "/srv/app")
        for prompt, answer, tools in turns:
            writer.turn(prompt, answer, tools)
        identity = Identity(tenant="acme", user_id=user, app="claude-code", agent="claude-code")
        report = capture_transcript(settings, session, writer.path, identity, final=True,
                                    state_dir=tmp_path / "state")
        assert report.accepted == len(turns) - (1 if user == "u-ana" else 0)


def _recall(session: str, prompt: str, *args: str, key: str | None = None,
            env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the hook as the console script does (pipeline.entry), as Claude Code would."""
    payload = json.dumps({"session_id": session, "transcript_path": "/x.jsonl", "cwd": "/srv",
                          "hook_event_name": "UserPromptSubmit", "prompt": prompt})
    environment = {**(env or server_env()), "PYTHONPATH": str(ROOT)}
    environment.pop("TURNLAKE_KEY", None)
    if key:
        environment["TURNLAKE_KEY"] = key
    done = subprocess.run([sys.executable, "-c", "from pipeline.entry import main; main()",
                           "hook", "claude-code-recall", "--tenant", "acme", "--user", "u-ana",
                           *args], input=payload.encode(), capture_output=True, timeout=300,
                          env=environment, cwd=ROOT)
    return done.returncode, done.stdout.decode()


def _context(output: str) -> str:
    answer = json.loads(output)
    assert answer["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    context: str = answer["hookSpecificOutput"]["additionalContext"]
    return context


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_recall_from_a_lake_adds_only_the_users_own_relevant_past_turns(
        hashing_settings: Settings, tmp_path: Path) -> None:
    _history(hashing_settings, tmp_path)
    lake = ["--lake", str(hashing_settings.lake), "--log", str(tmp_path / "recall.log")]
    code, output = _recall(NOW, EXPORT_PROMPT, *lake)
    assert code == 0, (tmp_path / "recall.log").read_text()
    context = _context(output)
    assert "nightly export of invoices" in context and f"conversation {PAST}" in context
    assert OTHER not in context  # u-ben's turn on the same subject is not u-ana's
    assert len(context) <= 600 * 4
    # In the past session itself, its own turns are not recalled; nor is anything for an
    # unrelated prompt or a slash command.
    for session, prompt in ((PAST, EXPORT_PROMPT), (NOW, "zebra quantum marmalade kite"),
                            (NOW, "/compact")):
        code, output = _recall(session, prompt, *lake)
        assert (code, output) == (0, ""), (session, prompt)
    code, output = _recall(NOW, EXPORT_PROMPT, "--lake", str(tmp_path / "missing"),
                           "--log", str(tmp_path / "recall.log"))
    assert (code, output) == (1, "")
    assert "no lake at" in (tmp_path / "recall.log").read_text()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_recall_through_a_warm_server_with_the_users_key(
        hashing_settings: Settings, tmp_path: Path) -> None:
    _history(hashing_settings, tmp_path)
    keys = make_keys(hashing_settings.lake)  # type: ignore[arg-type]
    with Server(hashing_settings.lake) as server:  # type: ignore[arg-type]
        args = ("--server", server.url, "--log", str(tmp_path / "recall.log"))
        code, output = _recall(NOW, EXPORT_PROMPT, *args, key=keys["user"])
        assert code == 0, (tmp_path / "recall.log").read_text()
        context = _context(output)
        assert "nightly export of invoices" in context and OTHER not in context
        code, output = _recall(NOW, EXPORT_PROMPT, *args, key=keys["recorder"])
        assert (code, output) == (1, "")  # a recorder key may not read
        assert "403" in (tmp_path / "recall.log").read_text()
        code, output = _recall(NOW, EXPORT_PROMPT, *args)
        assert (code, output) == (1, "")
