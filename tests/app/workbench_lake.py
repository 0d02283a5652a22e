"""The workbench test lake: demo data plus a few known turns the tests look for."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lake.settings import Settings
from pipeline.demo import generate_lines
from pipeline.jobs import run_ingest

TENANT = "acme"
ANA = "u-wb-ana"
BEN = "u-wb-ben"
KNOWN_CONVERSATION = "c-wb-forecast"
PRIVATE_CONVERSATION = "c-wb-private"
UNTITLED_CONVERSATION = "c-wb-untitled"
FILE_BYTES = b"month,hours\n3,12\n4,13\n"
FILE_REF = f"conv:fi:conv_{KNOWN_CONVERSATION}.turn_t-0001.files/quokka.csv"
# A 1×1 PNG: the hosted image Replay previews.
PNG_BYTES = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
PANEL_CODE = "hours = [12, 13]\nprint(sum(hours))"
PANEL_OUTPUT = "25"
QUERY = "quokka spreadsheet drift"


def turn_record(turn: int, *, at: datetime, user: str = ANA,
                conversation: str = KNOWN_CONVERSATION, prompt: str, answer: str,
                **extra: Any) -> dict[str, Any]:
    """A minimal valid turn record at ``at`` (keyword arguments add or override fields)."""
    record: dict[str, Any] = {
        "schema": "turnlake.turn.v1", "tenant": TENANT, "app": "support-desk",
        "agent": "react-agent", "user_id": user, "conversation_id": conversation,
        "turn_id": f"t-{turn:04d}", "writer": "minimal", "started_at": at.isoformat(),
        "ended_at": (at + timedelta(seconds=40)).isoformat(),
        "conversation_title": "Quokka workbook",
        "submissions": [{"text": prompt, "event_type": "prompt", "batch": 0,
                         "arrived_at": at.isoformat()}],
        "completion": {"text": answer, "at": (at + timedelta(seconds=30)).isoformat()},
    }
    record.update(extra)
    return record


def known_records(now: datetime) -> list[dict[str, Any]]:
    """The turns the tests look for: a rich turn with a hosted file, a follow-up turn, another
    user's private turn and a turn already past its TTL."""
    at = now - timedelta(days=2)
    stamp = (at + timedelta(seconds=5)).isoformat()
    rich = turn_record(
        1, at=at, writer="rich",
        prompt="the quokka spreadsheet shows a timezone drift of two hours",
        answer="Converted the **quokka** timestamps to UTC; see the corrected file.",
        submissions=[
            {"text": "the quokka spreadsheet shows a timezone drift of two hours",
             "event_type": "prompt", "batch": 0, "arrived_at": at.isoformat()},
            {"text": "actually, use UTC everywhere", "event_type": "steer", "batch": 1,
             "arrived_at": stamp}],
        attachments=[{"name": "quokka.xlsx", "mime": "application/vnd.ms-excel",
                      "size": 2048, "text": "hours column of the quokka sheet"},
                     {"name": "quokka-copy.csv", "mime": "text/csv", "size": len(FILE_BYTES),
                      "ref": FILE_REF}],
        steps=[{"name": "run_python", "status": "completed", "at": stamp, "detail": "ok"}],
        hosted_files=[{"path": "files/quokka.csv", "mime": "text/csv",
                       "content_b64": base64.b64encode(FILE_BYTES).decode(),
                       "description": "corrected quokka hours"},
                      {"path": "files/chart.png", "mime": "image/png",
                       "content_b64": base64.b64encode(PNG_BYTES).decode(),
                       "description": "hours per month"}],
        events=[{"type": "panel.code", "at": stamp,
                 "data": {"title": "run_python", "language": "python", "code": PANEL_CODE,
                          "output": PANEL_OUTPUT}},
                {"type": "badge.cost", "at": (at + timedelta(seconds=30)).isoformat(),
                 "data": {"usd": 0.01, "tokens": 200}},
                {"type": "canvas.opened", "at": stamp, "data": {"canvas": "hours"}}],
        summary="Goal: fix the quokka timezone drift. Outcome: converted to UTC.",
        anchors=["quokka.csv"], citations=[{"title": "tz docs",
                                            "url": "https://example.com/tz"}],
        usage={"tokens_in": 120, "tokens_out": 80, "cost_usd": 0.01, "duration_ms": 4000},
        feedback={"rating": 1, "comment": "great"})
    untitled = turn_record(5, at=at + timedelta(hours=1), conversation=UNTITLED_CONVERSATION,
                           prompt="why does the wallaby export stall at night?",
                           answer="The wallaby export waits on the nightly lock.")
    del untitled["conversation_title"]
    return [
        rich, untitled,
        turn_record(2, at=at + timedelta(minutes=5), prompt="thanks, and the April sheet?",
                    answer=f"April is fine. The corrected sheet is still {FILE_REF}."),
        turn_record(3, at=at, user=BEN, conversation=PRIVATE_CONVERSATION,
                    prompt="zanzibar budget secret numbers", answer="kept in the vault",
                    conversation_title="Zanzibar budget"),
        turn_record(4, at=now - timedelta(days=5), conversation="c-wb-expired", ttl_days=1,
                    prompt="an expired wombat question", answer="an expired wombat answer",
                    conversation_title="Expired wombat"),
    ]


@dataclass(frozen=True)
class SeededLake:
    """A lake with demo data and the known turns, and the instant it was seeded at."""

    settings: Settings
    now: datetime


def seed(root: Path | str, *, demo_turns: int = 120, index: bool = True,
         model: str | None = "hashing-64") -> SeededLake:
    """Build a lake at ``root`` (a folder or an s3:// URI) with the hashing-64 embedder (or
    ``model``; None = the packaged sentence-transformers model)."""
    now = datetime.now(UTC).replace(microsecond=0)
    settings = Settings(lake=root, embedding_model=model)
    lines: list[object] = list(generate_lines(users=6, turns=demo_turns, seed=7, now=now))
    records = [*lines, *(json.dumps(r) for r in known_records(now))]
    report = run_ingest(settings, records=records, embed=True, index=index)
    assert not report.ingest.quarantined, report.ingest.quarantined
    return SeededLake(settings, now)
