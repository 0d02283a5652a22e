"""Read-only aggregations for the workbench: activity, sizes, expiry and index coverage.

Every function takes the :class:`~lake.search.access.Principal` it answers for and reads only
that principal's tenant; a principal with a ``user_id`` (an end user, or an analyst narrowed
to one user) sees only that user's rows, exactly as the search service and catalog do.
Filters and projections are pushed down to the polars / pyarrow scan, so no table is ever
loaded whole: the wide columns (``payload``, ``text``, ``embedding``) are never selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from lake.embedding.rows import DONE, FAILED, PENDING
from lake.index.status import Freshness, PartitionStatus
from lake.search.access import Principal
from lake.store import LakeStore
from lake.tables import Table

# Tables holding tenant data; quarantine and audit carry no tenant or user column.
TENANT_TABLES: tuple[Table, ...] = (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.TIMELINES,
                                    Table.EVENTS, Table.FILES)
# Tables whose rows expire on their own ``expires_at`` and would go in a purge.
EXPIRING_TABLES: tuple[Table, ...] = TENANT_TABLES
# What the expiry histogram counts: turns, search rows and hosted files.
HISTOGRAM_TABLES: tuple[Table, ...] = (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.FILES)


def _who(principal: Principal) -> pl.Expr:
    """The row filter of a principal: its tenant, and its user when it has one."""
    expr = pl.col("tenant") == principal.tenant
    if principal.user_id is not None:
        expr &= pl.col("user_id") == principal.user_id
    return expr


def _scan(store: LakeStore, table: Table, principal: Principal) -> pl.LazyFrame:
    return store.scan(table).filter(_who(principal))


def _window(frame: pl.LazyFrame, column: str, since: datetime | None,
            until: datetime | None) -> pl.LazyFrame:
    if since is not None:
        frame = frame.filter(pl.col(column) >= since)
    if until is not None:
        frame = frame.filter(pl.col(column) < until)
    return frame


def lake_tenants(store: LakeStore) -> list[str]:
    """Every tenant that has at least one conversation timeline, sorted ([] before the
    first ingest).

    Reads only the ``tenant`` partition column of the timelines table.
    """
    if not store.exists(Table.TIMELINES):
        return []
    frame = store.scan(Table.TIMELINES).select("tenant").unique().collect()
    return sorted(t for t in frame["tenant"].to_list() if t)


def tenant_users(store: LakeStore, principal: Principal) -> list[str]:
    """The users with conversations the principal may see (just itself for an end user)."""
    frame = (_scan(store, Table.TIMELINES, principal).select("user_id").unique().collect())
    return sorted(frame["user_id"].to_list())


def turn_span(store: LakeStore, principal: Principal) -> tuple[datetime, datetime] | None:
    """The principal's first and last turn's ``started_at``; None before any turn."""
    row = (_scan(store, Table.TURN_LOGS, principal)
           .select(pl.col("started_at").min().alias("first"),
                   pl.col("started_at").max().alias("last")).collect().row(0))
    return None if row[0] is None else (row[0], row[1])


@dataclass(frozen=True)
class ActivityTotals:
    """Headline counts over a time window."""

    turns: int
    conversations: int
    users: int
    tokens_in: int
    tokens_out: int
    cost_usd: float


def activity_totals(store: LakeStore, principal: Principal, *, since: datetime | None = None,
                    until: datetime | None = None) -> ActivityTotals:
    """Turns, conversations, users, tokens and cost of the turns started in [since, until)."""
    frame = _window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until).select(
        pl.len().alias("turns"),
        pl.col("conversation_id").n_unique().alias("conversations"),
        pl.col("user_id").n_unique().alias("users"),
        pl.col("tokens_in").sum().alias("tokens_in"),
        pl.col("tokens_out").sum().alias("tokens_out"),
        pl.col("cost_usd").sum().alias("cost_usd"),
    ).collect()
    row = frame.row(0, named=True)
    return ActivityTotals(turns=int(row["turns"]), conversations=int(row["conversations"] or 0),
                          users=int(row["users"] or 0), tokens_in=int(row["tokens_in"] or 0),
                          tokens_out=int(row["tokens_out"] or 0),
                          cost_usd=float(row["cost_usd"] or 0.0))


# The completion statuses of a turn whose assistant did not get to answer.
UNFINISHED = ("interrupted", "failed")

# What activity can be split by: a column of turn_logs.
GROUP_COLUMNS = ("app", "agent", "user_id")


def _group_column(by: str, caller: str) -> str:
    if by not in GROUP_COLUMNS:
        raise ValueError(f"{caller}: by must be one of {', '.join(map(repr, GROUP_COLUMNS))}, "
                         f"not {by!r}")
    return by


def turns_per_day(store: LakeStore, principal: Principal, *, by: str = "app",
                  since: datetime | None = None, until: datetime | None = None) -> pl.DataFrame:
    """Turns per UTC day of ``started_at``, split by ``app``, ``agent`` or ``user_id``.

    Columns: ``day`` (date), ``group`` (the app, agent or user), ``turns``; sorted by day,
    group.
    """
    _group_column(by, "turns_per_day")
    return (_window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until)
            .select(pl.col("started_at").dt.convert_time_zone("UTC").dt.date().alias("day"),
                    pl.col(by).alias("group"))
            .group_by("day", "group").agg(pl.len().cast(pl.Int64).alias("turns"))
            .sort("day", "group").collect())


def role_mix(store: LakeStore, principal: Principal, *, since: datetime | None = None,
             until: datetime | None = None) -> pl.DataFrame:
    """Search rows per role (user, assistant, summary ...). Columns: ``role``, ``rows``."""
    return (_window(_scan(store, Table.CONTENT_ROWS, principal), "turn_at", since, until)
            .group_by("role").agg(pl.len().cast(pl.Int64).alias("rows"))
            .sort("rows", "role", descending=[True, False]).collect())


def writer_mix(store: LakeStore, principal: Principal, *, since: datetime | None = None,
               until: datetime | None = None) -> pl.DataFrame:
    """Turns per writer (``minimal`` or ``rich``). Columns: ``writer``, ``turns``."""
    return (_window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until)
            .group_by("writer").agg(pl.len().cast(pl.Int64).alias("turns"))
            .sort("writer").collect())


def daily_trends(store: LakeStore, principal: Principal, *, since: datetime | None = None,
                 until: datetime | None = None) -> pl.DataFrame:
    """Per UTC day of ``started_at``: turns, tokens (in + out), cost, the p50 and p95 turn
    duration in seconds (``duration_ms`` when recorded, else ended minus started), the share
    of turns with feedback, and how many completions were interrupted or failed.

    Columns: ``day``, ``turns``, ``tokens``, ``cost_usd``, ``p50_s``, ``p95_s``,
    ``feedback_rate``, ``interrupted``, ``failed``, ``status_unknown`` (turns whose row was
    written before ``completion_status`` existed), ``unfinished_rate`` (interrupted or failed
    among the day's turns whose status is known; null when none is); sorted by day."""
    seconds = pl.coalesce(
        pl.col("duration_ms").cast(pl.Float64) / 1000.0,
        (pl.col("ended_at") - pl.col("started_at")).dt.total_milliseconds().cast(pl.Float64)
        / 1000.0)
    return (_window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until)
            .select(pl.col("started_at").dt.convert_time_zone("UTC").dt.date().alias("day"),
                    (pl.col("tokens_in").fill_null(0) + pl.col("tokens_out").fill_null(0))
                    .alias("tokens"),
                    pl.col("cost_usd").fill_null(0.0).alias("cost_usd"),
                    seconds.alias("seconds"),
                    pl.col("feedback_rating").is_not_null().alias("rated"),
                    pl.col("completion_status").alias("status"))
            .group_by("day")
            .agg(pl.len().cast(pl.Int64).alias("turns"),
                 pl.col("tokens").sum().cast(pl.Int64).alias("tokens"),
                 pl.col("cost_usd").sum().alias("cost_usd"),
                 pl.col("seconds").quantile(0.5, "nearest").alias("p50_s"),
                 pl.col("seconds").quantile(0.95, "nearest").alias("p95_s"),
                 pl.col("rated").mean().alias("feedback_rate"),
                 (pl.col("status") == "interrupted").sum().cast(pl.Int64).alias("interrupted"),
                 (pl.col("status") == "failed").sum().cast(pl.Int64).alias("failed"),
                 pl.col("status").is_null().sum().cast(pl.Int64).alias("status_unknown"),
                 # mean() skips nulls: the share among the turns whose status is known
                 pl.col("status").is_in(UNFINISHED).mean().alias("unfinished_rate"))
            .sort("day").collect())


def feedback_mix(store: LakeStore, principal: Principal, *, since: datetime | None = None,
                 until: datetime | None = None) -> pl.DataFrame:
    """Turns per feedback outcome. Columns: ``feedback`` (``positive`` / ``negative`` /
    ``neutral`` / ``none``), ``turns``, ``with_comment``."""
    label = (pl.when(pl.col("feedback_rating").is_null()).then(pl.lit("none"))
             .when(pl.col("feedback_rating") > 0).then(pl.lit("positive"))
             .when(pl.col("feedback_rating") < 0).then(pl.lit("negative"))
             .otherwise(pl.lit("neutral")))
    return (_window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until)
            .select(label.alias("feedback"),
                    pl.col("feedback_has_comment").fill_null(False).alias("comment"))
            .group_by("feedback")
            .agg(pl.len().cast(pl.Int64).alias("turns"),
                 pl.col("comment").sum().cast(pl.Int64).alias("with_comment"))
            .sort("feedback").collect())


def top_groups(store: LakeStore, principal: Principal, *, by: str,
               since: datetime | None = None, until: datetime | None = None,
               limit: int = 10) -> pl.DataFrame:
    """The busiest apps, agents or users (``by``) of the turns started in [since, until).

    Columns: ``group``, ``turns``, ``conversations``, ``tokens`` (in + out), ``cost_usd``,
    ``negative`` (turns with negative feedback); most turns first, at most ``limit`` rows.
    """
    column = _group_column(by, "top_groups")
    return (_window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until)
            .group_by(pl.col(column).alias("group"))
            .agg(pl.len().cast(pl.Int64).alias("turns"),
                 pl.col("conversation_id").n_unique().cast(pl.Int64).alias("conversations"),
                 (pl.col("tokens_in").fill_null(0) + pl.col("tokens_out").fill_null(0))
                 .sum().cast(pl.Int64).alias("tokens"),
                 pl.col("cost_usd").fill_null(0.0).sum().alias("cost_usd"),
                 (pl.col("feedback_rating") < 0).fill_null(False).sum().cast(pl.Int64)
                 .alias("negative"))
            .sort(["turns", "group"], descending=[True, False]).head(limit).collect())


# The columns a list of turns shows (turn_logs' accounting, never the payload).
_TURN_LIST = ("conversation_id", "turn_id", "user_id", "app", "agent", "started_at", "title",
              "tokens_in", "tokens_out", "cost_usd", "feedback_rating")


def window_turns(store: LakeStore, principal: Principal, *, since: datetime | None = None,
                 until: datetime | None = None, by: str | None = None,
                 group: str | None = None, limit: int = 200) -> pl.DataFrame:
    """The turns started in [since, until), newest first, at most ``limit``; only the ``by``
    (app, agent or user_id) ``group`` when both are given. Columns: ``conversation_id``,
    ``turn_id``, ``user_id``, ``app``, ``agent``, ``started_at``, ``title``, ``tokens_in``,
    ``tokens_out``, ``cost_usd``, ``feedback_rating``."""
    frame = _window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until)
    if by is not None and group is not None:
        frame = frame.filter(pl.col(_group_column(by, "window_turns")) == group)
    return (frame.select(_TURN_LIST).sort("started_at", descending=True).head(limit)
            .collect())


def failure_review(store: LakeStore, principal: Principal, *, since: datetime | None = None,
                   until: datetime | None = None, limit: int = 100) -> pl.DataFrame:
    """The turns started in [since, until) that went wrong: a completion that was interrupted
    or failed, a step that failed, or negative feedback; newest first, at most ``limit``.

    Columns: the turn's (as :func:`window_turns`), then ``completion_status`` (null on a row
    written before the column existed), ``failed_steps`` (the failed steps' names,
    comma-joined; empty when none failed) and ``comment`` (the feedback's comment, read from
    the payload of these turns only). Steps are read from the events table, where each
    recorded step is a ``chat.step`` row.
    """
    turns = _window(_scan(store, Table.TURN_LOGS, principal), "started_at", since, until)
    failed = (_window(_scan(store, Table.EVENTS, principal), "at", since, until)
              .filter((pl.col("source") == "step")
                      & pl.col("data").str.contains('"status":"failed"', literal=True))
              .group_by("conversation_id", "turn_id")
              .agg(pl.col("data").str.json_path_match("$.name").unique(maintain_order=True)
                   .str.join(", ").alias("failed_steps")))
    picked = (turns.join(failed, on=["conversation_id", "turn_id"], how="left")
              .filter(pl.col("failed_steps").is_not_null()
                      | pl.col("completion_status").is_in(UNFINISHED).fill_null(False)
                      | (pl.col("feedback_rating") < 0).fill_null(False))
              .select(*_TURN_LIST, "completion_status", pl.col("failed_steps").fill_null(""))
              .sort("started_at", descending=True).head(limit).collect())
    unhappy = picked.filter(pl.col("feedback_rating") < 0)
    if unhappy.is_empty():
        return picked.with_columns(comment=pl.lit(None, pl.String))
    comments = (turns.filter(pl.col("turn_id").is_in(unhappy["turn_id"].implode())
                             & pl.col("conversation_id").is_in(
                                 unhappy["conversation_id"].implode()))
                .select("conversation_id", "turn_id",
                        pl.col("payload").str.json_path_match("$.feedback.comment")
                        .alias("comment")).collect())
    return picked.join(comments, on=["conversation_id", "turn_id"], how="left")


def table_sizes(store: LakeStore, principal: Principal) -> pl.DataFrame:
    """Rows and bytes per table and partition. Columns: ``table``, ``tenant``, ``month``
    (null for the tenant-partitioned timelines), ``rows``, ``bytes`` (null for one user).

    For a whole tenant the figures come from the commit log's file entries (no data file is
    read);
    a single user's share is counted with a scan and has no byte size of its own.
    """
    frames = [(_user_sizes if principal.user_id else _tenant_sizes)(store, table, principal)
              for table in TENANT_TABLES]
    return pl.concat(frames, how="vertical").sort("table", "tenant", "month", nulls_last=True)


_SIZE_SCHEMA = {"table": pl.String, "tenant": pl.String, "month": pl.String,
                "rows": pl.Int64, "bytes": pl.Int64}


def _tenant_sizes(store: LakeStore, table: Table, principal: Principal) -> pl.DataFrame:
    rows = [{"table": table.value, "tenant": principal.tenant, "month": month,
             "rows": rows, "bytes": size} for month, (rows, size)
            in store.tenant_file_sizes(table, principal.tenant).items()]
    return pl.DataFrame(rows, schema=_SIZE_SCHEMA)


def _user_sizes(store: LakeStore, table: Table, principal: Principal) -> pl.DataFrame:
    month = pl.col("month") if table is not Table.TIMELINES else pl.lit(None, pl.String)
    return (_scan(store, table, principal)
            .select(month.alias("month"))
            .group_by("month").agg(pl.len().cast(pl.Int64).alias("rows"))
            .with_columns(pl.lit(table.value).alias("table"),
                          pl.lit(principal.tenant).alias("tenant"),
                          pl.lit(None, pl.Int64).alias("bytes"))
            .select(list(_SIZE_SCHEMA)).collect().cast(_SIZE_SCHEMA))  # type: ignore[arg-type]


def expiry_histogram(store: LakeStore, principal: Principal, *, as_of: datetime,
                     weeks: int = 12) -> pl.DataFrame:
    """What expires in each of the coming ``weeks`` weeks (week 0 starts at ``as_of``).

    Columns: ``week`` (0-based), ``week_start`` (date), ``table``, ``rows``. Only weeks and
    tables with at least one expiring row appear.
    """
    if weeks < 1:
        raise ValueError(f"expiry_histogram: weeks must be >= 1, not {weeks}")
    end = as_of + timedelta(weeks=weeks)
    week_us = 7 * 86_400 * 1_000_000
    frames = []
    for table in HISTOGRAM_TABLES:
        frames.append(
            _scan(store, table, principal)
            .filter((pl.col("expires_at") > as_of) & (pl.col("expires_at") <= end))
            .select(((pl.col("expires_at").dt.epoch("us") - int(as_of.timestamp() * 1e6))
                     // week_us).cast(pl.Int64).alias("week"))
            .group_by("week").agg(pl.len().cast(pl.Int64).alias("rows"))
            .with_columns(pl.lit(table.value).alias("table")).collect())
    frame = pl.concat(frames, how="vertical")
    starts = [(as_of + timedelta(weeks=int(w))).date() for w in frame["week"].to_list()]
    return (frame.with_columns(pl.Series("week_start", starts, dtype=pl.Date))
            .select("week", "week_start", "table", "rows").sort("week", "table"))


def expired_turns(store: LakeStore, principal: Principal, *, as_of: datetime,
                  limit: int = 200) -> pl.DataFrame:
    """Turns still stored although past their TTL, oldest expiry first (at most ``limit``).

    Columns: ``conversation_id``, ``turn_id``, ``user_id``, ``app``, ``started_at``,
    ``expires_at``.
    """
    return (_scan(store, Table.TURN_LOGS, principal)
            .filter(pl.col("expires_at") <= as_of)
            .select("conversation_id", "turn_id", "user_id", "app", "started_at", "expires_at")
            .sort("expires_at", "conversation_id", "turn_id").head(limit).collect())


def expired_files(store: LakeStore, principal: Principal, *, as_of: datetime,
                  limit: int = 200) -> pl.DataFrame:
    """Hosted files still stored although past their TTL (at most ``limit``).

    Columns: ``ref``, ``mime``, ``size``, ``user_id``, ``expires_at``.
    """
    return (_scan(store, Table.FILES, principal)
            .filter(pl.col("expires_at") <= as_of)
            .select("ref", "mime", "size", "user_id", "expires_at")
            .sort("expires_at", "ref").head(limit).collect())


@dataclass(frozen=True)
class PurgeCount:
    """What a purge as of a moment would remove from one table."""

    table: str
    rows: int
    bytes: int | None


def purge_preview(store: LakeStore, principal: Principal, *, as_of: datetime
                  ) -> list[PurgeCount]:
    """Rows (and, for hosted files, bytes) whose ``expires_at`` is at or before ``as_of``.

    Read-only: it counts what a purge would take, one entry per expiring table.
    """
    out = []
    for table in EXPIRING_TABLES:
        expired = _scan(store, table, principal).filter(pl.col("expires_at") <= as_of)
        if table is Table.FILES:
            row = expired.select(pl.len().alias("rows"),
                                 pl.col("size").sum().alias("bytes")).collect().row(0)
            out.append(PurgeCount(table.value, int(row[0]), int(row[1] or 0)))
        else:
            count = expired.select(pl.len()).collect().item()
            out.append(PurgeCount(table.value, int(count), None))
    return out


def embedding_coverage(store: LakeStore, principal: Principal) -> pl.DataFrame:
    """Search rows per partition by embedding status. Columns: ``tenant``, ``month``,
    ``rows``, ``embedded``, ``pending``, ``failed``; sorted by month."""
    status = pl.col("embedding_status")
    return (_scan(store, Table.CONTENT_ROWS, principal)
            .group_by("tenant", "month")
            .agg(pl.len().cast(pl.Int64).alias("rows"),
                 (status == DONE).sum().cast(pl.Int64).alias("embedded"),
                 (status == PENDING).sum().cast(pl.Int64).alias("pending"),
                 (status == FAILED).sum().cast(pl.Int64).alias("failed"))
            .sort("tenant", "month").collect())


@dataclass(frozen=True)
class PartitionHealth:
    """One partition's index state beside its table rows (the principal's share of them)."""

    tenant: str
    month: str
    freshness: Freshness
    rows: int
    embedded: int
    pending: int
    failed: int
    index_rows: int | None
    index_content_version: int | None
    table_version: int | None
    index_bytes: int | None
    model: str | None
    built_at: str | None
    build_seconds: float | None
    rebuild_command: str | None

    @property
    def name(self) -> str:
        """``tenant/month``."""
        return f"{self.tenant}/{self.month}"


def index_health(store: LakeStore, principal: Principal,
                 statuses: dict[tuple[str, str], PartitionStatus]) -> list[PartitionHealth]:
    """Join the partition index statuses of the principal's tenant with its row coverage.

    ``statuses`` comes from the search service (it caches them per table version). For a
    single user, the index's own row count (a whole-tenant figure) is left out.
    """
    coverage = {(r["tenant"], r["month"]): r
                for r in embedding_coverage(store, principal).iter_rows(named=True)}
    out = []
    for (tenant, month), status in sorted(statuses.items()):
        if tenant != principal.tenant:
            continue
        cov = coverage.get((tenant, month))
        if principal.user_id is not None and cov is None:
            continue  # a partition without the user's rows says nothing about the user
        manifest = status.manifest
        out.append(PartitionHealth(
            tenant=tenant, month=month, freshness=status.freshness,
            rows=int(cov["rows"]) if cov else 0, embedded=int(cov["embedded"]) if cov else 0,
            pending=int(cov["pending"]) if cov else 0, failed=int(cov["failed"]) if cov else 0,
            index_rows=(manifest.row_count if manifest and principal.user_id is None
                        else None),
            index_content_version=manifest.content_version if manifest else None,
            table_version=status.content_version,
            index_bytes=sum(manifest.bytes.values()) if manifest else None,
            model=manifest.model if manifest else None,
            built_at=manifest.built_at if manifest else None,
            build_seconds=manifest.build_seconds if manifest else None,
            rebuild_command=(None if status.freshness == "fresh"
                             else status.rebuild_command)))
    return out
