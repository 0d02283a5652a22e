"""lake.analytics on a small hand-built lake whose every count is known."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from lake import analytics
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, rich_record

AS_OF = BASE_TIME + timedelta(days=2)  # 2026-03-12 09:00 UTC
ACME = Principal("acme", analyst=True)
BEN = Principal("acme", "u-ben")
GLOBEX = Principal("globex", analyst=True)
MARCH = BASE_TIME - timedelta(days=9)  # 2026-03-01


def _lines(records: list[dict[str, object]]) -> list[object]:
    return [json.dumps(r) for r in records]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> LakeStore:
    settings = Settings(lake=tmp_path_factory.mktemp("analytics") / "lake",
                        embedding_model="hashing-64")
    indexed = [
        make_record(0, conversation="c-1", at=BASE_TIME, usage={"tokens_in": 10,
                                                                 "tokens_out": 5},
                    feedback={"rating": 1, "comment": "ok"}),
        make_record(1, conversation="c-1", at=BASE_TIME + timedelta(days=1),
                    feedback={"rating": -1}),
        make_record(2, conversation="c-2", user="u-ben", at=BASE_TIME, app="data-copilot",
                    agent="langgraph-bot"),
        make_record(3, conversation="c-old", at=BASE_TIME - timedelta(days=10), ttl_days=5),
        make_record(4, conversation="c-soon", at=BASE_TIME, ttl_days=10),
        rich_record(5, conversation="c-rich"),
        make_record(6, tenant="globex", conversation="c-g", at=BASE_TIME),
    ]
    run_ingest(settings, records=_lines(indexed))
    # Not embedded and not indexed: acme/2026-04 has no index, globex/2026-03 goes stale.
    later = [make_record(7, conversation="c-apr", at=BASE_TIME + timedelta(days=23)),
             make_record(8, tenant="globex", conversation="c-g2", at=BASE_TIME)]
    run_ingest(settings, records=_lines(later), embed=False, index=False)
    return LakeStore(settings.lake)


def _rows(frame: pl.DataFrame, *columns: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in frame.select(columns).iter_rows()]


def test_tenants_and_users(store: LakeStore) -> None:
    assert analytics.lake_tenants(store) == ["acme", "globex"]
    assert analytics.tenant_users(store, ACME) == ["u-ana", "u-ben"]
    assert analytics.tenant_users(store, BEN) == ["u-ben"]


def test_turns_per_day_by_app_and_agent(store: LakeStore) -> None:
    per_app = analytics.turns_per_day(store, ACME, since=MARCH, until=AS_OF)
    assert _rows(per_app, "day", "group", "turns") == [
        (date(2026, 3, 10), "data-copilot", 1), (date(2026, 3, 10), "support-desk", 3),
        (date(2026, 3, 11), "support-desk", 1)]
    per_agent = analytics.turns_per_day(store, ACME, by="agent", since=MARCH, until=AS_OF)
    assert _rows(per_agent, "day", "group", "turns") == [
        (date(2026, 3, 10), "langgraph-bot", 1), (date(2026, 3, 10), "react-agent", 3),
        (date(2026, 3, 11), "react-agent", 1)]
    everything = analytics.turns_per_day(store, ACME)
    assert everything["turns"].sum() == 7  # c-old (February) and c-apr (April) included
    per_user = analytics.turns_per_day(store, ACME, by="user_id", since=MARCH, until=AS_OF)
    assert _rows(per_user, "day", "group", "turns") == [
        (date(2026, 3, 10), "u-ana", 3), (date(2026, 3, 10), "u-ben", 1),
        (date(2026, 3, 11), "u-ana", 1)]
    with pytest.raises(ValueError, match="by must be one of 'app', 'agent', 'user_id'"):
        analytics.turns_per_day(store, ACME, by="user")


def test_top_groups_and_the_turns_of_one(store: LakeStore) -> None:
    users = analytics.top_groups(store, ACME, by="user_id", since=MARCH, until=AS_OF)
    assert _rows(users, "group", "turns", "conversations", "negative") == [
        ("u-ana", 4, 3, 1), ("u-ben", 1, 1, 0)]
    assert users["tokens"][0] == 10 + 5 + 120 + 80
    apps = analytics.top_groups(store, ACME, by="app", limit=1)
    assert _rows(apps, "group", "turns") == [("support-desk", 6)]
    assert analytics.top_groups(store, BEN, by="user_id")["group"].to_list() == ["u-ben"]
    turns = analytics.window_turns(store, ACME, since=MARCH, until=AS_OF, by="user_id",
                                   group="u-ben")
    assert _rows(turns, "conversation_id", "turn_id") == [("c-2", "t-0002")]
    newest_first = analytics.window_turns(store, ACME)["started_at"].to_list()
    assert newest_first == sorted(newest_first, reverse=True) and len(newest_first) == 7
    assert "payload" not in turns.columns


def test_the_failure_review_lists_failed_steps_and_negative_feedback(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    at = BASE_TIME.isoformat()
    cut_short = {"text": "", "at": (BASE_TIME + timedelta(seconds=30)).isoformat()}
    failed_step = [{"name": "run_python", "status": "started", "at": at},
                   {"name": "run_python", "status": "failed", "at": at, "detail": "boom"},
                   {"name": "read_file", "status": "completed", "at": at}]
    run_ingest(settings, records=_lines([
        make_record(0, conversation="c-ok", feedback={"rating": 1, "comment": "fine"}),
        make_record(1, conversation="c-step", writer="rich", steps=failed_step),
        make_record(2, conversation="c-sad", feedback={"rating": -1, "comment": "wrong sum"}),
        make_record(3, conversation="c-both", writer="rich", steps=failed_step,
                    feedback={"rating": -1}),
        make_record(4, tenant="globex", conversation="c-g", writer="rich", steps=failed_step),
        make_record(5, conversation="c-stop", completion={**cut_short, "status": "interrupted"}),
        make_record(6, conversation="c-err", completion={**cut_short, "status": "failed"}),
    ]), embed=False, index=False)
    review = analytics.failure_review(LakeStore(settings.lake), ACME)
    assert _rows(review, "conversation_id", "completion_status", "failed_steps",
                 "feedback_rating", "comment") == [
        ("c-err", "failed", "", None, None), ("c-stop", "interrupted", "", None, None),
        ("c-both", "completed", "run_python", -1, None),
        ("c-sad", "completed", "", -1, "wrong sum"),
        ("c-step", "completed", "run_python", None, None)]
    assert analytics.failure_review(LakeStore(settings.lake), BEN).is_empty()


def test_the_daily_trend_counts_interrupted_and_failed_completions(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    day_two = BASE_TIME + timedelta(days=1)

    def ended(turn: int, status: str | None, at: datetime) -> dict[str, object]:
        completion: dict[str, object] = {"text": "" if status else "done",
                                         "at": (at + timedelta(seconds=30)).isoformat()}
        return make_record(turn, conversation=f"c-{turn}", at=at,
                           completion={**completion, **({"status": status} if status else {})})

    run_ingest(settings, records=_lines([
        ended(0, None, BASE_TIME), ended(1, "interrupted", BASE_TIME),
        ended(2, "failed", BASE_TIME), ended(3, None, BASE_TIME),
        ended(4, None, day_two), ended(5, "interrupted", day_two),
    ]), embed=False, index=False)
    store = LakeStore(settings.lake)
    trends = analytics.daily_trends(store, ACME)
    assert _rows(trends, "turns", "interrupted", "failed", "unfinished_rate") == [
        (4, 1, 1, 0.5), (2, 1, 0, 0.5)]
    # A row written before the column existed reads null: unknown, left out of the share.
    rows = store.read(Table.TURN_LOGS, filter=ds.field("turn_id") == "t-0004")
    store.replace_where(Table.TURN_LOGS, rows.set_column(
        rows.schema.get_field_index("completion_status"), "completion_status",
        pa.nulls(1, pa.string())), "turn_id = 't-0004'")
    trends = analytics.daily_trends(store, ACME)
    assert _rows(trends, "turns", "interrupted", "status_unknown", "unfinished_rate") == [
        (4, 1, 0, 0.5), (2, 1, 1, 1.0)]


def test_turn_span_is_the_first_and_last_turn(store: LakeStore) -> None:
    assert analytics.turn_span(store, BEN) == (BASE_TIME, BASE_TIME)
    assert analytics.turn_span(store, ACME) == (BASE_TIME - timedelta(days=10),
                                                BASE_TIME + timedelta(days=23))
    assert analytics.turn_span(store, Principal("acme", "u-nobody")) is None


def test_a_user_sees_only_their_rows(store: LakeStore) -> None:
    assert _rows(analytics.turns_per_day(store, BEN), "group", "turns") == [
        ("data-copilot", 1)]
    assert _rows(analytics.role_mix(store, BEN), "role", "rows") == [
        ("assistant", 1), ("user", 1)]
    totals = analytics.activity_totals(store, BEN)
    assert (totals.turns, totals.conversations, totals.users) == (1, 1, 1)


def test_mixes_and_totals(store: LakeStore) -> None:
    assert _rows(analytics.writer_mix(store, ACME), "writer", "turns") == [
        ("minimal", 6), ("rich", 1)]
    assert _rows(analytics.feedback_mix(store, ACME), "feedback", "turns", "with_comment") == [
        ("negative", 1, 0), ("none", 4, 0), ("positive", 2, 2)]
    roles = dict(_rows(analytics.role_mix(store, ACME), "role", "rows"))
    assert roles["assistant"] == 7 and {"summary", "anchor", "note", "attachment"} <= set(roles)
    totals = analytics.activity_totals(store, ACME, since=MARCH, until=AS_OF)
    assert (totals.turns, totals.conversations, totals.users) == (5, 4, 2)
    assert totals.tokens_in == 10 + 120 and totals.tokens_out == 5 + 80
    assert totals.cost_usd == pytest.approx(0.01)


def test_no_other_tenant_leaks(store: LakeStore) -> None:
    assert analytics.activity_totals(store, GLOBEX).turns == 2
    assert analytics.activity_totals(store, ACME).turns == 7
    sizes = analytics.table_sizes(store, ACME)
    assert set(sizes["tenant"]) == {"acme"}


def test_table_sizes_for_a_tenant_and_for_a_user(store: LakeStore) -> None:
    sizes = analytics.table_sizes(store, ACME)
    per_table = dict(_rows(sizes.group_by("table").agg(pl.col("rows").sum()).sort("table"),
                           "table", "rows"))
    assert per_table["turn_logs"] == 7 and per_table["timelines"] == 6
    assert per_table["files"] == 1
    assert sizes.filter(pl.col("table") == "timelines")["month"].to_list() == [None]
    assert sizes["bytes"].min() > 0  # type: ignore[operator]
    months = sizes.filter(pl.col("table") == "turn_logs")["month"].to_list()
    assert months == ["2026-02", "2026-03", "2026-04"]
    mine = analytics.table_sizes(store, BEN)
    assert _rows(mine.filter(pl.col("table") == "turn_logs"), "month", "rows", "bytes") == [
        ("2026-03", 1, None)]


def test_expiry_past_ttl_and_purge_preview(store: LakeStore) -> None:
    histogram = analytics.expiry_histogram(store, ACME, as_of=AS_OF, weeks=2)
    # c-soon expires ten days after 2026-03-10, i.e. in the second week after AS_OF
    assert _rows(histogram, "week", "week_start", "table", "rows") == [
        (1, date(2026, 3, 19), "content_rows", 2), (1, date(2026, 3, 19), "turn_logs", 1)]
    expired = analytics.expired_turns(store, ACME, as_of=AS_OF)
    assert _rows(expired, "conversation_id", "turn_id") == [("c-old", "t-0003")]
    assert analytics.expired_files(store, ACME, as_of=AS_OF).height == 0
    preview = {p.table: (p.rows, p.bytes) for p in
               analytics.purge_preview(store, ACME, as_of=AS_OF)}
    assert preview == {"turn_logs": (1, None), "content_rows": (2, None),
                       "timelines": (1, None), "events": (0, None), "files": (0, 0)}
    # a year on, the hosted file has expired too and the preview counts its bytes
    year_on = analytics.purge_preview(store, ACME, as_of=AS_OF + timedelta(days=400))
    files = next(p for p in year_on if p.table == "files")
    assert files.rows == 1 and files.bytes == len(b"month,hours\n3,12\n")
    assert analytics.purge_preview(store, BEN, as_of=AS_OF)[0].rows == 0
    with pytest.raises(ValueError, match="weeks must be >= 1"):
        analytics.expiry_histogram(store, ACME, as_of=AS_OF, weeks=0)


def test_embedding_coverage_and_index_health(store: LakeStore) -> None:
    coverage = analytics.embedding_coverage(store, ACME)
    assert _rows(coverage, "month", "rows", "embedded", "pending", "failed")[-1] == (
        "2026-04", 2, 0, 2, 0)
    statuses = partition_statuses(store)
    health = {h.name: h for h in analytics.index_health(store, ACME, statuses)}
    assert set(health) == {"acme/2026-02", "acme/2026-03", "acme/2026-04"}
    assert health["acme/2026-03"].freshness == "fresh"
    assert health["acme/2026-03"].rebuild_command is None
    assert health["acme/2026-03"].index_rows == health["acme/2026-03"].rows
    missing = health["acme/2026-04"]
    assert missing.freshness == "missing" and missing.index_rows is None
    assert missing.rebuild_command == "turnlake index build --tenant acme --month 2026-04"
    stale = analytics.index_health(store, GLOBEX, statuses)
    assert [(h.name, h.freshness) for h in stale] == [("globex/2026-03", "stale")]
    assert stale[0].rows == 4 and stale[0].index_rows == 2
    assert stale[0].index_content_version is not None and stale[0].table_version is not None
    assert stale[0].index_content_version < stale[0].table_version
    # one user: only partitions holding their rows, without the tenant-wide index count
    mine = analytics.index_health(store, BEN, statuses)
    assert [(h.name, h.rows, h.index_rows) for h in mine] == [("acme/2026-03", 2, None)]


def test_an_empty_lake_gives_empty_answers(tmp_path: Path) -> None:
    empty = LakeStore(tmp_path / "nothing")
    assert analytics.lake_tenants(empty) == []
    assert analytics.activity_totals(empty, ACME).turns == 0
    assert analytics.turns_per_day(empty, ACME).height == 0
    assert analytics.table_sizes(empty, ACME).height == 0
    assert analytics.expiry_histogram(empty, ACME, as_of=AS_OF).height == 0
    assert all(p.rows == 0 for p in analytics.purge_preview(empty, ACME, as_of=AS_OF))
    assert analytics.index_health(empty, ACME, partition_statuses(empty)) == []
