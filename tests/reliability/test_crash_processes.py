"""Crash safety with real processes: the CLI is SIGKILLed at every write boundary
(``TURNLAKE_FAULT_AT``) and at seeded random moments, then re-run; after every kill the lake
must hold each accepted turn once, show no half-written turn, and keep its indexes consistent
with the tables or reported stale."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lake.deletion.audit import read_audit
from lake.deletion.runner import STEPS
from lake.index.manifest import read_current
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import PARALLEL_MIN_LINES
from pipeline.jobs import run_ingest
from tests.reliability.cli_runs import (
    KILLED,
    ROOT,
    clean,
    cli,
    cli_argv,
    cli_env,
    holds_writer_lock,
    kill_when,
)
from tests.reliability.lake_audit import (
    Audit,
    KillLog,
    audit_lake,
    key_of,
    pending_manifests,
    turn_record,
    write_records,
)

pytestmark = pytest.mark.slow

INGEST_POINTS = ["batch.after_manifest", "batch.after_bytes", "batch.after_content_rows",
                 "batch.after_events", "batch.after_files", "batch.after_turn_logs",
                 "batch.after_timelines", "index.after_partition"]
COMMIT_POINT = INGEST_POINTS.index("batch.after_turn_logs")  # the TurnLogs are the commit


def _ingest_file(i: int) -> list[dict[str, Any]]:
    """Turn batch ``i``: new turns in two months and a shared conversation, one rich."""
    base = 10 * i
    return [turn_record(base, conversation=f"c-{i}", rich=True),
            turn_record(base + 1, conversation=f"c-{i}", month=4),
            turn_record(base + 2, conversation="c-shared", user="u-ben")]


def test_ingest_killed_at_every_write_boundary(tmp_path: Path, kill_log: KillLog) -> None:
    lake = tmp_path / "lake"
    files: list[Path] = []
    wanted: set[tuple[str, str, str]] = set()
    for i, point in enumerate(INGEST_POINTS):
        records = _ingest_file(i)
        files.append(write_records(tmp_path / f"in-{i}.jsonl", records))
        wanted |= {key_of(r) for r in records}
        before = audit_lake(lake).keys if lake.exists() else set()
        # Each run re-reads every earlier file: it first recovers the previous crash, and
        # re-offers the turns that crash rolled back.
        killed = cli(lake, "ingest", *files, fault=point)
        assert killed.returncode == KILLED, (point, killed.stderr[-2000:])
        audit = clean(audit_lake(lake))
        assert audit.keys == (wanted if i >= COMMIT_POINT else before), point
    done = cli(lake, "ingest", *files)
    assert done.returncode == 0, done.stderr[-2000:]
    assert cli(lake, "index", "build").returncode == 0
    audit = clean(audit_lake(lake))
    assert (audit.keys, audit.pending, audit.not_fresh) == (wanted, [], [])
    assert max(audit.turns.values()) == 1
    kill_log.record("ingest (fault points)", len(INGEST_POINTS), len(INGEST_POINTS),
                    f"{len(wanted)} turns each present once, lake clean")


def test_ingest_killed_at_random_moments(tmp_path: Path, kill_log: KillLog) -> None:
    rng = random.Random(20261130)
    lake = tmp_path / "lake"
    files: list[Path] = []
    wanted: set[tuple[str, str, str]] = set()
    kills = tries = 3
    for i in range(tries):
        records = _ingest_file(i)
        files.append(write_records(tmp_path / f"in-{i}.jsonl", records))
        wanted |= {key_of(r) for r in records}
        before = audit_lake(lake).keys if lake.exists() else set()
        if not kill_when(lake, ("ingest", *files), holds_writer_lock(lake),
                         rng.uniform(0.0, 0.5)):
            kills -= 1
        audit = clean(audit_lake(lake))
        assert audit.keys in (before, wanted), "a batch is visible whole or not at all"
    assert cli(lake, "ingest", *files).returncode == 0
    assert cli(lake, "index", "build").returncode == 0
    audit = clean(audit_lake(lake))
    assert (audit.keys, audit.pending, audit.not_fresh) == (wanted, [], [])
    kill_log.record("ingest (random delays)", tries, kills, "no torn batch, lake clean")


def _seed(lake: Path, records: list[dict[str, Any]], *, index: bool) -> None:
    report = run_ingest(Settings(lake=lake, embedding_model="hashing-64"),
                        records=[json.dumps(r) for r in records], index=index)
    assert report.ingest.accepted == len(records)


def _index_builds(lake: Path) -> set[Path]:
    return {p for p in (lake / "indexes").glob("*/*/*") if p.is_dir()}


def test_index_build_killed_between_and_inside_partitions(tmp_path: Path,
                                                          kill_log: KillLog) -> None:
    lake = tmp_path / "lake"
    records = [turn_record(n, month=3 + n % 3, conversation=f"c-{n % 4}", rich=n % 2 == 0)
               for n in range(18)]
    _seed(lake, records, index=False)
    killed = cli(lake, "index", "build", fault="index.after_partition")
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    audit = clean(audit_lake(lake))
    assert len(audit.not_fresh) == 2, "one partition published, two reported missing"
    rng = random.Random(7)
    kills = 0
    for _ in range(3):
        seen = _index_builds(lake)

        def building(_pid: int, seen: set[Path] = seen) -> bool:
            return bool(_index_builds(lake) - seen)

        kills += kill_when(lake, ("index", "build", "--full"), building,
                           rng.uniform(0.0, 0.25))
        clean(audit_lake(lake))
    assert cli(lake, "index", "build", "--full").returncode == 0
    audit = clean(audit_lake(lake))
    assert audit.not_fresh == [] and audit.keys == {key_of(r) for r in records}
    kill_log.record("index build", 4, 1 + kills, "indexes fresh or reported, lake clean")


def _segment_count(lake: Path) -> int:
    current = read_current(lake, "acme", "2026-03")
    assert current is not None
    return len(current[1].live_segments)


def test_delta_segment_and_compaction_killed_leave_the_last_segments_live(
        tmp_path: Path, kill_log: KillLog) -> None:
    lake = tmp_path / "lake"
    # 50 rows: two one-turn appends (4 rows) stay under the 10 % compaction threshold
    first = [turn_record(n, conversation=f"c-{n % 3}") for n in range(25)]
    _seed(lake, first, index=True)
    wanted = {key_of(r) for r in first}
    kills = 0
    for i, point in enumerate(["index.after_delta_segment", "index.after_partition"]):
        more = [turn_record(100 + i, conversation="c-new")]
        _seed(lake, more, index=False)
        wanted |= {key_of(r) for r in more}
        before = _segment_count(lake)
        killed = cli(lake, "index", "build", fault=point)
        assert killed.returncode == KILLED, (point, killed.stderr[-2000:])
        kills += 1
        audit = clean(audit_lake(lake))  # stale and reported, or fresh with the new segment
        assert _segment_count(lake) in (before, before + 1)
        assert cli(lake, "index", "build").returncode == 0
        audit = clean(audit_lake(lake))
        assert (audit.keys, audit.not_fresh) == (wanted, [])
    assert _segment_count(lake) == 3, "two appends, two delta segments"
    for point in ("index.compaction_written", "index.after_compaction"):
        killed = cli(lake, "index", "compact", fault=point)
        assert killed.returncode == KILLED, (point, killed.stderr[-2000:])
        kills += 1
        audit = clean(audit_lake(lake))
        assert (audit.keys, audit.not_fresh) == (wanted, [])
    assert _segment_count(lake) == 1, "the kill after publishing left the compacted base"
    folders = [p for p in (lake / "indexes" / "acme" / "2026-03").iterdir() if p.is_dir()]
    assert len(folders) == 1, "the crashed compaction's leftovers were removed"
    done = cli(lake, "index", "compact")
    assert done.returncode == 0 and "0 compacted" in done.stdout
    kill_log.record("index delta segment / compaction", 4, kills,
                    "previous segments live, lake clean")


def _build_folders(lake: Path) -> set[str]:
    return {p.name for p in (lake / "indexes" / "acme" / "2026-03").iterdir() if p.is_dir()}


def _live_segments(lake: Path) -> set[str]:
    current = read_current(lake, "acme", "2026-03")
    assert current is not None
    return set(current[1].live_segments)


_LIVE_WRITER = """
import json, sys
from lake.settings import Settings
from pipeline.live import LiveWriter
writer = LiveWriter(Settings(lake=sys.argv[1], embedding_model="hashing-64"),
                    background_rebase=True)
for line in open(sys.argv[2]):
    writer.record([line])
assert writer.wait_rebases(120)
"""


def test_a_background_rebase_killed_leaves_the_last_segments_live(
        tmp_path: Path, kill_log: KillLog) -> None:
    lake = tmp_path / "lake"
    first = [turn_record(n, conversation=f"c-{n % 3}") for n in range(25)]
    _seed(lake, first, index=True)
    # One turn at a time from a live writer: past three (6 rows > 10 % of 50) its partition
    # is rebased in the background, and the process is killed as the new base goes live.
    more = [turn_record(200 + n, conversation="c-live") for n in range(12)]
    records = tmp_path / "more.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in more))
    before = _segment_count(lake)
    killed = subprocess.run([sys.executable, "-c", _LIVE_WRITER, str(lake), str(records)],
                            env=cli_env("index.rebase_visible"), cwd=ROOT,
                            capture_output=True, text=True, timeout=180)
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    audit = clean(audit_lake(lake))
    assert audit.keys >= {key_of(r) for r in first}
    assert _segment_count(lake) > before, "the deltas before the kill are live"
    left = _build_folders(lake) - _live_segments(lake)
    assert len(left) == 1 and not next(iter(left)).startswith("."), "the base, visible"
    # The next publication removes the base the kill left visible beside the live segments.
    _seed(lake, [turn_record(300, conversation="c-after")], index=False)
    assert cli(lake, "index", "build").returncode == 0
    audit = clean(audit_lake(lake))
    assert audit.not_fresh == []
    assert _build_folders(lake) == _live_segments(lake)
    kill_log.record("background rebase of a live writer", 1, 1,
                    "previous segments live, lake clean")


def _retention_lake(lake: Path) -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """A lake with live turns and expired turns (TTL 1 day) of two users in two months."""
    live = [turn_record(n, user=("u-ana", "u-ben")[n % 2], conversation=f"c-{n % 3}-{n % 2}",
                        month=3 + n % 2, rich=n % 3 == 0) for n in range(8)]
    expired = [turn_record(n, user=("u-ana", "u-ben")[n % 2], conversation=f"c-{n % 3}-{n % 2}",
                           month=3 + n % 2, rich=n % 2 == 0, ttl_days=1)
               for n in range(8, 14)]
    _seed(lake, live + expired, index=True)
    return {key_of(r) for r in live}, {key_of(r) for r in expired}


def _chain(lake: Path, job: tuple[str, ...], points: list[str]) -> list[Audit]:
    """Kill ``job`` at each point in turn; each run first resumes the job the last left."""
    audits = []
    for point in points:
        killed = cli(lake, *job, fault=point)
        assert killed.returncode == KILLED, (point, killed.stderr[-2000:])
        assert pending_manifests(lake), point
        audits.append(clean(audit_lake(lake)))
    done = cli(lake, *job)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "finished interrupted job" in done.stderr
    return audits


def _one_audit_row_per_job(lake: Path) -> None:
    jobs = [entry.counts["job"] for entry in read_audit(LakeStore(lake))]
    assert len(jobs) == len(set(jobs)) == 2, jobs


def test_purge_killed_at_every_step(tmp_path: Path, kill_log: KillLog) -> None:
    lake = tmp_path / "lake"
    live, expired = _retention_lake(lake)
    points = ["purge.after_manifest", *(f"purge.after_{step}" for step in STEPS)]
    audits = _chain(lake, ("retention", "purge"), points)
    for audit in audits:
        assert live <= audit.keys, "a purge never touches live turns"
    audit = clean(audit_lake(lake))
    assert (audit.keys, audit.pending, audit.not_fresh) == (live, [], [])
    assert not [p for p in (lake / "objects").rglob("*.csv")
                if any(f"/{c}/{t}/" in str(p) for _, c, t in expired)]
    _one_audit_row_per_job(lake)
    kill_log.record("retention purge", len(points), len(points),
                    f"finished by re-run, {len(expired)} expired turns gone")


def test_erase_killed_at_every_step(tmp_path: Path, kill_log: KillLog) -> None:
    lake = tmp_path / "lake"
    live, expired = _retention_lake(lake)
    everything = live | expired  # expired turns stay stored until a purge
    erased = {k for k in everything if k[1] == "c-1-1"}
    # Purge and erase run the same DeletionRunner, whose every step the purge test kills;
    # here every other boundary, with the steps that change what readers see.
    points = ["erase.after_manifest", *(f"erase.after_{step}" for step in STEPS[::2])]
    audits = _chain(lake, ("erase", "--tenant", "acme", "--conversation", "c-1-1"), points)
    for audit in audits:
        assert everything - erased <= audit.keys, "an erase touches nothing but its target"
    audit = clean(audit_lake(lake))
    assert (audit.keys, audit.pending, audit.not_fresh) == (everything - erased, [], [])
    _one_audit_row_per_job(lake)
    kill_log.record("erase", len(points), len(points),
                    f"finished by re-run, {len(erased)} turns erased, no reader saw them "
                    "after their TurnLogs went")


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _grandchildren(pid: int) -> set[int]:
    """Processes whose parent is a child of ``pid``: ingest workers, forked by a fork server."""
    return {g for child in _children(pid) for g in _children(child)}


def _gone(pids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in pids if Path(f"/proc/{p}").exists()
                and "Z" not in (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1][:3])]:
            return True
        time.sleep(0.1)
    return False


@dataclass(frozen=True)
class WorkerKill:
    """What killing an ingest that runs worker processes left behind."""

    turns: int
    workers: set[int]
    workers_exited: bool
    visible_after_kill: int
    stored_after_rerun: list[tuple[str, str]]
    pending_after_rerun: list[str]
    problems_after_rerun: list[str]


@pytest.fixture(scope="module")
def worker_kill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerKill]:
    """Kill an ingest large enough to prepare its input in worker processes, then re-run."""
    root = tmp_path_factory.mktemp("workers")
    lake, n = root / "lake", PARALLEL_MIN_LINES + 100
    path = write_records(root / "big.jsonl",
                         [turn_record(i, conversation=f"c-{i % 40}", rich=i % 50 == 0)
                          for i in range(n)])
    proc = subprocess.Popen(cli_argv(lake, ("ingest", path, "--no-embed", "--no-index")),
                            env=cli_env(None), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while (len(_grandchildren(proc.pid)) < 2 and proc.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.05)
    # The workers, and the fork server and resource tracker, must all go with the ingest.
    workers = _grandchildren(proc.pid)
    helpers = _children(proc.pid)
    time.sleep(0.5)
    proc.kill()
    proc.wait(timeout=60)
    # a bound, not a timing: on a busy machine the orphans may take seconds to be reaped
    exited = _gone(workers | helpers, 60)
    for pid in workers | helpers:  # orphans of this test only, by pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    store = LakeStore(lake)
    visible = store.read(Table.TURN_LOGS, columns=["turn_id"]).num_rows if store.exists(
        Table.TURN_LOGS) else 0
    done = cli(lake, "ingest", path, "--no-embed", "--no-index")
    assert done.returncode == 0, done.stderr[-2000:]
    logs = store.read(Table.TURN_LOGS, columns=["conversation_id", "turn_id"])
    yield WorkerKill(n, workers, exited, visible,
                     list(zip(logs["conversation_id"].to_pylist(), logs["turn_id"].to_pylist(),
                              strict=True)), pending_manifests(lake),
                     audit_lake(lake).problems)


def test_ingest_killed_while_its_worker_processes_run(worker_kill: WorkerKill,
                                                      kill_log: KillLog) -> None:
    assert len(worker_kill.workers) >= 2, "the ingest started no worker processes"
    assert worker_kill.visible_after_kill in (0, worker_kill.turns), "one batch: all or none"
    stored = worker_kill.stored_after_rerun
    assert len(stored) == len(set(stored)) == worker_kill.turns
    assert worker_kill.pending_after_rerun == []
    # Every turn whole, every packed file readable, no pack of the killed run left behind.
    assert worker_kill.problems_after_rerun == []
    kill_log.record("ingest (worker processes)", 1, 1,
                    f"{worker_kill.turns} turns each present once after re-run")


def test_worker_processes_exit_with_a_killed_ingest(worker_kill: WorkerKill) -> None:
    assert worker_kill.workers and worker_kill.workers_exited
