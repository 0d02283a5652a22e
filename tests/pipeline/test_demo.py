"""Tests of the demo data generator: determinism, validity, variety, and a real ingest."""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import string
import struct
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lake.records import TurnRecord, parse_record
from lake.refs import file_ref
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.demo import generate_lines, generate_records, png_bar_chart, write_demo
from pipeline.demo_texts import (
    DRAWN_SLOTS,
    GENERIC_FOLLOWUPS,
    GENERIC_STEERS,
    NOTES,
    PAGES,
    SLOT_POOLS,
    TENANT_APPS,
    TOPICS,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@pytest.fixture(scope="module")
def records() -> list[TurnRecord]:
    return [parse_record(line) for line in generate_lines(users=12, turns=1500, seed=7, now=NOW)]


def _png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Check signature, chunk order and CRCs; return width, height and raw scanlines."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, kinds, idat, header = 8, [], b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        kinds.append(kind)
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert (depth, color) == (8, 2)
    return width, height, zlib.decompress(idat)


def test_same_seed_and_now_give_the_same_records() -> None:
    first = list(generate_lines(users=5, turns=200, seed=11, now=NOW))
    assert first == list(generate_lines(users=5, turns=200, seed=11, now=NOW))
    assert first != list(generate_lines(users=5, turns=200, seed=12, now=NOW))
    models = [r.to_json() for r in generate_records(users=5, turns=200, seed=11, now=NOW)]
    assert models == [parse_record(line).to_json() for line in first]


def test_exact_turn_count_valid_ids_and_unique_keys(records: list[TurnRecord]) -> None:
    assert len(records) == 1500
    assert len({r.key for r in records}) == 1500
    for r in records:
        for value in (r.tenant, r.app, r.agent, r.user_id, r.conversation_id, r.turn_id):
            assert ID.match(value), value
    assert {r.tenant for r in records} == {"acme", "globex", "initech"}
    assert len({r.user_id for r in records}) == 12
    assert all(re.fullmatch(r"c-(acme|globex|initech)-\d{4,}", r.conversation_id)
               and r.conversation_id.startswith(f"c-{r.tenant}-") for r in records)
    turns_per_conversation = Counter(r.conversation_id for r in records).values()
    assert max(turns_per_conversation) <= 12 and min(turns_per_conversation) >= 1
    assert len(set(turns_per_conversation)) > 5


def test_times_lie_in_the_last_120_days_with_recent_weeks_busier(
        records: list[TurnRecord]) -> None:
    for r in records:
        assert NOW - timedelta(days=120) <= r.started_at <= r.ended_at < NOW
        assert r.submissions[0].event_type == "prompt" and r.submissions[0].batch == 0
        assert all(r.started_at <= s.arrived_at <= r.ended_at for s in r.submissions)
        assert all(r.started_at <= s.at <= r.ended_at for s in r.steps)
    last_month = sum(r.started_at > NOW - timedelta(days=30) for r in records)
    oldest_month = sum(r.started_at < NOW - timedelta(days=90) for r in records)
    assert last_month > 2 * oldest_month > 0


def test_writers_submissions_and_ttl_mix(records: list[TurnRecord]) -> None:
    n = len(records)
    writers = Counter(r.writer for r in records)
    assert 0.3 < writers["rich"] / n < 0.5
    assert {r.agent for r in records} == {"react-agent", "langgraph-bot", "claude-code"}
    assert all(r.agent == "react-agent" for r in records if r.writer == "rich")
    kinds = Counter(s.event_type for r in records for s in r.submissions)
    assert 0.15 < kinds["followup"] / n < 0.35 and 0.03 < kinds["steer"] / n < 0.13
    expired = [r for r in records
               if r.ttl_days is not None and r.ended_at + timedelta(days=r.ttl_days) < NOW]
    assert 0.01 < len(expired) / n < 0.06
    assert any(r.ttl_days is not None and r not in expired for r in records)
    assert 0.15 < sum(r.feedback is not None for r in records) / n < 0.35
    assert {r.feedback.rating for r in records if r.feedback} == {1, -1}


def test_rich_turns_carry_summary_anchors_and_notes(records: list[TurnRecord]) -> None:
    for r in records:
        if r.writer == "rich":
            assert r.summary and r.summary.startswith("Goal: ") and "Outcome: " in r.summary
            assert 1 <= len(r.anchors) <= 4 and len(r.notes) <= 2
        else:
            assert r.summary is None and not r.anchors and not r.notes
    anchors = {a for r in records for a in r.anchors}
    assert any(re.fullmatch(r"INC-\d{4}", a) for a in anchors)
    assert any(r.notes for r in records)


def test_texts_are_varied_and_topical(records: list[TurnRecord]) -> None:
    openings = {r.submissions[0].text for r in records}
    assert len(openings) > 300
    text = " ".join(s.text for r in records for s in r.submissions)
    for phrase in ("openpyxl", "ERR_CONNECTION_RESET", "CrashLoopBackOff",
                   "No module named 'polars'", "travel policy", "invoice"):
        assert phrase in text, phrase
    assert len({r.conversation_title for r in records if r.conversation_title}) > 60
    assert any("\n- " in r.completion.text for r in records)
    assert any("`" in r.completion.text for r in records)


def test_attachments_hosted_files_and_live_activity(records: list[TurnRecord]) -> None:
    attachments = [a for r in records for a in r.attachments]
    assert any(a.text for a in attachments) and any(a.text is None for a in attachments)
    assert all(a.size == len(a.text.encode()) for a in attachments if a.text)
    hosted = [r for r in records if r.hosted_files]
    assert 0.08 < len(hosted) / len(records) < 0.25
    mimes = set()
    for r in hosted:
        for f in r.hosted_files:
            data = f.decoded_bytes()
            assert data, f.path
            mimes.add(f.mime)
            assert file_ref(r.conversation_id, r.turn_id, f.path) in r.completion.text
            if f.mime == "image/png":
                width, height, raw = _png_pixels(data)
                assert len(raw) == height * (1 + 3 * width)
            elif f.mime == "text/csv":
                rows = list(csv.reader(io.StringIO(data.decode())))
                assert len(rows) >= 6 and len({len(row) for row in rows}) == 1
            else:
                assert data.decode().startswith("# ")
    assert mimes == {"image/png", "text/csv", "text/markdown"}
    assert {e.type for r in records for e in r.events} == {"chat.step", "badge.cost",
                                                          "panel.code"}
    assert {s.status for r in records for s in r.steps} == {"started", "completed", "failed"}
    assert any(s.name == "run_python" for r in records for s in r.steps)
    cited = [c for r in records for c in r.citations]
    assert cited and all(c.url.startswith("https://") and ".example." in c.url for c in cited)
    assert sum(r.usage is not None for r in records) > 0.8 * len(records)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [s for f in dataclasses.fields(value) for s in _strings(getattr(value, f.name))]
    if isinstance(value, tuple):
        return [s for item in value for s in _strings(item)]
    return []


def test_every_template_uses_known_slots_and_topics_are_plentiful() -> None:
    known = {name for name, _ in SLOT_POOLS} | {d[0] for d in DRAWN_SLOTS} | {"pod"}
    templates = _strings((TOPICS, GENERIC_FOLLOWUPS, GENERIC_STEERS, NOTES, PAGES))
    used = {field for t in templates for _, field, _, _ in string.Formatter().parse(t) if field}
    assert used and used <= known, used - known
    assert len({t.key for t in TOPICS}) >= 15
    assert all(len(t.prompts) >= 3 and len(t.answers) >= 4 for t in TOPICS)
    apps = {app for _, names in TENANT_APPS for app in names}
    assert all(any(app in t.apps for t in TOPICS) for app in apps)


def test_png_bar_chart_is_valid_and_refuses_bad_values() -> None:
    width, height, raw = _png_pixels(png_bar_chart([1, 5, 16]))
    assert (width, height) == (13, 17)
    assert raw[0] == 0 and b"\x2b\x6c\xb0" in raw
    with pytest.raises(ValueError, match="values"):
        png_bar_chart([])
    with pytest.raises(ValueError, match="values"):
        png_bar_chart([17])


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="users"):
        generate_records(users=0, turns=1, now=NOW)
    with pytest.raises(ValueError, match="turns"):
        generate_lines(turns=-1, now=NOW)
    with pytest.raises(ValueError, match="timezone-aware"):
        generate_records(turns=1, now=datetime(2026, 3, 1))
    with pytest.raises(ValueError, match="users"):
        write_demo(Settings(lake=Path("unused")), users=True)
    assert list(generate_records(turns=0, now=NOW)) == []


def test_now_defaults_to_the_current_minute() -> None:
    before = datetime.now(UTC)
    records = list(generate_records(users=2, turns=30, seed=1))
    assert all(r.ended_at <= before for r in records)
    assert max(r.ended_at for r in records) > before - timedelta(days=120)


def test_write_demo_builds_a_lake(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake")
    report = write_demo(settings, users=6, turns=250, seed=3, now=NOW, rows_hook=None)
    assert report.accepted == 250 and not report.quarantined
    assert report.files_stored == sum(
        len(r.hosted_files) for r in generate_records(users=6, turns=250, seed=3, now=NOW))
    assert LakeStore(settings.lake).read(Table.TURN_LOGS).num_rows == 250
    again = write_demo(settings, users=6, turns=250, seed=3, now=NOW)
    assert again.accepted == 0 and again.duplicates == 250


class _Clock(datetime):
    """The demo's clock, set by the test: its history ends at ``at``."""

    at = NOW

    @classmethod
    def now(cls, tz: Any = None) -> _Clock:
        return cls.at  # type: ignore[return-value]


def test_the_demo_again_into_its_lake_says_its_turns_are_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A second run (after an interrupted one, say) ends its history at a later minute: the
    # same demo turns with other times. It said "0 turns (0 already there)" and quarantined
    # every line as a conflict.
    monkeypatch.setattr("pipeline.demo.datetime", _Clock)
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    lake = tmp_path / "lake"
    args = ["demo", "--lake", str(lake), "--users", "3", "--turns", "40", "--no-embed",
            "--no-index"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "demo lake at" in first.output
    assert "40 turns written (0 already there)" in " ".join(first.output.split())
    monkeypatch.setattr(_Clock, "at", NOW + timedelta(minutes=7))
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    said = " ".join(again.output.split())
    assert ("0 turns written (40 already there, 40 of them from a demo written at another "
            "time)") in said, said
    store = LakeStore(lake)
    assert not store.exists(Table.QUARANTINE) or store.read(Table.QUARANTINE).num_rows == 0
    assert store.read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 40
