"""``turnlake maintain`` fills the completion status of turn_logs rows written before the
column existed, from each row's stored payload: once, with the indexes fresh afterwards, and a
dry run that only counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from typer.testing import CliRunner

from lake.index.status import partition_statuses
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import TURN_LOGS, Table
from pipeline.cli import app
from pipeline.completion_backfill import status_of, unrecorded
from pipeline.jobs import run_ingest
from pipeline.maintain import maintain
from tests.factories import make_record, write_jsonl

OLD = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
NEW = datetime(2026, 4, 10, 9, 0, tzinfo=UTC)


def _statuses(store: LakeStore) -> dict[str, str | None]:
    rows = store.read(Table.TURN_LOGS, columns=["turn_id", "completion_status"])
    return dict(zip(rows["turn_id"].to_pylist(), rows["completion_status"].to_pylist(),
                    strict=True))


def _forget_statuses(store: LakeStore, tenant: str, month: str) -> None:
    """Turn a partition's rows into rows written before completion_status existed."""
    rows = store.read_partition(Table.TURN_LOGS, tenant, month, columns=TURN_LOGS.names)
    column = rows.schema.get_field_index("completion_status")
    rows = rows.set_column(column, "completion_status", pa.nulls(rows.num_rows, pa.string()))
    store.replace_where(Table.TURN_LOGS, rows, f"tenant = '{tenant}' AND month = '{month}'")


def _lake(tmp_path: Path) -> tuple[Settings, LakeStore]:
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    records: list[dict[str, Any] | str] = [
        make_record(0, at=OLD),
        make_record(1, at=OLD + timedelta(minutes=5), completion={
            "text": "stopped half way", "at": (OLD + timedelta(minutes=6)).isoformat(),
            "status": "interrupted"}),
        make_record(2, at=OLD + timedelta(minutes=10), completion={
            "text": "the model call failed", "at": (OLD + timedelta(minutes=11)).isoformat(),
            "status": "failed"}),
        make_record(3, at=NEW, conversation="c-2"),
    ]
    run_ingest(settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(settings.lake)
    _forget_statuses(store, "acme", "2026-03")
    return settings, store


def test_status_of_reads_the_payloads_completion() -> None:
    assert status_of('{"completion": {"text": "x", "status": "failed"}}') == "failed"
    assert status_of('{"completion": {"text": "x"}}') == "completed"


def test_maintain_fills_old_rows_status_from_their_payload_once(tmp_path: Path) -> None:
    settings, store = _lake(tmp_path)
    assert _statuses(store) == {"t-0000": None, "t-0001": None, "t-0002": None,
                                "t-0003": "completed"}
    assert unrecorded(store) == {("acme", "2026-03"): 3}

    planned = maintain(settings, dry_run=True, grace_s=0)
    assert planned.statuses_filled == 3
    assert "acme/2026-03" in planned.indexes  # its index goes stale once rewritten
    assert _statuses(store)["t-0000"] is None  # a dry run writes nothing

    seen: list[tuple[str, int, int]] = []
    report = maintain(settings, grace_s=0, on_status=lambda *a: seen.append(a))
    assert report.statuses_filled == 3
    assert seen == [("turn_logs acme/2026-03", 1, 1)]
    assert _statuses(store) == {"t-0000": "completed", "t-0001": "interrupted",
                                "t-0002": "failed", "t-0003": "completed"}
    # Every other column of the rewritten rows is as it was.
    assert store.read(Table.TURN_LOGS).num_rows == 4
    assert {s.freshness for s in partition_statuses(store).values()} == {"fresh"}

    again = maintain(settings, grace_s=0)
    assert again.statuses_filled == 0 and unrecorded(store) == {}


def test_the_cli_says_how_many_statuses_it_filled(tmp_path: Path) -> None:
    settings, _ = _lake(tmp_path)
    result = CliRunner().invoke(app, ["maintain", "--lake", str(settings.lake), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would fill the completion status of 3 turn(s)" in result.output
    result = CliRunner().invoke(app, ["maintain", "--lake", str(settings.lake), "--grace",
                                      "0"])
    assert result.exit_code == 0, result.output
    assert "filled the completion status of 3 turn(s)" in result.output
