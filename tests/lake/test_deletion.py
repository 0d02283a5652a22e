"""lake/deletion/: erasure targets, expiry under the policy, redaction, quarantine rules, the
audit, deletion plans and their runner, and the store operations purges rely on."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from lake.deletion.audit import AuditEntry, read_audit, write_audit
from lake.deletion.plan import DeletionPlan, plan_erase, plan_purge
from lake.deletion.policy import (
    policy_expiry,
    quarantine_expiry,
    quarantine_matches,
    redact_payload,
)
from lake.deletion.runner import DeletionRunner
from lake.deletion.target import ErasureTarget
from lake.errors import QueryError, RefError
from lake.filestore import FileStore
from lake.settings import RetentionRule, Settings
from lake.store import CHECKPOINT_INTERVAL, LakeStore, Partition
from lake.tables import Table
from pipeline.ingest import PARALLEL_MIN_LINES, Ingestor
from tests.factories import make_record, rich_record, write_jsonl

NOW = datetime.now(UTC).replace(microsecond=0)


# -- erasure targets --------------------------------------------------------------------------

def test_targets_describe_and_select() -> None:
    turn = ErasureTarget("acme", conversation_id="c-1", turn_id="t-0002")
    assert (turn.kind, turn.describe()) == ("turn", "turn c-1/t-0002")
    assert turn.sql() == "tenant = 'acme' AND conversation_id = 'c-1' AND turn_id = 't-0002'"
    assert turn.matches("acme", "anyone", "c-1", "t-0002")
    assert not turn.matches("acme", "anyone", "c-1", "t-0003")
    user = ErasureTarget("acme", user_id="u-ana")
    assert (user.kind, user.describe()) == ("user", "user u-ana")
    assert user.matches("acme", "u-ana", "c-9", "t-1") and not user.matches("other", "u-ana",
                                                                             "c-9", "t-1")
    conv = ErasureTarget("acme", conversation_id="c-1")
    assert ErasureTarget.from_json(conv.to_json()) == conv
    with pytest.raises(QueryError, match="exactly one user, conversation or turn"):
        ErasureTarget("acme")
    with pytest.raises(QueryError, match="exactly one user, conversation or turn"):
        ErasureTarget("acme", user_id="u-ana", conversation_id="c-1")
    with pytest.raises(QueryError, match="needs its conversation"):
        ErasureTarget("acme", user_id="u-ana", turn_id="t-1")
    with pytest.raises(RefError, match="user_id"):
        ErasureTarget("acme", user_id="u' OR 1=1 --")


# -- quarantined lines -----------------------------------------------------------------------

def test_quarantine_lines_match_by_json_or_by_id_pairs() -> None:
    target = ErasureTarget("acme", conversation_id="c-1", turn_id="t-0002")
    line = {"tenant": "acme", "user_id": "u-ana", "conversation_id": "c-1",
            "turn_id": "t-0002", "bogus": "x"}
    assert quarantine_matches(json.dumps(line), target)
    assert not quarantine_matches(json.dumps({**line, "turn_id": "t-0003"}), target)
    assert not quarantine_matches(json.dumps({**line, "tenant": "globex"}), target)
    broken = '{"tenant": "acme", "conversation_id": "c-1", "turn_id": "t-0002", "text": "unterm'
    assert quarantine_matches(broken, target)
    assert quarantine_matches(broken, ErasureTarget("acme", conversation_id="c-1"))
    assert not quarantine_matches(broken, ErasureTarget("acme", user_id="u-ana"))
    for raw in ("", None, "[1, 2]", '{"conversation_id": "c-1", "turn_id": "t-0002"}'):
        assert not quarantine_matches(raw, target)


def test_quarantine_expiry_follows_the_line_then_the_policy() -> None:
    settings = Settings(retention=(RetentionRule("acme", 30), RetentionRule("acme", 7,
                                                                             app="desk")))
    at = NOW
    assert quarantine_expiry('{"tenant": "acme", "ttl_days": 2}', at, settings) == at + timedelta(
        days=2)
    assert quarantine_expiry('{"tenant": "acme", "app": "desk"}', at, settings) == at + timedelta(
        days=7)
    assert quarantine_expiry('{"tenant": "acme", "app": "x', at, settings) == at + timedelta(
        days=30)
    assert quarantine_expiry("not json at all", at, settings) == at + timedelta(days=365)


# -- expiry and redaction ---------------------------------------------------------------------

def test_policy_expiry_prefers_the_record_ttl_then_the_most_specific_rule() -> None:
    settings = Settings(retention=(RetentionRule("acme", 30), RetentionRule("acme", 7, role="note"),
                                   RetentionRule("acme", 90, app="desk", role="note")))
    ended = datetime(2026, 1, 1, tzinfo=UTC)
    frame = pl.DataFrame({
        "tenant": ["acme", "acme", "acme", "acme", "globex"],
        "app": ["web", "web", "desk", "web", "web"],
        "role": ["user", "note", "note", "note", "user"],
        "ended_at": [ended] * 5,
        "record_ttl": [None, None, None, 3, None]}, schema_overrides={"record_ttl": pl.Int64})
    days = [(d - ended).days for d in policy_expiry(frame, settings, role_column="role")]
    assert days == [30, 7, 90, 3, 365]
    assert [(d - ended).days for d in policy_expiry(frame, settings)] == [30, 30, 30, 3, 365]


def test_redaction_removes_exactly_the_expired_roles() -> None:
    record = rich_record(0)
    payload = json.dumps(record)
    out = json.loads(redact_payload(payload, {"note", "attachment", "user"}))
    assert out["notes"] == [] and all("text" not in a for a in out["attachments"])
    assert [s["text"] for s in out["submissions"]] == ["", "", ""]
    assert out["summary"] == record["summary"] and out["anchors"] == record["anchors"]
    assert out["completion"]["text"] == record["completion"]["text"]
    out = json.loads(redact_payload(payload, {"assistant", "summary", "anchor"}))
    assert (out["completion"]["text"], out["summary"], out["anchors"]) == ("", None, [])
    assert redact_payload(redact_payload(payload, {"note"}), {"note"}) == redact_payload(
        payload, {"note"})


# -- audit --------------------------------------------------------------------------------

def test_audit_rows_are_written_once_per_job(tmp_path: Path) -> None:
    store = LakeStore(tmp_path / "lake")
    entry = AuditEntry(at=NOW, action="erase", actor="dpo", tenant="acme",
                       target="user u-ana", counts={"turn_logs": 3})
    assert write_audit(store, entry, job_id="j1")
    assert not write_audit(store, entry, job_id="j1")
    assert write_audit(store, AuditEntry(NOW + timedelta(seconds=1), "purge", "cron", None,
                                         "expired", {}), job_id="j2")
    rows = read_audit(store)
    assert [(r.action, r.counts.get("job")) for r in rows] == [("purge", "j2"), ("erase", "j1")]
    assert rows[1].counts["turn_logs"] == 3


# -- the store operations a purge relies on ---------------------------------------------------

def _ingest(settings: Settings, tmp_path: Path, records: list[dict[str, Any]]) -> LakeStore:
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", records)])
    return LakeStore(settings.lake)


def test_delete_counts_and_keeps_tables_filterable(settings: Settings, tmp_path: Path) -> None:
    store = _ingest(settings, tmp_path, [make_record(i, conversation=f"c-{i % 2}")
                                         for i in range(6)])
    assert store.delete(Table.TURN_LOGS, "turn_id = 't-0002'") == 1
    assert store.delete(Table.TURN_LOGS, "turn_id = 't-0002'") == 0
    # Rewritten files must still answer filtered scans (string columns stay plain strings).
    found = store.read(Table.TURN_LOGS, columns=["turn_id"],
                       filter=ds.field("conversation_id").isin(["c-0"]))
    assert sorted(found["turn_id"].to_pylist()) == ["t-0000", "t-0004"]
    stray = store.path(Table.TURN_LOGS) / "stray.parquet"
    stray.write_bytes(b"left by a crashed writer")
    store.vacuum(Table.TURN_LOGS, full=True)
    assert not stray.exists()
    assert store.truncate_log(Table.TURN_LOGS) > 0
    checkpoints, commits = _log_versions(store)
    # Nothing older than the checkpoint is left; after it, the cleanup's own two commits
    # (log retention lowered, then set back).
    assert commits == list(range(checkpoints[-1], checkpoints[-1] + 3))
    assert store.read(Table.TURN_LOGS).num_rows == 5
    store.append(Table.TURN_LOGS, store.read(Table.TURN_LOGS).slice(0, 1))
    assert store.read(Table.TURN_LOGS).num_rows == 6


def _log_versions(store: LakeStore) -> tuple[list[int], list[int]]:
    """The versions of the turn log table's checkpoints and of its commits in the log."""
    names = [p.name for p in (store.path(Table.TURN_LOGS) / "_delta_log").iterdir()]
    return (sorted(int(n.split(".")[0]) for n in names if n.endswith(".checkpoint.parquet")),
            sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[0].isdigit()))


def test_a_truncated_log_keeps_its_later_entries_through_automatic_checkpoints(
        settings: Settings, tmp_path: Path) -> None:
    """After a cleanup, the table's log retention is the standing one again: the automatic
    checkpoint every few commits must not drop the entries readers of the live lake are
    reading (with zero days left on the table, every one of them went at each checkpoint)."""
    store = _ingest(settings, tmp_path, [make_record(i) for i in range(3)])
    store.truncate_log(Table.TURN_LOGS)
    first = store.latest_version(Table.TURN_LOGS)
    assert first is not None
    row = store.read(Table.TURN_LOGS).slice(0, 1)
    for _ in range(2 * CHECKPOINT_INTERVAL + 1):
        store.append(Table.TURN_LOGS, row)
    checkpoints, commits = _log_versions(store)
    assert checkpoints[-1] > first  # automatic checkpoints were written meanwhile
    assert set(range(first, first + 2 * CHECKPOINT_INTERVAL + 2)) <= set(commits)
    assert store.open(Table.TURN_LOGS, version=first + 1) is not None


# -- plans and the runner -------------------------------------------------------------------

def test_plan_round_trips_and_builds_predicates() -> None:
    plan = DeletionPlan(job_id="purge-1", kind="purge", actor="cron", created_at=NOW.isoformat(),
                        as_of=NOW.isoformat(), tenant="acme",
                        extra_turns=[("acme", "c-1", "t-1")],
                        redactions=[("acme", "2026-03", "c-2", "t-2", ["note"])],
                        partitions=[("acme", "2026-03")], counts={"turn_logs": 1})
    again = DeletionPlan.from_json(plan.to_json())
    assert again == plan
    assert again.predicates(Table.TURN_LOGS) == [
        f"tenant = 'acme' AND expires_at <= '{NOW.isoformat()}'"]
    assert "turn_id IN ('t-1')" in again.predicates(Table.CONTENT_ROWS)[1]
    assert "all tenants" not in again.describe() and not again.is_empty
    again.extra_turns = [("acme", f"c-{i}", "t-1") for i in range(2500)]
    assert len(again.predicates(Table.CONTENT_ROWS)) == 4  # long id lists go in chunks
    erase = DeletionPlan(job_id="e", kind="erase", actor="dpo", created_at=NOW.isoformat(),
                         target=ErasureTarget("acme", user_id="u-ana"))
    assert DeletionPlan.from_json(erase.to_json()).predicates(Table.EVENTS) == [
        "tenant = 'acme' AND user_id = 'u-ana'"]


def test_rows_outliving_their_turn_are_purged_with_it(tmp_path: Path) -> None:
    # The turn lives a day, its summary 5000 days: purging the turn takes the summary too.
    settings = Settings(lake=tmp_path / "lake", retention=(
        RetentionRule("acme", 1), RetentionRule("acme", 5000, role="summary")))
    old = rich_record(0, conversation="c-old")
    shift = NOW - timedelta(days=10) - datetime.fromisoformat(old["started_at"])
    store = _ingest(settings, tmp_path, [_shifted(old, shift),
                                         make_record(1, conversation="c-new", at=NOW,
                                                     ttl_days=30)])
    plan = plan_purge(store, settings, as_of=NOW, actor="cron")
    assert plan.extra_turns == [("acme", "c-old", "t-0000")]
    assert plan.counts["content_rows"] == 9 and plan.counts["turn_logs"] == 1
    rebuilt: list[set[Partition]] = []
    outcome = DeletionRunner(store, settings, rebuild=rebuilt.append).run(plan)
    assert rebuilt == [set(plan.partitions)]
    assert outcome.deleted["content_rows"] == 9 and outcome.deleted["file_objects"] == 1
    left = store.read(Table.CONTENT_ROWS, columns=["conversation_id"])
    assert set(left["conversation_id"].to_pylist()) == {"c-new"}
    assert store.read(Table.TIMELINES, columns=["conversation_id"])[
        "conversation_id"].to_pylist() == ["c-new"]
    assert plan_erase(store, settings, ErasureTarget("acme", conversation_id="c-old"),
                      actor="dpo").is_empty


def test_purge_of_one_tenant_leaves_the_others(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake")
    old = NOW - timedelta(days=10)
    store = _ingest(settings, tmp_path, [
        make_record(0, at=old, ttl_days=1), make_record(1, tenant="globex", at=old, ttl_days=1)])
    quarantine = pa.Table.from_pylist([
        {"quarantined_at": old, "source_file": "x", "line": 1, "reason": "r",
         "raw": '{"tenant": "acme", "ttl_days": 1}', "batch_id": "q"},
        {"quarantined_at": old, "source_file": "x", "line": 2, "reason": "r",
         "raw": '{"tenant": "globex", "ttl_days": 1}', "batch_id": "q"}])
    store.append(Table.QUARANTINE, quarantine)
    plan = plan_purge(store, settings, as_of=NOW, actor="cron", tenant="acme")
    assert (plan.counts["turn_logs"], plan.counts["quarantine"]) == (1, 1)
    DeletionRunner(store, settings, rebuild=lambda parts: None).run(plan)
    assert store.read(Table.TURN_LOGS, columns=["tenant"])["tenant"].to_pylist() == ["globex"]
    assert store.read(Table.QUARANTINE)["line"].to_pylist() == [2]


def _shifted(record: dict[str, Any], delta: timedelta) -> dict[str, Any]:
    """The record with every timestamp moved by ``delta``."""
    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        if isinstance(value, str) and len(value) == 25 and value[10:11] == "T":
            return (datetime.fromisoformat(value) + delta).isoformat()
        return value
    return {k: move(v) for k, v in record.items()}


def test_erasing_packed_files_blanks_their_bytes_and_drops_emptied_packs(
        tmp_path: Path) -> None:
    # A large input is prepared by workers, which pack small hosted files: the two
    # conversations' files share one pack.
    settings = Settings(lake=tmp_path / "lake")

    def hosted(text: str) -> list[dict[str, str]]:
        return [{"path": "files/notes.md", "mime": "text/markdown",
                 "content_b64": base64.b64encode(text.encode()).decode()}]

    records = [make_record(i, conversation=f"c-{i % 2}",
                           hosted_files=hosted(f"marker-{i}") if i < 4 else [])
               for i in range(PARALLEL_MIN_LINES)]
    Ingestor(settings, workers=2).ingest_paths([write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(settings.lake)
    packs = settings.lake / "objects" / "@packs"
    [pack] = packs.iterdir()

    def erase(conversation: str) -> None:
        plan = plan_erase(store, settings, ErasureTarget("acme", conversation_id=conversation),
                          actor="dpo")
        DeletionRunner(store, settings, rebuild=lambda _: None).run(plan)

    erase("c-0")
    data = pack.read_bytes()
    assert b"marker-0" not in data and b"marker-2" not in data
    assert b"marker-1" in data and b"marker-3" in data
    files = FileStore(settings.lake)
    left = store.read(Table.FILES, columns=["turn_id", "storage_key"]).to_pylist()
    assert {r["turn_id"]: files.get(r["storage_key"]) for r in left} == {
        "t-0001": b"marker-1", "t-0003": b"marker-3"}
    erase("c-1")
    assert list(packs.iterdir()) == []
