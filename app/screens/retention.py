"""Retention: sizes per table and partition, what expires soon, what is past TTL, the policy
in force and a purge preview."""

from __future__ import annotations

import polars as pl
import streamlit as st

from app.components import charts
from app.components.identity import page_context
from app.components.text import human_bytes
from app.service import audit_log, purge_runner

ctx = page_context()
wb, viewer, state = ctx.workbench, ctx.viewer, ctx.state
st.title("Retention")
for result in state.take_results("retention"):
    st.success(result)
weeks = st.slider("Weeks ahead", 1, 52, 12)
data = wb.retention(viewer, weeks=weeks)
st.caption(f"As of {data.as_of:%Y-%m-%d %H:%M} UTC · tenant {viewer.tenant}"
           + ("" if viewer.is_analyst else f" · only user {viewer.as_user}'s rows"))

st.subheader("Policy in force")
st.markdown(f"Default TTL: **{data.default_ttl_days} days** (rows without a matching rule or "
            "a per-turn `ttl_days`).")
if data.rules:
    st.dataframe(pl.DataFrame({"app": [r.app or "*" for r in data.rules],
                               "role": [r.role or "*" for r in data.rules],
                               "ttl_days": [r.ttl_days for r in data.rules]}),
                 hide_index=True)
else:
    st.caption(f"No retention rule for tenant {viewer.tenant}; the default applies.")

st.subheader("Rows and bytes per table and partition")
if data.sizes.height == 0:
    st.info("Nothing stored for this view yet.")
else:
    totals = data.sizes.group_by("table").agg(pl.col("rows").sum(), pl.col("bytes").sum())
    cols = st.columns(totals.height)
    for col, row in zip(cols, totals.sort("table").iter_rows(named=True), strict=True):
        if viewer.is_analyst:
            col.metric(f"{row['table']} · {row['rows']:,} rows", human_bytes(row["bytes"]))
        else:
            col.metric(row["table"], f"{row['rows']:,} rows")
    st.altair_chart(charts.table_bytes(data.sizes))
    st.dataframe(data.sizes.with_columns(
        pl.col("month").fill_null("(all months)"),
        pl.Series("size", [human_bytes(b) for b in data.sizes["bytes"].to_list()]),
    ).drop("bytes") if viewer.is_analyst else data.sizes.drop("bytes"), hide_index=True)
    if not viewer.is_analyst:
        st.caption("A user's share of a table has no byte size of its own: rows only.")

st.subheader(f"Expiring in the next {weeks} weeks")
if data.histogram.height == 0:
    st.info(f"Nothing expires in the next {weeks} weeks.")
else:
    st.altair_chart(charts.expiry_histogram(data.histogram))

st.subheader("Already past TTL (still stored)")
c1, c2 = st.columns(2)
c1.metric("Turns past TTL", data.expired_turns.height)
c2.metric("Hosted files past TTL", data.expired_files.height)
if data.expired_turns.height:
    st.dataframe(data.expired_turns, hide_index=True)
if data.expired_files.height:
    st.dataframe(data.expired_files, hide_index=True)

st.subheader("Purge preview")
total = sum(p.rows for p in data.purge)
sized = any(p.bytes is not None for p in data.purge)
preview = pl.DataFrame({"table": [p.table for p in data.purge],
                        "rows to purge": [p.rows for p in data.purge]})
if sized:
    preview = preview.with_columns(pl.Series("size", [human_bytes(p.bytes) for p in data.purge]))
st.dataframe(preview, hide_index=True)
if total == 0:
    st.caption("Nothing is past its TTL: there is nothing to purge.")
runner = purge_runner(wb)
if runner is None or not viewer.may_admin:
    st.caption("Purging is for admins of the tenant (not viewing as a user); this view "
               "shows the preview only.")
elif total:
    confirm = st.checkbox(f"I understand: purge deletes these {total:,} rows of tenant "
                          f"{viewer.tenant} for good (tables, files, indexes, old data files).",
                          key=f"purge-confirm-{state.actions}")
    if st.button("Purge expired rows", type="primary", disabled=not confirm):
        with st.spinner("Purging, rebuilding indexes and vacuuming ..."):
            purged = runner(viewer, data.as_of)
        state.count_action()
        state.add_result("retention", "Purged " + (
            ", ".join(f"{p.rows} {p.table}" for p in purged if p.rows)
            or "nothing (already gone)"))
        st.rerun()

st.subheader("Audit log")
if not viewer.is_analyst:
    st.caption("The audit log of purges and erasures is for analysts of the tenant; a user "
               "view does not show it.")
else:
    entries = audit_log(wb, viewer)
    if not entries:
        st.caption("No purge or erase has run for this tenant yet.")
    else:
        st.dataframe(pl.DataFrame({
            "at": [e.at for e in entries], "action": [e.action for e in entries],
            "actor": [e.actor for e in entries], "target": [e.target for e in entries],
            "counts": [", ".join(f"{k}: {v}" for k, v in sorted(e.counts.items())
                                 if isinstance(v, int) and v) for e in entries]}),
            hide_index=True)
