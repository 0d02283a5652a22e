"""Purge, erase and retention apply on real lakes: nothing erased or expired stays readable or
on disk, other data is untouched, crashes are finished by the next run, dry runs write nothing.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from lake.deletion.audit import read_audit
from lake.deletion.runner import STEPS
from lake.deletion.target import ErasureTarget
from lake.embedding.hashing import HashingEmbedder
from lake.errors import QueryError, RefExpired, RefNotFound
from lake.faults import Faults
from lake.index.status import partition_statuses
from lake.search.access import Principal, Scope
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.search.request import GENERATORS, SearchRequest
from lake.search.service import SearchService
from lake.settings import RetentionRule, Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.commands.retention import erasure_target
from pipeline.jobs import run_ingest
from pipeline.retention import apply_policy, erase, purge
from tests.factories import make_record, write_jsonl

ERASED = "QZXERASEDMARKQZX"
EXPIRED = "QZXEXPIREDMARKQZX"
NOTE = "QZXNOTEMARKQZX"
NOW = datetime.now(UTC).replace(microsecond=0)
T0 = NOW - timedelta(days=3)
ANALYST = Principal("acme", analyst=True)
ANA = Principal("acme", "u-ana")
BEN = Principal("acme", "u-ben")
ERASED_REF = "conv:fi:conv_c-1.turn_t-0002.files/out.csv"
EXPIRED_REF = "conv:fi:conv_c-old.turn_t-0030.files/out.csv"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _turn(n: int, *, start: datetime | None = None, **kw: Any) -> dict[str, Any]:
    record: dict[str, Any] = make_record(n, at=start or T0 + timedelta(minutes=10 * n), **kw)
    return record


def _marked(n: int, marker: str, *, start: datetime | None = None, **kw: Any) -> dict[str, Any]:
    """A rich turn whose every text (and hosted file) carries ``marker``."""
    begin = start or T0 + timedelta(minutes=10 * n)
    at = (begin + timedelta(seconds=5)).isoformat()
    return _turn(
        n, start=begin, writer="rich", prompt=f"the {marker} workbook shows wrong hours",
        answer=f"fixed {marker} by converting to UTC", conversation_title=f"title {marker}",
        context_events=[{"kind": "page_opened", "at": at, "data": {"page": marker}}],
        attachments=[{"name": "m.txt", "mime": "text/plain", "size": 9,
                      "text": f"attachment {marker}"}],
        steps=[{"name": "run", "status": "completed", "at": at, "detail": f"step {marker}"}],
        hosted_files=[{"path": "files/out.csv", "mime": "text/csv",
                       "content_b64": _b64(f"col\n{marker}\n"), "description": f"f {marker}"}],
        summary=f"summary {marker}", anchors=[marker], notes=[f"note {marker}"],
        citations=[{"title": f"cite {marker}", "url": "https://example.com/x",
                    "snippet": marker}],
        events=[{"type": "badge.cost", "at": at, "data": {"label": marker}}],
        feedback={"rating": 1, "comment": f"thanks {marker}"}, **kw)


def _records() -> list[dict[str, Any] | str]:
    refused = json.dumps({**_turn(2, conversation="c-1"), "bogus": ERASED})
    broken = ('{"schema": "turnlake.turn.v1", "tenant": "acme", "user_id": "u-ana", '
              f'"conversation_id": "c-1", "turn_id": "t-0002", "notes": ["{ERASED}')
    ben_refused = json.dumps({**_turn(22, user="u-ben", conversation="c-ben"), "bogus": 1})
    return [
        _turn(0, conversation="c-1"),
        _turn(1, conversation="c-1", writer="rich", notes=[f"note {NOTE}"],
              summary="kept summary of turn one"),
        _marked(2, ERASED, conversation="c-1"),
        _turn(3, conversation="c-1", conversation_title=None),
        _turn(10, conversation="c-2", prompt="the glacier dashboard is slow"),
        _turn(20, user="u-ben", conversation="c-ben", prompt="ben tundra deploy failed"),
        _turn(21, user="u-ben", conversation="c-ben", prompt="ben tundra rollback"),
        _marked(30, EXPIRED, conversation="c-old", ttl_days=1,
                start=NOW - timedelta(days=10)),
        refused, broken, ben_refused,
    ]


@pytest.fixture(scope="module")
def base_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    settings = _settings(root / "lake")
    run_ingest(settings, [write_jsonl(root / "in.jsonl", _records())])
    return root / "lake"


def _settings(lake: Path) -> Settings:
    # Notes live one day: turn one's note has expired while its turn has not.
    return Settings(lake=lake, embedding_model="hashing-64",
                    retention=(RetentionRule("acme", ttl_days=1, role="note"),))


@pytest.fixture
def settings(base_lake: Path, tmp_path: Path) -> Settings:
    shutil.copytree(base_lake, tmp_path / "lake")
    return _settings(tmp_path / "lake")


# -- proof helpers ------------------------------------------------------------------------

def traces(root: Path, marker: str) -> list[str]:
    """Files under ``root`` holding ``marker``: in their raw bytes (either case), gunzipped, or
    among the decoded values of a parquet file (whatever its compression)."""
    needles = (marker.encode(), marker.lower().encode())
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        decoded = ""
        if path.suffix == ".parquet":
            decoded = json.dumps(pq.read_table(path).to_pylist(), default=str)
        if any(n in data for n in needles) or marker in decoded:
            found.append(str(path.relative_to(root)))
    return found


def _search(settings: Settings, query: str, generator: str,
            principal: Principal = ANALYST) -> list[tuple[str, str, str]]:
    service = SearchService(LakeStore(settings.lake), embedder=HashingEmbedder(64))
    scope: Scope = "tenant" if principal.analyst else "user"
    result = service.search(SearchRequest(
        query, principal, scope=scope, k=50, max_per_conversation=0,
        roles=("user", "assistant", "summary", "anchor", "note", "attachment"),
        enabled={g: g == generator for g in GENERATORS}))
    return [(h.conversation_id, h.turn_id, h.text + json.dumps(h.snippets)) for h in result.hits]


def _turns(settings: Settings) -> dict[str, int]:
    logs = LakeStore(settings.lake).read(Table.TURN_LOGS, columns=["user_id"])
    users = logs.column("user_id").to_pylist()
    return {u: users.count(u) for u in sorted(set(users))}


def _assert_turn_gone(settings: Settings, cid: str, tid: str, marker: str, ref: str) -> None:
    store = LakeStore(settings.lake)
    for generator in GENERATORS:
        hits = _search(settings, f"the {marker} workbook shows wrong hours", generator)
        assert all((c, t) != (cid, tid) and marker not in text for c, t, text in hits)
    catalog = TurnCatalog(store)
    assert tid not in [t.turn_id for t in catalog.turns(ANALYST, cid)]
    assert all(t.turn_id != tid for t in catalog.between(ANALYST, NOW - timedelta(days=30),
                                                          NOW + timedelta(days=1)))
    with pytest.raises(QueryError):  # gone (an end user is refused alike: gone or not theirs)
        TurnMaterializer(store).turn(ANALYST, cid, tid)
    with pytest.raises(RefNotFound):
        TurnMaterializer(store).resolve(ANA, ref)


# -- erase ------------------------------------------------------------------------------

def test_erased_turn_leaves_no_trace_and_nothing_else_changes(settings: Settings) -> None:
    found = traces(settings.lake, ERASED)
    for area in ("tables/turn_logs/", "tables/content_rows/", "tables/events/", "tables/files/",
                 "tables/timelines/", "tables/quarantine/", "indexes/", "objects/"):
        assert any(f.startswith(area) for f in found), f"scan would miss {area}: {found}"
    for generator in GENERATORS:  # every generator finds the turn before
        hits = _search(settings, f"the {ERASED} workbook shows wrong hours", generator)
        assert ("c-1", "t-0002") in [(c, t) for c, t, _ in hits], generator
    ben_before = {g: _search(settings, "ben tundra deploy", g, BEN) for g in GENERATORS}
    turns_before = _turns(settings)

    report = erase(settings, ErasureTarget("acme", conversation_id="c-1", turn_id="t-0002"),
                   actor="dpo", settle=None)

    assert report.outcome is not None
    assert report.plan.counts["turn_logs"] == 1 and report.plan.counts["quarantine"] == 2
    assert traces(settings.lake, ERASED) == []
    _assert_turn_gone(settings, "c-1", "t-0002", ERASED, ERASED_REF)
    assert _turns(settings) == {**turns_before, "u-ana": turns_before["u-ana"] - 1}
    assert {g: _search(settings, "ben tundra deploy", g, BEN) for g in GENERATORS} == ben_before
    catalog = TurnCatalog(LakeStore(settings.lake))
    assert [(t.turn_id, t.ordinal) for t in catalog.turns(ANA, "c-1")] == [
        ("t-0000", 1), ("t-0001", 2), ("t-0003", 3)]
    listed = {c.conversation_id: c for c in catalog.conversations(ANALYST)}
    assert listed["c-1"].turn_count == 3 and listed["c-1"].title == "Forecast workbook"
    [audit] = read_audit(LakeStore(settings.lake))
    assert (audit.action, audit.actor, audit.tenant, audit.target) == (
        "erase", "dpo", "acme", "turn c-1/t-0002")
    assert audit.counts["content_rows"] == report.plan.counts["content_rows"] > 0
    assert not list((settings.lake / "_retention").glob("*.json"))
    statuses = partition_statuses(LakeStore(settings.lake)).values()
    assert {s.freshness for s in statuses} == {"fresh"}  # no search warns of a stale index


def _vector_files(root: Path, vectors: np.ndarray) -> list[str]:
    """Files under ``root`` holding a row within 1e-3 cosine of one of ``vectors`` (unit rows):
    a Parquet file's embedding column or an index's file of rows (float16 or float32)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rows: list[np.ndarray] = []
        if path.suffix == ".parquet" and "embedding" in pq.read_schema(path).names:
            column = pq.read_table(path, columns=["embedding"]).column("embedding")
            rows = [np.asarray(v, np.float32) for v in column.to_pylist() if v]
        elif path.name == "vectors.npy":
            rows = list(np.load(path).astype(np.float32))
        if rows:
            matrix = np.stack(rows)
            matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
            if float((matrix @ vectors.T).max()) > 1 - 1e-3:
                found.append(str(path.relative_to(root)))
    return found


def test_erased_turn_vectors_are_in_no_file(settings: Settings) -> None:
    # the vectors are kept twice (Delta column, index rows at float16): erasure takes both
    store = LakeStore(settings.lake)
    rows = store.read(Table.CONTENT_ROWS).to_pylist()
    erased = np.stack([np.asarray(r["embedding"], np.float32) for r in rows
                       if (r["conversation_id"], r["turn_id"]) == ("c-1", "t-0002")
                       and r["embedding"]])
    erased /= np.linalg.norm(erased, axis=1, keepdims=True)
    before = _vector_files(settings.lake, erased)
    assert any(f.startswith("tables/content_rows/") for f in before), before
    assert any(f.startswith("indexes/") and f.endswith("vectors.npy") for f in before), before

    erase(settings, ErasureTarget("acme", conversation_id="c-1", turn_id="t-0002"),
          actor="dpo", settle=None)

    assert _vector_files(settings.lake, erased) == []


def test_erase_user_removes_all_of_theirs_and_only_theirs(settings: Settings) -> None:
    quarantined = LakeStore(settings.lake).read(Table.QUARANTINE).num_rows
    ben = _search(settings, "ben tundra deploy", "lexical", BEN)
    erase(settings, ErasureTarget("acme", user_id="u-ana"), actor="dpo", settle=None)
    store = LakeStore(settings.lake)
    assert _turns(settings) == {"u-ben": 2}
    for table in (Table.CONTENT_ROWS, Table.EVENTS, Table.FILES, Table.TIMELINES):
        assert set(store.read(table, columns=["user_id"]).column("user_id").to_pylist()) <= {
            "u-ben"}
    assert [p for p in (settings.lake / "objects").rglob("*")] == []
    assert store.read(Table.QUARANTINE).num_rows == quarantined - 2
    for marker in (ERASED, EXPIRED, NOTE, "glacier"):
        assert traces(settings.lake, marker) == [], marker
    assert _search(settings, "ben tundra deploy", "lexical", BEN) == ben
    assert [c.conversation_id for c in TurnCatalog(store).conversations(ANALYST)] == ["c-ben"]


def test_erase_conversation_and_clear_input_errors(settings: Settings, tmp_path: Path) -> None:
    report = erase(settings, ErasureTarget("acme", conversation_id="c-1"), actor="dpo",
                   settle=None, dry_run=True)
    assert report.plan.counts["turn_logs"] == 4 and report.outcome is None
    erase(settings, ErasureTarget("acme", conversation_id="c-1"), actor="dpo", settle=None)
    assert _turns(settings) == {"u-ana": 2, "u-ben": 2}
    assert not (settings.lake / "objects" / "acme" / "c-1").exists()
    # A partition left without rows loses its index instead of keeping the erased rows.
    run_ingest(settings, [write_jsonl(tmp_path / "globex.jsonl", [
        _turn(50, tenant="globex", conversation="c-g", prompt="globex only")])])
    assert (settings.lake / "indexes" / "globex").exists()
    erase(settings, ErasureTarget("globex", conversation_id="c-g"), actor="dpo", settle=None)
    assert list((settings.lake / "indexes" / "globex").rglob("*")) == []
    assert "globex" not in {p[0] for p in partition_statuses(LakeStore(settings.lake))}
    # The CLI's words for its options (pipeline/commands/retention.py)
    with pytest.raises(QueryError, match="exactly one of --user U, --conversation C or "
                                         r"--turn C/T \(got --user, --turn\)"):
        erasure_target("acme", user="u-ana", turn="c-1/t-0001")
    with pytest.raises(QueryError, match="--turn must be CONVERSATION/TURN"):
        erasure_target("acme", turn="t-0001")
    with pytest.raises(QueryError, match=r"\(got none\)"):
        erasure_target("acme")
    assert erasure_target("acme", turn="c-1/t-0001") == ErasureTarget(
        "acme", conversation_id="c-1", turn_id="t-0001")


# -- purge ------------------------------------------------------------------------------

def test_expired_data_is_invisible_then_purged_without_trace(settings: Settings) -> None:
    store = LakeStore(settings.lake)
    materializer = TurnMaterializer(store)
    # Expired, not yet purged: on disk, yet no read path returns it.
    assert traces(settings.lake, EXPIRED) and traces(settings.lake, NOTE)
    for generator in GENERATORS:
        for c, _t, text in _search(settings, f"the {EXPIRED} workbook shows wrong hours",
                                  generator):
            assert c != "c-old" and EXPIRED not in text and NOTE not in text
        assert all(NOTE not in text for *_, text in _search(settings, f"note {NOTE}",
                                                            generator))
    assert TurnCatalog(store).turns(ANALYST, "c-old") == []
    assert "c-old" not in [c.conversation_id for c in TurnCatalog(store).conversations(ANA)]
    with pytest.raises(QueryError):
        materializer.turn(ANALYST, "c-old", "t-0030")
    with pytest.raises(RefExpired):
        materializer.resolve(ANA, EXPIRED_REF)
    assert materializer.turn(ANA, "c-1", "t-0001").notes == []  # the note role expired
    turns_before = _turns(settings)

    report = purge(settings, actor="cron")

    assert report.plan.counts["turn_logs"] == 1
    assert report.plan.counts["payloads_redacted"] >= 1
    for marker in (EXPIRED, NOTE):
        assert traces(settings.lake, marker) == [], marker
    _assert_turn_gone(settings, "c-old", "t-0030", EXPIRED, EXPIRED_REF)
    assert _turns(settings) == {**turns_before, "u-ana": turns_before["u-ana"] - 1}
    kept = materializer.turn(ANA, "c-1", "t-0001")
    assert kept.summary == "kept summary of turn one" and kept.notes == []
    assert traces(settings.lake, ERASED)  # not expired: untouched
    again = purge(settings, actor="cron")  # re-running finds nothing more
    assert not any(again.plan.counts.values())
    assert [a.action for a in read_audit(store)] == ["purge", "purge"]


# -- crash safety and dry runs -----------------------------------------------------------

class Crash(Exception):
    pass


def test_crash_at_every_step_is_finished_by_the_next_run(settings: Settings) -> None:
    target = ErasureTarget("acme", conversation_id="c-1", turn_id="t-0002")
    points = ["erase.after_manifest", *(f"erase.after_{s}" for s in STEPS)]
    for point in points:
        def crash(at: str, point: str = point) -> None:
            if at == point:
                raise Crash(at)

        # Each run first resumes the interrupted job, so every step is crashed in turn.
        with pytest.raises(Crash):
            erase(settings, target, actor="dpo", settle=None, faults=Faults(crash))
        store = LakeStore(settings.lake)  # the lake stays readable
        assert [t.turn_id for t in TurnCatalog(store).turns(BEN, "c-ben")] == [
            "t-0020", "t-0021"]
        assert _search(settings, "ben tundra deploy", "lexical", BEN)
    report = erase(settings, target, actor="dpo", settle=None)
    assert len(report.resumed) == 1
    assert traces(settings.lake, ERASED) == []
    _assert_turn_gone(settings, "c-1", "t-0002", ERASED, ERASED_REF)
    jobs = [a.counts["job"] for a in read_audit(LakeStore(settings.lake))]
    assert jobs.count(report.resumed[0].plan.job_id) == 1 and len(jobs) == 2


def test_killed_purge_process_is_finished_by_rerun(settings: Settings) -> None:
    env = {**os.environ, "TURNLAKE_FAULT_AT": "purge.after_content_rows",
           "TURNLAKE_EMBEDDING_MODEL": "hashing-64"}
    cmd = [sys.executable, "-m", "pipeline.cli", "retention", "purge", "--lake",
           str(settings.lake)]
    killed = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr.decode()
    assert list((settings.lake / "_retention").glob("*.json"))
    del env["TURNLAKE_FAULT_AT"]
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=120, text=True)
    assert done.returncode == 0, done.stderr
    assert "finished interrupted job" in done.stderr
    assert traces(settings.lake, EXPIRED) == []


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def test_dry_runs_change_nothing(settings: Settings) -> None:
    before = _snapshot(settings.lake)
    planned = purge(settings, dry_run=True).plan
    assert planned.counts["turn_logs"] == 1 and planned.turn_dirs == [("acme", "c-old",
                                                                        "t-0030")]
    assert erase(settings, ErasureTarget("acme", user_id="u-ben"), actor="x", settle=None,
                 dry_run=True).plan.counts["turn_logs"] == 2
    assert apply_policy(settings.with_(default_ttl_days=1), dry_run=True).changed
    assert _snapshot(settings.lake) == before


# -- retention apply -----------------------------------------------------------------------

def test_apply_recomputes_expiry_from_the_policy(settings: Settings, tmp_path: Path) -> None:
    run_ingest(settings, [write_jsonl(tmp_path / "more.jsonl", [
        _turn(40, conversation="c-keep", ttl_days=3000, prompt="kept by its own ttl")])])
    policy = settings.with_(retention=(RetentionRule("acme", ttl_days=2),
                                       RetentionRule("acme", ttl_days=400, role="summary")))
    report = apply_policy(policy)
    assert report.changed["turn_logs"] >= 7 and report.indexes_rebuilt >= 1
    store = LakeStore(settings.lake)
    logs = {r["turn_id"]: r for r in store.read(Table.TURN_LOGS).to_pylist()}
    for row in logs.values():
        days = 3000 if row["turn_id"] == "t-0040" else 1 if row["turn_id"] == "t-0030" else 2
        assert row["expires_at"] == row["ended_at"] + timedelta(days=days)
    summary = store.read(Table.CONTENT_ROWS, filter=(ds.field("role") == "summary")
                         & (ds.field("turn_id") == "t-0001")).to_pylist()[0]
    assert summary["expires_at"] == logs["t-0001"]["ended_at"] + timedelta(days=400)
    # Every turn but the self-ruled one has expired: no read path shows them any more.
    assert [t.turn_id for t in TurnCatalog(store).between(
        ANALYST, NOW - timedelta(days=30), NOW + timedelta(days=1))] == ["t-0040"]
    assert {c for c, *_ in _search(settings, "ben tundra deploy", "lexical")} <= {"c-keep"}
    assert apply_policy(policy).changed == {}  # idempotent
    assert purge(settings, actor="cron").plan.counts["turn_logs"] == 8
    assert _turns(settings) == {"u-ana": 1}


# -- the CLI -------------------------------------------------------------------------------

def test_cli_commands(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("USER", "ops")
    runner = CliRunner()
    lake = ["--lake", str(settings.lake)]
    dry = runner.invoke(app, ["retention", "purge", "--dry-run", *lake])
    assert dry.exit_code == 0, dry.output
    assert "would remove 1 turn_logs" in dry.output and "acme/c-old/t-0030" in dry.output
    dry = runner.invoke(app, ["erase", "--tenant", "acme", "--turn", "c-1/t-0002",
                              "--dry-run", *lake])
    assert dry.exit_code == 0 and "would remove 1 turn_logs" in dry.output
    done = runner.invoke(app, ["erase", "--tenant", "acme", "--turn", "c-1/t-0002", *lake])
    assert done.exit_code == 0, done.output
    assert "erase turn c-1/t-0002: removed 1 turn_logs" in done.output
    assert read_audit(LakeStore(settings.lake))[0].actor == "ops"
    bad = runner.invoke(app, ["erase", "--tenant", "acme", "--user", "u-ana", "--conversation",
                              "c-1", *lake])
    assert bad.exit_code == 2 and "exactly one" in bad.output
    bad = runner.invoke(app, ["retention", "apply", "--rule", "acme=soon", *lake])
    assert bad.exit_code == 2 and "TENANT[:APP[:ROLE]]=DAYS" in bad.output
    applied = runner.invoke(app, ["retention", "apply", "--dry-run", "--rule", "acme=2", *lake])
    assert applied.exit_code == 0 and "dry run: would change" in applied.output
    bad = runner.invoke(app, ["retention", "purge", "--as-of", "yesterday", *lake])
    assert bad.exit_code == 2 and "ISO 8601" in bad.output


def test_retention_apply_says_when_a_rule_names_a_tenant_without_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    runner = CliRunner()
    lake = ["--lake", str(tmp_path / "lake")]
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(0)])
    assert runner.invoke(app, ["ingest", str(path), "--no-index", *lake]).exit_code == 0
    dry = runner.invoke(app, ["retention", "apply", "--dry-run", "--rule", "nosuch=5",
                              "--rule", "acme=30", *lake])
    assert dry.exit_code == 0, dry.output
    said = " ".join(dry.output.split())
    assert ("note: the lake has no data of tenant nosuch: its rule would be saved and applies "
            "to data that arrives later") in said, said
    assert "tenant acme" not in said
    done = runner.invoke(app, ["retention", "apply", "--rule", "nosuch=5", *lake])
    assert done.exit_code == 0, done.output  # a policy may come before the tenant's data
    said = " ".join(done.output.split())
    assert "no data of tenant nosuch: its rule is saved" in said, said
    assert "saved the retention policy" in said
    known = runner.invoke(app, ["retention", "apply", "--dry-run", "--rule", "acme=30", *lake])
    assert known.exit_code == 0 and "no data of tenant" not in known.output
