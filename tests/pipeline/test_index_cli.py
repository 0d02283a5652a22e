"""`turnlake index build / compact / status` with segments and a changed embedding model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lake.faults import Faults
from lake.locks import writer_lock
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.cli import app
from pipeline.index_build import recover_if_idle
from pipeline.ingest import Ingestor
from tests.factories import make_record, write_jsonl


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_LAKE", str(tmp_path / "lake"))
    return CliRunner()


def _status(runner: CliRunner) -> dict[str, object]:
    result = runner.invoke(app, ["index", "status", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert isinstance(row, dict)
    return row


def test_a_wrong_model_is_reported_and_a_later_build_with_the_right_one_rebuilds(
        runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [make_record(i) for i in range(3)])
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-32")  # not the rows' model
    wrong = runner.invoke(app, ["index", "build", "--full", "--tenant", "acme",
                                "--month", "2026-03"])
    assert wrong.exit_code == 0, wrong.output
    assert "6 rows carry vectors of another model" in wrong.output
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    row = _status(runner)
    assert row["freshness"] == "stale" and row["embedded_rows"] == 0
    again = runner.invoke(app, ["index", "build"])
    assert "1 built, 0 already fresh" in again.output, again.output
    row = _status(runner)
    assert row["freshness"] == "fresh" and row["embedded_rows"] == 6


def test_index_compact_merges_delta_segments(runner: CliRunner, tmp_path: Path) -> None:
    base = write_jsonl(tmp_path / "a.jsonl", [make_record(i, conversation=f"c-{i}")
                                              for i in range(40)])
    assert runner.invoke(app, ["ingest", str(base)]).exit_code == 0
    more = write_jsonl(tmp_path / "b.jsonl", [make_record(99, conversation="c-99")])
    assert runner.invoke(app, ["ingest", str(more)]).exit_code == 0
    assert _status(runner)["segments"] == 2
    done = runner.invoke(app, ["index", "compact", "--tenant", "acme"])
    assert done.exit_code == 0, done.output
    assert "1 compacted" in done.output
    row = _status(runner)
    assert (row["segments"], row["freshness"], row["rows"]) == (1, "fresh", 82)


@pytest.mark.parametrize("command", ["build", "compact"])
def test_a_month_not_written_as_yyyy_mm_is_a_usage_error(runner: CliRunner,
                                                          command: str) -> None:
    result = runner.invoke(app, ["index", command, "--month", "13-2026"])
    assert result.exit_code == 2
    assert "'13-2026' is not a month as YYYY-MM" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["build", "compact"])
def test_a_tenant_or_month_that_selects_no_partition_is_said(runner: CliRunner, tmp_path: Path,
                                                            command: str) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(0)])
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0
    result = runner.invoke(app, ["index", command, "--tenant", "acme", "--month", "2025-01"])
    assert result.exit_code == 0
    assert "no partition of tenant acme month 2025-01 matched in this lake" in result.output
    matched = runner.invoke(app, ["index", command, "--tenant", "acme", "--month", "2026-03"])
    assert matched.exit_code == 0 and "matched in this lake" not in matched.output


def test_each_build_says_where_its_time_went(runner: CliRunner, tmp_path: Path) -> None:
    base = write_jsonl(tmp_path / "a.jsonl", [make_record(i, conversation=f"c-{i}")
                                              for i in range(40)])  # one more stays a delta
    assert runner.invoke(app, ["ingest", str(base), "--no-index"]).exit_code == 0
    built = runner.invoke(app, ["index", "build"])
    assert built.exit_code == 0, built.output
    said = " ".join(built.output.split())  # the console wraps long lines
    assert re.search(r"\(read [\d.]+s, rows [\d.]+s, semantic [\d.]+s, lexical [\d.]+s, "
                     r"trigram [\d.]+s\)", said), said
    more = write_jsonl(tmp_path / "b.jsonl", [make_record(99, conversation="c-99")])
    assert runner.invoke(app, ["ingest", str(more), "--no-index"]).exit_code == 0
    appended = runner.invoke(app, ["index", "build"])
    assert "delta segment acme/2026-03" in appended.output, appended.output
    assert "(read " in appended.output and "trigram " in appended.output


@pytest.mark.parametrize("columns", ["80", "60"])
def test_index_status_table_never_cuts_a_partition_name(
        runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        columns: str) -> None:
    # piped output (as under CliRunner) or a narrow terminal: the name still reads whole
    monkeypatch.setenv("COLUMNS", columns)
    records = [make_record(0, tenant="globex-industries"), make_record(1, tenant="acme")]
    path = write_jsonl(tmp_path / "a.jsonl", records)
    assert runner.invoke(app, ["ingest", str(path), "--no-index"]).exit_code == 0
    built = runner.invoke(app, ["index", "build", "--tenant", "acme"])
    assert built.exit_code == 0, built.output
    result = runner.invoke(app, ["index", "status"])
    assert result.exit_code == 0, result.output
    # each row's first cell holds the whole name on one line
    assert re.search(r"^│ acme/2026-03 +│", result.output, re.M), result.output
    assert re.search(r"^│ globex-industries/2026-03 +│", result.output, re.M), result.output


def test_index_compact_of_a_partition_without_index_says_how_to_build_it(
        runner: CliRunner, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(0)])
    assert runner.invoke(app, ["ingest", str(path)]).exit_code == 0
    current = tmp_path / "lake" / "indexes" / "acme" / "2026-03" / "current.json"
    current.write_text('{"build_id": "nope"}')  # unreadable: status says missing
    assert _status(runner)["freshness"] == "missing"
    result = runner.invoke(app, ["index", "compact", "--tenant", "acme"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "matched in this lake" not in said, said
    assert ("acme/2026-03 has no index to compact (missing or unreadable); build it with "
            "`turnlake index build --tenant acme --month 2026-03`") in said, said
    assert "0 compacted" in said


class _Crash(Exception):
    pass


def test_index_build_recovers_the_batch_a_crashed_ingest_left(runner: CliRunner,
                                                              tmp_path: Path) -> None:
    base = write_jsonl(tmp_path / "a.jsonl", [make_record(i, conversation=f"c-{i}")
                                              for i in range(40)])
    assert runner.invoke(app, ["ingest", str(base)]).exit_code == 0
    more = write_jsonl(tmp_path / "b.jsonl", [make_record(99, conversation="c-99")])

    def crash(at: str) -> None:
        if at == "batch.after_content_rows":  # its rows are in, its TurnLogs never came
            raise _Crash(at)

    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    with pytest.raises(_Crash):
        Ingestor(settings, faults=Faults(crash)).ingest_paths([more])
    assert _status(runner)["freshness"] == "stale"
    store = LakeStore(settings.lake)
    with writer_lock(store.root, job="a live writer"):  # a batch in flight is not touched
        assert recover_if_idle(store) is None
    built = runner.invoke(app, ["index", "build"])
    assert built.exit_code == 0, built.output
    assert "rolled back 1 batch(es) a crashed writer left" in " ".join(built.output.split())
    assert _status(runner)["freshness"] == "fresh"


def test_a_rerun_backfill_indexes_vectors_an_earlier_run_committed(runner: CliRunner,
                                                                   tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(i, conversation=f"c-{i}")
                                              for i in range(5)])
    assert runner.invoke(app, ["ingest", str(path), "--no-embed"]).exit_code == 0
    # the vectors committed, the index step never ran (as when killed between the two)
    first = runner.invoke(app, ["embed", "--backfill", "--no-index"])
    assert first.exit_code == 0, first.output
    assert _status(runner)["freshness"] == "stale"
    again = runner.invoke(app, ["embed", "--backfill"])
    assert again.exit_code == 0 and "embedded 0 rows" in again.output, again.output
    row = _status(runner)
    assert row["freshness"] == "fresh" and row["embedded_rows"] == 10
