"""Overview: a window or date range; turns per day by app or agent, daily tokens, cost,
duration percentiles and feedback rate, role mix, writers and feedback."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import streamlit as st

from app.components import charts
from app.components.identity import page_context
from app.components.text import compact_number

WINDOWS = {"last 7 days": 7, "last 30 days": 30, "last 90 days": 90, "last year": 365,
           "all time": None, "date range": -1}
FEEDBACK_COLORS = {"positive": "#2b8a3e", "negative": "#c92a2a", "neutral": "#868e96",
                   "none": "#ced4da"}

ctx = page_context()
wb, viewer = ctx.workbench, ctx.viewer
st.title("Overview")
c1, c2 = st.columns(2)
window = c1.selectbox("Window", list(WINDOWS), index=2)
by = c2.radio("Split turns by", ["app", "agent"], horizontal=True)
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

st.subheader(f"Turns per day by {by}")
st.altair_chart(charts.turns_per_day(data.per_day, by))
st.subheader("Daily trends")
tr = data.trends
a, b = st.columns(2)
a.altair_chart(charts.daily_metric(tr, "tokens", "tokens (in + out)", ",d"))
b.altair_chart(charts.daily_metric(tr, "cost_usd", "cost (USD)", "$,.2f"))
a.altair_chart(charts.duration_percentiles(tr))
b.altair_chart(charts.daily_metric(tr, "feedback_rate", "share of turns with feedback",
                                   ".0%"))
left, right = st.columns(2)
with left:
    st.subheader("Role mix (search rows)")
    st.altair_chart(charts.counts_bar(data.roles, "role", "rows"))
    st.subheader("Writers")
    st.altair_chart(charts.counts_bar(data.writers, "writer", "turns"))
with right:
    st.subheader("Feedback")
    st.altair_chart(charts.counts_bar(data.feedback, "feedback", "turns", FEEDBACK_COLORS))
    st.dataframe(data.feedback, hide_index=True)
