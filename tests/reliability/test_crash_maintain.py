"""Crash safety of ``turnlake maintain`` with real processes: SIGKILLed after a partition's
compaction, after all of them, after the index refresh, after a table's vacuum, and at seeded
random moments; after every kill the lake passes the audit, and the next run finishes the job.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.jobs import run_ingest
from tests.reliability.cli_runs import KILLED, clean, cli, holds_writer_lock, kill_when
from tests.reliability.lake_audit import KillLog, audit_lake, key_of, turn_record

pytestmark = pytest.mark.slow

MAINTAIN_POINTS = ["maintain.after_partition", "maintain.after_compact",
                   "maintain.after_indexes", "maintain.after_vacuum"]


def _small_commits(lake: Path, batches: int) -> set[tuple[str, str, str]]:
    """``batches`` ingests of two turns each, in two months: many small files per partition."""
    settings = Settings(lake=lake, embedding_model="hashing-64")
    keys = set()
    for i in range(batches):
        records = [turn_record(2 * i, conversation=f"c-{i % 3}", rich=i % 3 == 0),
                   turn_record(2 * i + 1, conversation="c-apr", month=4)]
        report = run_ingest(settings, records=[json.dumps(r) for r in records], index=True)
        assert report.ingest.accepted == len(records)
        keys |= {key_of(r) for r in records}
    return keys


def _most_files(lake: Path) -> int:
    store = LakeStore(lake)
    return max(s.files for t in Table if store.exists(t) for s in store.file_stats(t).values())


def test_maintain_killed_at_every_step(tmp_path: Path, kill_log: KillLog) -> None:
    lake = tmp_path / "lake"
    wanted = _small_commits(lake, 6)
    assert _most_files(lake) >= 6
    for point in MAINTAIN_POINTS:
        killed = cli(lake, "maintain", "--grace", "0", fault=point)
        assert killed.returncode == KILLED, (point, killed.stderr[-2000:])
        audit = clean(audit_lake(lake))
        assert audit.keys == wanted, point
    done = cli(lake, "maintain", "--grace", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    audit = clean(audit_lake(lake))
    assert (audit.keys, audit.pending, audit.not_fresh) == (wanted, [], [])
    assert _most_files(lake) == 1
    kill_log.record("maintain (fault points)", len(MAINTAIN_POINTS), len(MAINTAIN_POINTS),
                    "tables readable after each kill, finished by the re-run")


def test_maintain_killed_at_random_moments(tmp_path: Path, kill_log: KillLog) -> None:
    rng = random.Random(20261201)
    lake = tmp_path / "lake"
    wanted = _small_commits(lake, 5)
    tries, kills = 3, 0
    for i in range(tries):
        # More small commits each time, so that every run has work to be killed in.
        late = turn_record(100 + i, conversation="c-late")
        run_ingest(Settings(lake=lake, embedding_model="hashing-64"),
                   records=[json.dumps(late)])
        wanted.add(key_of(late))
        kills += kill_when(lake, ("maintain", "--grace", "0"), holds_writer_lock(lake),
                           rng.uniform(0.0, 1.0))
        assert clean(audit_lake(lake)).keys == wanted
    assert cli(lake, "maintain", "--grace", "0").returncode == 0
    audit = clean(audit_lake(lake))
    assert (audit.keys, audit.pending, audit.not_fresh) == (wanted, [], [])
    assert _most_files(lake) == 1
    kill_log.record("maintain (random delays)", tries, kills, "lake clean, finished by re-run")
