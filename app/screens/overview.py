"""Overview: a window or date range; turns per day by app, agent or user (a bar opens that
day's conversations of its group in Conversations & Replay); then a tab at a time (only the
open one is read and drawn): daily tokens, cost, duration percentiles, feedback rate and the
share of interrupted or failed completions; the top users and apps (a row opens their
conversations); a failure review (a row opens the turn); role mix, writers and feedback."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import polars as pl
import streamlit as st

from app.components import charts
from app.components.drill import open_picked_turn, turn_table
from app.components.identity import page_context
from app.components.text import compact_number
from app.state import identity_params

WINDOWS = {"last 7 days": 7, "last 30 days": 30, "last 90 days": 90, "last year": 365,
           "all time": None, "date range": -1}
SPLITS = {"app": "app", "agent": "agent", "user": "user_id"}
FEEDBACK_COLORS = {"positive": "#2b8a3e", "negative": "#c92a2a", "neutral": "#868e96",
                   "none": "#ced4da"}
# Replay's conversation-list filters, by the column a top table or a bar groups on, and
# its day filter.
LIST_FILTERS = {"user_id": "conv_user", "app": "conv_app", "agent": "conv_agent"}
LIST_DAY = "conv_day"
_OPEN_LIST = "wb_overview_open_list"
_BARS_EPOCH = "wb_overview_bars_epoch"

ctx = page_context()
wb, viewer = ctx.workbench, ctx.viewer
open_picked_turn(viewer)
st.title("Overview")
c1, c2 = st.columns(2)
window = c1.selectbox("Window", list(WINDOWS), index=2)
split = c2.radio("Split turns by", list(SPLITS), horizontal=True) or "app"
by = SPLITS[split]
days = WINDOWS[window]
since: datetime | None
until: datetime | None = None
if days == -1:
    today = datetime.now(UTC).date()
    picked = st.date_input("From – to (UTC days, both included)",
                           value=(today - timedelta(days=29), today), max_value=today)
    first, last = (picked if isinstance(picked, tuple) and len(picked) == 2
                   else (today - timedelta(days=29), today))
    since = datetime.combine(first, time.min, UTC)
    until = datetime.combine(last, time.min, UTC) + timedelta(days=1)
    window = f"{first:%Y-%m-%d} – {last:%Y-%m-%d}"
else:
    since = None if days is None else datetime.now(UTC) - timedelta(days=days)
data = wb.overview(viewer, since=since, until=until, by=by)

t = data.totals
cols = st.columns(6)
cols[0].metric("Turns", f"{t.turns:,}")
cols[1].metric("Conversations", f"{t.conversations:,}")
cols[2].metric("Users", f"{t.users:,}")
cols[3].metric("Tokens in", compact_number(t.tokens_in), help=f"{t.tokens_in:,}")
cols[4].metric("Tokens out", compact_number(t.tokens_out), help=f"{t.tokens_out:,}")
cols[5].metric("Cost", f"${t.cost_usd:,.2f}")
if t.turns == 0:
    st.info(f"No turns in the {window} for {viewer.describe()}.")
    st.stop()


def readable(turns: pl.DataFrame) -> pl.DataFrame:
    """Empty cells blank rather than "None": feedback as a word, no title or comment as ""."""
    rating = pl.col("feedback_rating")
    if "completion_status" in turns.columns:
        turns = turns.with_columns(completion=pl.col("completion_status").fill_null(""))
    return turns.with_columns(
        pl.when(rating > 0).then(pl.lit("positive")).when(rating < 0).then(pl.lit("negative"))
        .when(rating == 0).then(pl.lit("neutral")).otherwise(pl.lit("")).alias("feedback"),
        *(pl.col(c).fill_null("") for c in ("title", "comment") if c in turns.columns))


def picked_bar(event: Any) -> tuple[date, str] | None:
    """The (day, group) of the bar clicked in the per-day chart, if one is."""
    points = (event or {}).get("selection", {}).get(charts.PICK) or []
    if not points:
        return None
    point = points[0]
    try:
        return date.fromisoformat(str(point["day_key"])), str(point["group"])
    except (KeyError, ValueError):
        return None


def open_list(column: str, group: str, day: date | None = None) -> None:
    """Open Replay's conversation list on the next run, filtered to one group (and day);
    its other filters are cleared so the list is exactly what was clicked."""
    for key in (*LIST_FILTERS.values(), LIST_DAY):
        st.session_state.pop(key, None)
    st.session_state[LIST_FILTERS[column]] = group
    if day is not None:
        st.session_state[LIST_DAY] = day
    ctx.state.reset_conversation_page()  # the list's first page, open
    st.session_state[_OPEN_LIST] = True


def open_conversations(column: str, frame_key: str, frame_groups: list[str]) -> None:
    """A row of a top table picked: Replay's conversation list, filtered to that group."""
    rows = st.session_state[frame_key].selection.rows
    if rows and rows[0] < len(frame_groups):
        open_list(column, frame_groups[rows[0]])


def open_day(chart_key: str) -> None:
    """A bar clicked: Replay's conversation list of that day and group."""
    bar = picked_bar(st.session_state[chart_key])
    if bar is not None:
        open_list(by, bar[1], bar[0])
        # A fresh (unselected) chart after: coming back opens nothing by itself.
        st.session_state[_BARS_EPOCH] = st.session_state.get(_BARS_EPOCH, 0) + 1


if st.session_state.pop(_OPEN_LIST, False):
    st.switch_page("screens/replay.py", query_params=identity_params(viewer))

st.subheader(f"Turns per day by {split}")
st.caption(f"Click a bar for that day's conversations of its {split} in Conversations & "
           "Replay.")
bars_key = f"per-day-{by}-{st.session_state.get(_BARS_EPOCH, 0)}"
st.altair_chart(charts.turns_per_day(data.per_day, split), key=bars_key,
                on_select=lambda: open_day(bars_key))

# Below the daily turns, one tab at a time is read and drawn (the tab is in the URL).
TABS = ("Daily trends", "Top users and apps", "Failure review", "Roles, writers, feedback")
trends_tab, tops_tab, failures_tab, mix_tab = st.tabs(
    TABS, key="overview_tab", on_change="rerun", bind="query-params")
if trends_tab.open:
    with trends_tab:
        tr = wb.trends(viewer, since=since, until=until)
        a, b = st.columns(2)
        a.altair_chart(charts.daily_metric(tr, "tokens", "tokens (in + out)", ",d"))
        b.altair_chart(charts.daily_metric(tr, "cost_usd", "cost (USD)", "$,.2f"))
        a.altair_chart(charts.duration_percentiles(tr))
        b.altair_chart(charts.daily_metric(tr, "feedback_rate", "turns with feedback", ".0%"))
        a.altair_chart(charts.daily_metric(tr, "unfinished_rate",
                                           "completions interrupted or failed", ".0%"))
        unknown = int(tr["status_unknown"].sum())
        if unknown:
            b.caption(f"{unknown:,} turns were ingested before turnlake recorded how a "
                      "completion ended: the share leaves them out.")
if tops_tab.open:
    with tops_tab:
        st.caption("Select a row to list its conversations in Conversations & Replay.")
        top_config = {"cost_usd": st.column_config.NumberColumn("cost", format="$%.2f"),
                      "tokens": st.column_config.NumberColumn("tokens", format="localized"),
                      "negative": st.column_config.NumberColumn(
                          "negative", help="Turns with negative feedback")}
        top_users, top_apps = wb.tops(viewer, since=since, until=until)
        left, right = st.columns(2)
        for column, frame, place, label in (("user_id", top_users, left, "user"),
                                            ("app", top_apps, right, "app")):
            key = f"top-{column}"
            groups = frame["group"].to_list()
            place.dataframe(
                frame.rename({"group": label}), key=key, hide_index=True,
                on_select=lambda c=column, k=key, g=groups: open_conversations(c, k, g),
                selection_mode="single-row", column_config=top_config)
if failures_tab.open:
    with failures_tab:
        failures = wb.failures(viewer, since=since, until=until)
        if failures.is_empty():
            st.caption(f"No interrupted or failed completion, no failed step and no "
                       f"negative feedback in the {window}.")
        else:
            st.caption(f"{failures.height:,} turns whose completion was interrupted or failed, "
                       "with a failed step or with negative feedback (newest first); select a "
                       "row to open the turn in its conversation.")
            turn_table(readable(failures), "failures", column_order=[
                "started_at", "user_id", "app", "title", "completion", "failed_steps",
                "feedback", "comment"], column_config={
                "started_at": st.column_config.DatetimeColumn("started (UTC)",
                                                              format="YYYY-MM-DD HH:mm"),
                "completion": st.column_config.TextColumn(
                    "completion", help="How the answer ended: interrupted, failed or "
                    "completed (blank: not recorded, a turn ingested before it was)"),
                "failed_steps": st.column_config.TextColumn("failed steps"),
                "comment": st.column_config.TextColumn("comment", width="large")})
if mix_tab.open:
    with mix_tab:
        roles, writers, feedback = wb.mixes(viewer, since=since, until=until)
        left, right = st.columns(2)
        with left:
            st.markdown("**Role mix (search rows)**")
            st.altair_chart(charts.counts_bar(roles, "role", "rows"))
            st.markdown("**Writers**")
            st.altair_chart(charts.counts_bar(writers, "writer", "turns"))
        with right:
            st.markdown("**Feedback**")
            st.altair_chart(charts.counts_bar(feedback, "feedback", "turns", FEEDBACK_COLORS))
            st.dataframe(feedback, hide_index=True)
