from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lake.errors import RecordError, RefError
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import Ingestor
from pipeline.recorder import Recorder, RecorderError

T0 = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)


def _record_turn(recorder: Recorder, turn: str = "t-1") -> str:
    with recorder.begin("acme", "support-desk", "react-agent", "u-ana", "c-42", turn,
                        title="Forecast", at=T0) as rec:
        rec.submit("the forecast is off by an hour", at=T0)
        rec.submit("use UTC please", "steer", at=T0 + timedelta(seconds=3))
        rec.context("page_opened", {"page": "forecast"}, at=T0)
        rec.attach("march.xlsx", "application/vnd.ms-excel", 2048, text="hours column")
        rec.step("run_python", "started", at=T0 + timedelta(seconds=5))
        rec.step("run_python", "completed", detail="ok", at=T0 + timedelta(seconds=9))
        rec.event("badge.cost", {"usd": 0.01}, at=T0 + timedelta(seconds=9))
        ref = rec.host_file("files/out/forecast.csv", b"month,hours\n3,12\n")
        rec.summarize("Goal: fix the timezone. Outcome: UTC.")
        rec.anchor("forecast.csv")
        rec.cite("tz docs", "https://example.com/tz")
        rec.usage(100, 50, cost_usd=0.01)
        rec.complete(f"Fixed; see {ref}.", at=T0 + timedelta(seconds=20))
    return ref


def test_spool_record_is_atomic_and_ingestable(settings: Settings, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    ref = _record_turn(Recorder(spool=spool))
    assert ref == "conv:fi:conv_c-42.turn_t-1.files/out/forecast.csv"
    files = sorted(spool.iterdir())
    assert [f.name for f in files] == ["acme.c-42.t-1.jsonl"]  # no temp files left behind
    record = json.loads(files[0].read_text())
    assert record["writer"] == "rich"
    assert [s["event_type"] for s in record["submissions"]] == ["prompt", "steer"]
    report = Ingestor(settings).ingest_paths([spool])
    assert report.accepted == 1
    turn = TurnMaterializer(LakeStore(settings.lake)).turn(
        Principal("acme", "u-ana"), "c-42", "t-1", as_of=T0 + timedelta(days=1))
    assert turn.files[0].ref == ref and turn.steps[1]["status"] == "completed"


def test_recording_twice_is_recorded_once(settings: Settings, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _record_turn(Recorder(spool=spool))
    _record_turn(Recorder(spool=spool))
    assert len(list(spool.iterdir())) == 1
    Ingestor(settings).ingest_paths([spool])
    again = Ingestor(settings).ingest_paths([spool])
    assert again.duplicates == 1
    assert LakeStore(settings.lake).read(Table.TURN_LOGS).num_rows == 1


def test_abandoned_turn_writes_nothing(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    recorder = Recorder(spool=spool)
    with pytest.raises(RuntimeError), recorder.begin("acme", "a", "g", "u", "c", "t") as rec:
        rec.submit("hello")
        raise RuntimeError("host crashed mid-turn")
    assert list(spool.iterdir()) == []


def test_direct_to_lake(hashing_settings: Settings) -> None:
    _record_turn(Recorder(settings=hashing_settings))
    assert LakeStore(hashing_settings.lake).read(Table.TURN_LOGS).num_rows == 1
    # indexed on the way: the turn is findable as soon as complete() returned
    (status,) = partition_statuses(LakeStore(hashing_settings.lake)).values()
    assert status.freshness == "fresh" and status.manifest is not None
    assert status.manifest.embedded_rows == status.manifest.row_count > 0


@pytest.mark.parametrize("path", ["files/../../etc/passwd", "/etc/passwd", "files/a/%2e%2e/b",
                                  "files/a\x00b"])
def test_host_file_refuses_traversal(tmp_path: Path, path: str) -> None:
    rec = Recorder(spool=tmp_path).begin("acme", "a", "g", "u", "c", "t")
    with pytest.raises(RefError):
        rec.host_file(path, b"x")


def test_host_file_size_limit_and_order_errors(tmp_path: Path) -> None:
    rec = Recorder(spool=tmp_path, max_file_bytes=4).begin("acme", "a", "g", "u", "c", "t")
    with pytest.raises(RecordError, match="over the 4-byte limit"):
        rec.host_file("files/big.bin", b"12345")
    with pytest.raises(RecorderError, match="at least one user submission"):
        rec.complete("answer")
    rec.submit("q")
    rec.complete("answer")
    with pytest.raises(RecorderError, match="already completed"):
        rec.submit("late")
    with pytest.raises(RefError):
        Recorder(spool=tmp_path).begin("acme", "a", "g", "u", "c", "bad id")
