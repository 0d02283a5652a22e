"""``turnlake maintain`` on real lakes fed by many small commits: fewer files, the same data,
fresh indexes, no erased byte brought back, a dry run that writes nothing, the writer lock
waited for and reported, and a run interrupted at any step finished by the next one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from lake.deletion.target import ErasureTarget
from lake.embedding.hashing import HashingEmbedder
from lake.errors import ConcurrentWriteError, IndexUnavailable, RefError
from lake.faults import Faults
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.search.request import GENERATORS, SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.jobs import run_ingest
from pipeline.maintain import maintain
from pipeline.retention import erase
from tests.factories import make_record, write_jsonl
from tests.pipeline.test_retention_jobs import _marked, traces
from tests.s3_server import bucket_objects, new_bucket, s3_config, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture, imported for pytest

MARK = "QZXMAINTAINMARKQZX"
ANALYST = Principal("acme", analyst=True)
POINTS = ("maintain.after_partition", "maintain.after_compact", "maintain.after_indexes",
          "maintain.after_vacuum")


class Killed(Exception):
    """Stands for a kill -9 at a fault point, in process."""


def _settings(lake: Path | str, **kw: Any) -> Settings:
    return Settings(lake=lake, embedding_model="hashing-64", **kw)


@pytest.fixture(scope="module")
def base_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight small ingests (one commit per table each) into two tenants and two months; one
    turn, in its own conversation, carries MARK in every text and file."""
    root = tmp_path_factory.mktemp("maintain")
    settings = _settings(root / "lake")
    for i in range(8):
        records: list[dict[str, Any] | str] = [
            make_record(2 * i, conversation=f"c-{i % 3}", prompt=f"glacier question {i}"),
            make_record(2 * i + 1, tenant="beta", user="u-bo", conversation="c-b",
                        prompt=f"tundra question {i}"),
            make_record(50 + i, conversation="c-apr", prompt=f"april glacier {i}",
                        at=datetime(2026, 4, 1 + i, 9, tzinfo=UTC))]
        if i == 3:
            records.append(_marked(90, MARK, conversation="c-mark"))
        run_ingest(settings, [write_jsonl(root / f"in-{i}.jsonl", records)])
    return root / "lake"


@pytest.fixture
def settings(base_lake: Path, tmp_path: Path) -> Settings:
    shutil.copytree(base_lake, tmp_path / "lake")
    return _settings(tmp_path / "lake")


def _contents(store: LakeStore) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows, in a stable order."""
    out = {}
    for table in Table:
        rows = store.read(table).to_pylist() if store.exists(table) else []
        out[table.value] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return out


def _files_per_partition(store: LakeStore) -> dict[tuple[Table, tuple[str, ...]], int]:
    return {(table, part): stats.files for table in Table if store.exists(table)
            for part, stats in store.file_stats(table).items()}


def _on_disk(lake: Path) -> dict[str, int]:
    return {str(p.relative_to(lake)): p.stat().st_mtime_ns for p in sorted(lake.rglob("*"))
            if p.is_file() and "_locks" not in p.parts}


# Searches are evaluated at one fixed time: with the clock's, the recency lift moved between
# the search before a maintenance run and the one after it, and on a busy machine a score
# rounded to six places could change in its last one (0.017437 against 0.017436).
SEARCHED_AT = datetime(2026, 5, 1, tzinfo=UTC)


def _search(settings: Settings, query: str) -> dict[str, list[tuple[str, str, float]]]:
    service = SearchService(LakeStore(settings.lake), embedder=HashingEmbedder(64))
    out = {}
    for generator in (*GENERATORS, "fused"):
        result = service.search(SearchRequest(
            query, ANALYST, scope="tenant", k=20, max_per_conversation=0, as_of=SEARCHED_AT,
            enabled={g: generator in (g, "fused") for g in GENERATORS},
            min_relevance=0.0))  # every candidate: maintenance must change none of them
        assert result.warnings == [], result.warnings
        out[generator] = [(h.conversation_id, h.turn_id, round(h.score, 6))
                          for h in result.hits]
    return out


def test_maintain_compacts_every_partition_and_changes_no_row(settings: Settings) -> None:
    store = LakeStore(settings.lake)
    before, files_before = _contents(store), _files_per_partition(store)
    hits_before = _search(settings, "glacier question")
    assert max(files_before.values()) >= 8, files_before

    report = maintain(settings, grace_s=0)

    files_after = _files_per_partition(store)
    assert set(files_after) == set(files_before)
    assert all(n == 1 for n in files_after.values()), files_after
    assert _contents(store) == before
    compacted = {(u.table, p.partition): p for u in report.tables for p in u.compacted}
    assert {k for k, n in files_before.items() if n > 1} == set(compacted)
    assert all(p.after is not None and p.after.files == 1 and p.after.rows == p.before.rows
               for p in compacted.values())
    for upkeep in report.tables:
        assert upkeep.files_after is not None
        assert upkeep.log_files_after is not None
        if upkeep.compacted:  # tables written once (events, files: one rich turn) stay so
            assert upkeep.files_after.files < upkeep.files_before.files
            assert upkeep.log_files_after < upkeep.log_files_before
    # Every data file left on disk is one the current version reads.
    for table in Table:
        if store.exists(table):
            on_disk = [p for p in store.path(table).rglob("*.parquet")
                       if "_delta_log" not in p.parts]
            assert len(on_disk) == sum(s.files for s in store.file_stats(table).values())
    # Compaction renamed every file; the indexes were rebuilt and serve the same hits.
    assert sorted(report.indexes) == ["acme/2026-03", "acme/2026-04", "beta/2026-03"]
    assert {s.freshness for s in partition_statuses(store).values()} == {"fresh"}
    assert _search(settings, "glacier question") == hits_before

    again = maintain(settings, grace_s=0)
    assert [u.compacted for u in again.tables] == [[] for _ in again.tables]
    assert again.indexes == [] and _contents(store) == before


def test_dry_run_prints_the_plan_and_changes_nothing(settings: Settings) -> None:
    store = LakeStore(settings.lake)
    disk = _on_disk(settings.lake)
    versions = {t: store.version(t) for t in Table}

    report = maintain(settings, dry_run=True)

    assert _on_disk(settings.lake) == disk
    assert {t: store.version(t) for t in Table} == versions
    assert report.dry_run and report.recovered is None
    planned = {(u.table, p.partition) for u in report.tables for p in u.compacted}
    assert (Table.CONTENT_ROWS, ("acme", "2026-03")) in planned
    assert all(p.after is None for u in report.tables for p in u.compacted)
    assert sorted(report.indexes) == ["acme/2026-03", "acme/2026-04", "beta/2026-03"]
    timelines = next(u for u in report.tables if u.table is Table.TIMELINES)
    assert timelines.vacuumable > 0  # timeline upserts left replaced files


def test_tenant_run_compacts_only_that_tenants_partitions(settings: Settings) -> None:
    store = LakeStore(settings.lake)
    before = _files_per_partition(store)
    report = maintain(settings, tenant="beta", grace_s=0)
    after = _files_per_partition(store)
    for (table, part), n in after.items():
        assert n == (1 if part[:1] == ("beta",) else before[(table, part)]), (table, part)
    assert report.indexes == ["beta/2026-03"]
    statuses = partition_statuses(store)
    assert statuses[("beta", "2026-03")].freshness == "fresh"
    assert statuses[("acme", "2026-03")].freshness == "fresh"  # untouched, so still fresh
    with pytest.raises(RefError, match="tenant"):
        maintain(settings, tenant="../x")


def test_no_erased_byte_survives_maintenance(settings: Settings) -> None:
    assert traces(settings.lake, MARK)
    target = ErasureTarget("acme", conversation_id="c-mark")

    def crash(point: str) -> None:
        if point == "erase.after_content_rows":
            raise Killed(point)

    with pytest.raises(Killed):  # the erase dies before its vacuum: old files still hold MARK
        erase(settings, target, actor="dpo", settle=None, faults=Faults(crash))
    assert traces(settings.lake, MARK)

    report = maintain(settings, grace_s=0)

    assert [done.plan.describe() for done in report.resumed] == ["conversation c-mark"]
    assert traces(settings.lake, MARK) == []
    assert maintain(settings, grace_s=0).resumed == []
    assert traces(settings.lake, MARK) == []
    hits = _search(settings, f"the {MARK} workbook shows wrong hours")
    assert all(c != "c-mark" for found in hits.values() for c, _, _ in found)


def test_replaced_files_outlive_the_last_commit_by_the_grace(settings: Settings) -> None:
    store = LakeStore(settings.lake)
    # A reader that listed the files before maintenance, and reads them while it waits.
    old = store.dataset(Table.CONTENT_ROWS)
    rows = old.to_table().num_rows
    read_during: list[int] = []
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        read_during.append(old.to_table().num_rows)

    report = maintain(settings, grace_s=600, sleep=sleep)

    assert read_during == [rows] and len(waits) == 1 and 0 < waits[0] <= 600
    assert report.waited_s == waits[0]
    assert store.read(Table.CONTENT_ROWS).num_rows == rows
    with pytest.raises(OSError):  # after the grace, the replaced files are gone
        old.to_table()
    assert maintain(settings, grace_s=0, sleep=sleep).waited_s == 0 and len(waits) == 1


@pytest.mark.parametrize("point", POINTS)
def test_a_run_interrupted_at_any_step_is_finished_by_the_next(settings: Settings,
                                                               point: str) -> None:
    store = LakeStore(settings.lake)
    before = _contents(store)
    hits_before = _search(settings, "glacier question")

    def crash(hit: str) -> None:
        if hit == point:
            raise Killed(hit)

    with pytest.raises(Killed):
        maintain(settings, grace_s=0, faults=Faults(crash))
    assert _contents(store) == before  # readable, and not a row changed
    statuses = partition_statuses(store)
    assert {s.freshness for s in statuses.values()} <= {"fresh", "stale"}

    maintain(settings, grace_s=0)

    assert _contents(store) == before
    assert all(n == 1 for n in _files_per_partition(store).values())
    assert {s.freshness for s in partition_statuses(store).values()} == {"fresh"}
    assert _search(settings, "glacier question") == hits_before
    for table in Table:
        if store.exists(table):
            assert store.vacuumable(table) == []


_HOLDER = """
import sys, time
from pathlib import Path
from lake.locks import writer_lock
lake, release = sys.argv[1], Path(sys.argv[2])
with writer_lock(lake, job="turnlake ingest"):
    print("holding", flush=True)
    for _ in range(600):  # bounded: at most a minute
        if release.exists():
            break
        time.sleep(0.1)
"""


def _hold_writer_lock(lake: Path, release: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lake), str(release)],
                            stdout=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(Path(__file__).parents[2])})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def test_waits_for_another_writer_and_says_who(settings: Settings, tmp_path: Path) -> None:
    release = tmp_path / "release"
    holder = _hold_writer_lock(settings.lake, release)
    told: list[str] = []

    def waiting(who: str) -> None:
        told.append(who)
        release.touch()  # the other writer finishes while maintenance waits

    try:
        report = maintain(settings, grace_s=0, on_wait=waiting)
    finally:
        release.touch()
        holder.wait(timeout=60)
    assert told == [f"turnlake ingest (pid {holder.pid})"]
    assert all(n == 1 for n in _files_per_partition(LakeStore(settings.lake)).values())
    assert report.indexes


def test_gives_up_after_the_lock_timeout_naming_the_holder(settings: Settings,
                                                           tmp_path: Path) -> None:
    release = tmp_path / "release"
    holder = _hold_writer_lock(settings.lake, release)
    disk = _on_disk(settings.lake)
    try:
        with pytest.raises(ConcurrentWriteError, match=f"turnlake ingest .pid {holder.pid}"):
            maintain(settings.with_(lock_timeout_s=0.3), grace_s=0)
    finally:
        release.touch()
        holder.wait(timeout=60)
    assert _on_disk(settings.lake) == disk


def test_cli_dry_run_then_run_then_waiting(settings: Settings, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    runner = CliRunner()
    lake = ["--lake", str(settings.lake)]
    dry = runner.invoke(app, ["maintain", "--dry-run", *lake])
    assert dry.exit_code == 0, dry.output
    assert "content_rows" in dry.output and "would compact" in dry.output
    assert "would rebuild 3 partition index(es)" in dry.output
    assert "dry run: nothing was changed" in dry.output
    release = tmp_path / "release"
    holder = _hold_writer_lock(settings.lake, release)
    threading.Timer(1.0, release.touch).start()
    try:
        done = runner.invoke(app, ["maintain", "--grace", "0", *lake])
    finally:
        release.touch()
        holder.wait(timeout=60)
    assert done.exit_code == 0, done.output
    assert f"waiting for the writer lock held by turnlake ingest (pid {holder.pid})" \
        in done.output
    assert "data files" in done.output and "rebuilt 3 partition index(es)" in done.output
    bad = runner.invoke(app, ["maintain", "--tenant", "a/b", *lake])
    assert bad.exit_code == 2 and "tenant" in bad.output
    missing = runner.invoke(app, ["maintain", "--lake", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "no lake at" in missing.output  # a mistyped --lake
    (tmp_path / "nothing").mkdir()
    empty = runner.invoke(app, ["maintain", "--lake", str(tmp_path / "nothing")])
    assert empty.exit_code == 0 and "no tables yet" in empty.output


def test_erase_and_maintain_share_one_vacuum(settings: Settings) -> None:
    """An erase then a maintenance: the tables' folders hold only live files afterwards."""
    erase(settings, ErasureTarget("acme", conversation_id="c-mark"), actor="dpo", settle=None)
    maintain(settings, grace_s=0)
    store = LakeStore(settings.lake)
    assert traces(settings.lake, MARK) == []
    marked = store.read(Table.CONTENT_ROWS, filter=ds.field("conversation_id") == "c-mark")
    assert marked.num_rows == 0


def test_an_s3_lake_is_maintained_like_a_local_one(s3_endpoint: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_CACHE", str(tmp_path / "cache"))
    bucket = new_bucket(s3_endpoint)
    settings = _settings(f"s3://{bucket}/lake", s3=s3_config(s3_endpoint))
    for i in range(4):
        run_ingest(settings, [write_jsonl(tmp_path / f"in-{i}.jsonl", [
            make_record(i, conversation="c-1", prompt=f"glacier question {i}")])])
    store = LakeStore(settings.lake)
    before = _contents(store)
    assert _files_per_partition(store)[(Table.CONTENT_ROWS, ("acme", "2026-03"))] == 4

    report = maintain(settings, grace_s=0)

    assert _contents(store) == before
    assert all(n == 1 for n in _files_per_partition(store).values())
    assert report.indexes == ["acme/2026-03"]
    assert {s.freshness for s in partition_statuses(store).values()} == {"fresh"}
    data_files = [k for k in bucket_objects(s3_endpoint, bucket)
                  if k.startswith("lake/tables/content_rows/tenant=")]
    assert len(data_files) == 1, data_files
    assert _search(settings, "glacier question")["lexical"]


def test_searches_and_replays_during_maintenance_never_fail(settings: Settings) -> None:
    """A reader thread searches and replays its top hit in a loop while maintenance compacts,
    re-indexes and vacuums; the grace is stood in for by waiting until the reader finished
    the reads it had in flight."""
    store = LakeStore(settings.lake)
    service = SearchService(store, embedder=HashingEmbedder(64))
    request = SearchRequest("glacier question", ANALYST, scope="tenant", k=10,
                            max_per_conversation=0)
    expected = [(h.conversation_id, h.turn_id) for h in service.search(request).hits]
    done, errors, seen = threading.Event(), [], []
    rounds = [0]

    def read() -> None:
        while not done.is_set() and rounds[0] < 2000:  # bounded
            try:
                hits = service.search(request).hits
                seen.append([(h.conversation_id, h.turn_id) for h in hits])
                TurnMaterializer(store).turn(ANALYST, hits[0].conversation_id,
                                             hits[0].turn_id)
            except IndexUnavailable:
                pass  # a search racing the build that replaces its index: documented, retry
            except Exception as exc:  # any other failure of a reader is the finding
                errors.append(repr(exc))
            rounds[0] += 1

    def grace(_seconds: float) -> None:
        target = rounds[0] + 2  # the read in flight, and one more after it
        for _ in range(6000):  # bounded: at most ten minutes
            if rounds[0] >= target or done.is_set():
                return
            done.wait(0.1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        maintain(settings, grace_s=600, sleep=grace)
        target = rounds[0] + 2
        for _ in range(6000):
            if rounds[0] >= target:
                break
            done.wait(0.1)
    finally:
        done.set()
        reader.join(timeout=600)
    assert errors == []
    assert seen and all(found == expected for found in seen)
    assert all(n == 1 for n in _files_per_partition(store).values())


def test_maintain_where_another_model_is_configured_keeps_each_partitions_vectors(
        settings: Settings) -> None:
    # maintenance from cron without TURNLAKE_EMBEDDING_MODEL: the default model is configured
    store = LakeStore(settings.lake)
    maintain(settings, grace_s=0)  # one segment per partition, built with hashing-64
    before = {p: (s.manifest.requested_model, s.manifest.embedded_rows)
              for p, s in partition_statuses(store).items() if s.manifest is not None}
    assert all(model == "hashing-64" and rows > 0 for model, rows in before.values())
    elsewhere = Settings(lake=settings.lake, embedding_model="hashing-32")
    planned = maintain(elsewhere, dry_run=True)
    done = maintain(elsewhere, grace_s=0)
    assert done.indexes == planned.indexes == []  # nothing to rebuild, as the dry run said
    after = {p: (s.manifest.requested_model, s.manifest.embedded_rows)
             for p, s in partition_statuses(store).items() if s.manifest is not None}
    assert after == before
    assert _search(settings, "glacier question")["semantic"]


def test_a_dry_run_counts_the_files_its_compaction_would_leave_to_vacuum(
        settings: Settings) -> None:
    planned = {u.table: u for u in maintain(settings, dry_run=True).tables}
    done = {u.table: u for u in maintain(settings, grace_s=0).tables}
    content = Table.CONTENT_ROWS
    assert done[content].vacuumable > planned[content].vacuumable  # compaction's old files
    for table, upkeep in done.items():
        assert upkeep.vacuumable <= planned[table].to_vacuum, table


def test_cli_says_when_the_tenant_has_no_partition(settings: Settings) -> None:
    runner = CliRunner()
    lake = ["--lake", str(settings.lake)]
    for dry in (["--dry-run"], []):
        nosuch = runner.invoke(app, ["maintain", "--tenant", "nosuch", *dry, *lake])
        assert nosuch.exit_code == 0, nosuch.output
        said = " ".join(nosuch.output.split())
        assert "note: no partition of tenant nosuch in this lake" in said, said
    known = runner.invoke(app, ["maintain", "--tenant", "beta", "--dry-run", *lake])
    assert "no partition of tenant" not in known.output
    assert "vacuum up to" in " ".join(known.output.split())


def test_maintain_commits_what_a_stopped_server_left_in_its_spool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.service.spool import Spool, SpooledGroup

    lake = tmp_path / "lake"
    settings = _settings(lake)
    # What the server committed and indexed before it was killed.
    run_ingest(settings, [write_jsonl(tmp_path / "before.jsonl", [make_record(9)])])
    spool = Spool.create(lake)
    spool.append(SpooledGroup(1, "<api g1>", [json.dumps(make_record(i)) for i in range(3)]))
    spool.append(SpooledGroup(2, "<api g2>", [json.dumps(make_record(3))]))
    spool._lock.close()  # the server was killed: its lock went, its files stayed
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    runner = CliRunner()
    dry = runner.invoke(app, ["maintain", "--dry-run", "--lake", str(lake)])
    assert dry.exit_code == 0, dry.output
    assert "would commit 2 acknowledged group(s)" in dry.output
    assert LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 1
    report = maintain(settings, grace_s=0)
    assert report.spooled == 2
    assert LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 5
    assert not spool.path.exists()
    assert all(s.freshness == "fresh" for s in partition_statuses(LakeStore(lake)).values())
