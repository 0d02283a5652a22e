"""``ingest --ray``: turns written here, rows embedded on Ray workers, indexes built there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from lake.index.status import partition_statuses
from lake.store import LakeStore
from lake.tables import Table
from pipeline import ray_ingest
from pipeline.cli import app
from tests.factories import make_record, write_jsonl

pytest.importorskip("ray")
# One local Ray at a time on the machine: with test_ray_jobs in one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("ray")


def test_ingest_on_ray_embeds_every_row_and_builds_fresh_indexes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = tmp_path / "lake"
    records = [make_record(i, tenant=("acme", "globex")[i % 2], prompt="continue" if i % 3
                           else f"question {i} about the rollout") for i in range(12)]
    source = write_jsonl(tmp_path / "turns.jsonl", records)
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    submitted: list[list[tuple[str, str]]] = []

    class Recording(ray_ingest.EmbedOnRay):
        def __call__(self, store: Any, version: int, partitions: Any, **kw: Any) -> Any:
            submitted.append(sorted(partitions))
            return super().__call__(store, version, partitions, **kw)

    monkeypatch.setattr(ray_ingest, "EmbedOnRay", Recording)
    result = CliRunner().invoke(app, ["ingest", str(source), "--lake", str(lake), "--ray",
                                      "--ray-cpus", "1", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "accepted 12" in result.stdout
    assert [{t for t, _ in parts} for parts in submitted] == [{"acme", "globex"}]
    assert "reusing a vector" in " ".join(result.stdout.split())
    rows = LakeStore(lake).read(Table.CONTENT_ROWS, columns=["embedding_status",
                                                             "embedding_model"])
    assert set(rows.column("embedding_status").to_pylist()) == {"done"}
    assert set(rows.column("embedding_model").to_pylist()) == {"hashing-64"}
    statuses = partition_statuses(LakeStore(lake))
    assert {s.freshness for s in statuses.values()} == {"fresh"}
    assert {t for t, _ in statuses} == {"acme", "globex"}
    pending = LakeStore(lake).read(Table.CONTENT_ROWS,
                                   filter=ds.field("embedding_status") != "done")
    assert pending.num_rows == 0


def test_ray_cpus_without_ray_is_a_clear_error(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "turns.jsonl", [make_record(0)])
    result = CliRunner().invoke(app, ["ingest", str(source), "--lake", str(tmp_path / "l"),
                                      "--ray-cpus", "1"])
    assert result.exit_code == 2
    assert "--ray-cpus needs --ray" in result.output
