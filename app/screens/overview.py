"""Overview: turns per day by app or agent, role mix, writers and feedback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import streamlit as st

from app.components import charts
from app.components.identity import page_context
from app.components.text import compact_number

WINDOWS = {"last 7 days": 7, "last 30 days": 30, "last 90 days": 90, "last year": 365,
           "all time": None}
FEEDBACK_COLORS = {"positive": "#2b8a3e", "negative": "#c92a2a", "neutral": "#868e96",
                   "none": "#ced4da"}

ctx = page_context()
wb, viewer = ctx.workbench, ctx.viewer
st.title("Overview")
c1, c2 = st.columns(2)
window = c1.selectbox("Window", list(WINDOWS), index=2)
by = c2.radio("Split turns by", ["app", "agent"], horizontal=True)
days = WINDOWS[window]
since = None if days is None else datetime.now(UTC) - timedelta(days=days)
data = wb.overview(viewer, since=since, by=by)

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
