"""Whole-lake consistency checks and record builders shared by the reliability tests.

``audit_lake`` reads a lake the way every public reader does (tables, catalog,
materializer, search) and lists every broken promise it finds: a duplicated turn, a TurnLog
without its rows, rows visible without their TurnLog, a fresh index that disagrees with its
tables, a stale index that search does not report.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from lake.embedding.hashing import HashingEmbedder
from lake.errors import TurnlakeError
from lake.filestore import FileStore, packs_of
from lake.index.manifest import read_current
from lake.index.partition import PartitionIndex
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.store import LakeStore
from lake.tables import Table

TurnKey = tuple[str, str, str]
LIVE_TTL_DAYS = 36_500  # records of the reliability tests stay live whatever today's date
COMMON_WORD = "forecast"
KillEntry = tuple[str, int, int, str]  # job, kill points tried, processes killed, result
KILL_PROPERTY = "kill points"  # the user_properties key a test's KillEntry travels under


def turn_record(n: int, *, tenant: str = "acme", user: str = "u-ana",
                conversation: str = "c-1", month: int = 3, rich: bool = False,
                ttl_days: int = LIVE_TTL_DAYS, marker: str | None = None) -> dict[str, Any]:
    """A valid record whose texts carry ``marker`` (default ``mk<n>``) and the common word.

    Rich records add a hosted file, an attachment, steps and a context event, so that every
    row table is written.
    """
    start = datetime(2026, month, 3, 9, 0, tzinfo=UTC) + timedelta(minutes=7 * n)
    word = marker or f"mk{n}"
    at = start.isoformat()
    record: dict[str, Any] = {
        "schema": "turnlake.turn.v1", "tenant": tenant, "app": "support-desk",
        "agent": "react-agent", "user_id": user, "conversation_id": conversation,
        "turn_id": f"t-{n:04d}", "writer": "rich" if rich else "minimal",
        "started_at": at, "ended_at": (start + timedelta(seconds=40)).isoformat(),
        "conversation_title": f"title {word}",
        "submissions": [{"text": f"{word} question about the {COMMON_WORD}",
                         "event_type": "prompt", "batch": 0, "arrived_at": at}],
        "completion": {"text": f"{word} answer: the {COMMON_WORD} uses UTC",
                       "at": (start + timedelta(seconds=30)).isoformat()},
        "ttl_days": ttl_days,
    }
    if rich:
        record.update(
            context_events=[{"kind": "page_opened", "at": at, "data": {"marker": word}}],
            attachments=[{"name": "sheet.xlsx", "mime": "application/vnd.ms-excel",
                          "size": 10, "text": f"{word} sheet"}],
            steps=[{"name": "run_python", "status": "completed", "at": at}],
            hosted_files=[{"path": f"files/{word}.csv", "mime": "text/csv",
                           "content_b64": base64.b64encode(file_bytes(word)).decode()}],
            summary=f"{word} summary", anchors=[word])
    return record


def file_bytes(marker: str) -> bytes:
    """The hosted file content of the turn with ``marker``."""
    return f"marker,{marker}\n".encode()


def write_records(path: Path, records: list[dict[str, Any]]) -> Path:
    """Write records as a .jsonl file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def key_of(record: dict[str, Any]) -> TurnKey:
    """The identity of a record's turn."""
    return (record["tenant"], record["conversation_id"], record["turn_id"])


@dataclass
class Audit:
    """What ``audit_lake`` found."""

    turns: Counter[TurnKey] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    not_fresh: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    @property
    def keys(self) -> set[TurnKey]:
        """Every turn that has a TurnLog."""
        return set(self.turns)


def pending_manifests(root: Path) -> list[str]:
    """Batch and retention manifests a crashed job left (the next writer finishes them)."""
    return sorted(str(p.relative_to(root)) for folder in ("_batches", "_retention")
                  for p in (root / folder).glob("*.json"))


def _frame(store: LakeStore, table: Table, columns: list[str]) -> pl.DataFrame:
    frame = pl.from_arrow(store.read(table, columns=columns))
    assert isinstance(frame, pl.DataFrame)
    return frame


def audit_lake(root: Path, *, query: str = COMMON_WORD) -> Audit:
    """Check every promise a reader relies on; see the module docstring."""
    store = LakeStore(root)
    audit = Audit(pending=pending_manifests(root))
    keys = ["tenant", "conversation_id", "turn_id"]
    logs = _frame(store, Table.TURN_LOGS, [*keys, "month", "batch_id", "expires_at", "payload"])
    audit.turns = Counter(tuple(r) for r in logs.select(keys).iter_rows())
    audit.problems += [f"turn {k} has {n} TurnLogs" for k, n in audit.turns.items() if n > 1]
    committed = logs.select([*keys, "batch_id"])
    content = _frame(store, Table.CONTENT_ROWS, [*keys, "month", "batch_id", "role", "row_id"])
    events = _frame(store, Table.EVENTS, [*keys, "batch_id"])
    files = _frame(store, Table.FILES, [*keys, "batch_id", "storage_key", "sha256"])
    for name, rows in (("content_rows", content), ("events", events), ("files", files)):
        orphans = rows.join(committed, on=[*keys, "batch_id"], how="anti")
        if orphans.height and not audit.pending:
            audit.problems.append(f"{orphans.height} {name} rows have no TurnLog and no "
                                  "crashed job is pending to remove them")
    live_rows = content.join(committed, on=[*keys, "batch_id"], how="semi")
    dup_rows = live_rows.group_by(["tenant", "row_id"]).len().filter(pl.col("len") > 1)
    audit.problems += [f"row {t}/{r} stored {n} times" for t, r, n in dup_rows.iter_rows()]
    _check_complete(store, logs, live_rows, events, files, audit)
    _check_objects(root, files, audit)
    now = datetime.now(UTC)
    live = logs.filter(pl.col("expires_at") > now)
    listed = _frame(store, Table.TIMELINES, ["tenant"])["tenant"].to_list()
    for tenant in sorted(set(logs["tenant"].to_list()) | set(listed)):
        _check_readers(store, tenant, live.filter(pl.col("tenant") == tenant), audit)
    _check_indexes(store, live_rows, query, audit)
    return audit


def _check_complete(store: LakeStore, logs: pl.DataFrame, rows: pl.DataFrame,
                    events: pl.DataFrame, files: pl.DataFrame, audit: Audit) -> None:
    """Each TurnLog has exactly the rows, events, file rows and bytes its payload names."""
    keys = ["tenant", "conversation_id", "turn_id", "batch_id"]
    roles = rows.group_by([*keys, "role"]).len()
    counts = {(*r[:-2], r[-2]): r[-1] for r in roles.iter_rows()}
    n_events = Counter(tuple(r) for r in events.select(keys).iter_rows())
    file_rows: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for *owner, skey, sha in files.select([*keys, "storage_key", "sha256"]).iter_rows():
        file_rows.setdefault(tuple(owner), []).append((skey, sha))
    store_files = FileStore(store.root)
    for t, c, tid, _month, batch, _exp, payload in logs.iter_rows():
        k = (t, c, tid, batch)
        record = json.loads(payload)
        want = {"user": len(record["submissions"]), "assistant": 1}
        got = {role: counts.get((*k, role), 0) for role in want}
        if got != want:
            audit.problems.append(f"turn {t}/{c}/{tid} has rows {got}, payload says {want}")
        n = sum(len(record.get(p, [])) for p in ("context_events", "steps", "events"))
        if n_events.get(k, 0) != n:
            audit.problems.append(f"turn {t}/{c}/{tid} has {n_events.get(k, 0)} events, "
                                  f"payload says {n}")
        stored = file_rows.get(k, [])
        if len(stored) != len(record.get("hosted_files", [])):
            audit.problems.append(f"turn {t}/{c}/{tid} has {len(stored)} file rows")
        for skey, sha in stored:
            try:
                if hashlib.sha256(store_files.get(skey)).hexdigest() != sha:
                    audit.problems.append(f"bytes of {skey} do not match their sha256")
            except TurnlakeError as exc:
                audit.problems.append(f"bytes of {skey} missing: {exc}")


def _check_objects(root: Path, files: pl.DataFrame, audit: Audit) -> None:
    """Every stored object, loose file or pack, is one the file catalog points at (unless a
    crashed job is still to be finished or rolled back)."""
    objects = root / "objects"
    if audit.pending or list((root / "_batches").glob("*.json")) or not objects.is_dir():
        return
    keys = files["storage_key"].to_list()
    packs = packs_of(keys)
    for path in sorted(p for p in objects.rglob("*") if p.is_file()):
        key = path.relative_to(objects).as_posix()
        if path.parent.name == "@packs" and path.name not in packs:
            audit.problems.append(f"pack {key} holds no file of the catalog")
        elif path.parent.name != "@packs" and key not in keys:
            audit.problems.append(f"object {key} is no file of the catalog")


def _check_readers(store: LakeStore, tenant: str, live: pl.DataFrame, audit: Audit) -> None:
    """Catalog and materializer show exactly the live TurnLogs, each whole."""
    stored = Counter(c for t, c, _ in audit.turns if t == tenant)
    analyst = Principal(tenant, analyst=True)
    catalog, materializer = TurnCatalog(store), TurnMaterializer(store)
    by_conv: dict[str, set[str]] = {}
    for _t, c, tid in live.select(["tenant", "conversation_id", "turn_id"]).iter_rows():
        by_conv.setdefault(c, set()).add(tid)
    listed = {e.conversation_id: e for e in catalog.conversations(analyst)}
    # Not even while a purge or erase is half done: the listing must not outlive the turns.
    audit.problems += [f"conversation {tenant}/{cid} is listed without live turns"
                       for cid in sorted(set(listed) - set(by_conv))]
    for cid, tids in sorted(by_conv.items()):
        shown = [t.turn_id for t in catalog.turns(analyst, cid)]
        if sorted(shown) != sorted(tids):
            audit.problems.append(f"catalog shows {sorted(shown)} for {tenant}/{cid}, "
                                  f"TurnLogs hold {sorted(tids)}")
        # Ingest counts every stored turn, retention jobs only the live ones.
        counted = listed[cid].turn_count if cid in listed else 0
        if not audit.pending and not len(tids) <= counted <= stored.get(cid, 0):
            audit.problems.append(f"timeline of {tenant}/{cid} counts {counted} turns, "
                                  f"{len(tids)} are live")
        for tid in sorted(tids)[:1] + sorted(tids)[-1:]:
            turn = materializer.turn(analyst, cid, tid)
            if not turn.submissions or "text" not in turn.completion:
                audit.problems.append(f"turn {tenant}/{cid}/{tid} materializes incomplete")


def _check_indexes(store: LakeStore, rows: pl.DataFrame, query: str, audit: Audit) -> None:
    """Fresh indexes hold exactly the committed rows; search reports every other state and
    never returns a turn twice or a turn without its TurnLog."""
    statuses = partition_statuses(store)
    service = SearchService(store, embedder=HashingEmbedder(64))
    for tenant in sorted({t for t, _ in statuses}):
        result = service.search(SearchRequest(
            query, Principal(tenant, analyst=True), scope="tenant", k=1000,
            max_per_conversation=0, recency_weight=0.0))
        reported = set(result.stale_partitions) | set(result.unindexed_partitions)
        turns = [(h.tenant, h.conversation_id, h.turn_id) for h in result.hits]
        if len(turns) != len(set(turns)):
            audit.problems.append(f"search returned a turn twice: {turns}")
        # Even a stale index must not return a turn whose TurnLog is gone (purged, erased).
        audit.problems += [f"search returned {key} which has no TurnLog"
                           for key in turns if key not in audit.turns]
        for (t, _month), status in statuses.items():
            if t != tenant or status.freshness == "fresh":
                continue
            audit.not_fresh.append(f"{status.name}:{status.freshness}")
            if status.freshness in ("stale", "missing") and status.name not in reported:
                audit.problems.append(f"search did not report {status.freshness} "
                                      f"partition {status.name}")
    for (tenant, month), status in statuses.items():
        if status.freshness != "fresh":
            continue
        current = read_current(store.root, tenant, month)
        assert current is not None
        # every live segment's rows, base first (a delta segment holds only what it added)
        indexed = PartitionIndex(current[0], current[1]).rows.select(["row_id"])
        want = rows.filter((pl.col("tenant") == tenant) & (pl.col("month") == month))
        if sorted(indexed.column("row_id").to_pylist()) != sorted(want["row_id"].to_list()):
            audit.problems.append(f"fresh index of {tenant}/{month} disagrees with its table")


class KillLog:
    """Kill points tried per job, printed in the terminal summary (``make test`` shows it)."""

    def __init__(self, entries: list[KillEntry]) -> None:
        self.entries = entries

    def record(self, job: str, tried: int, killed: int, result: str) -> None:
        """Note that ``killed`` of ``tried`` kill attempts of ``job`` hit, and the outcome."""
        self.entries.append((job, tried, killed, result))
