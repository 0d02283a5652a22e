"""Index health: per partition freshness, coverage, sizes, build times and the fix command."""

from __future__ import annotations

import polars as pl
import streamlit as st

from app.components import charts
from app.components.identity import page_context

ctx = page_context()
wb, viewer = ctx.workbench, ctx.viewer
st.title("Index health")
health = wb.index_health(viewer)
if not health:
    st.info(f"No indexed partition for {viewer.describe()} yet. Build the indexes with "
            "`turnlake index build`.")
    st.stop()

counts = {f: sum(1 for h in health if h.freshness == f)
          for f in ("fresh", "stale", "missing", "orphan")}
cols = st.columns(4)
for col, (name, count) in zip(cols, counts.items(), strict=True):
    col.metric(f"{name} partitions", count)

for h in health:
    if h.rebuild_command is None:
        continue
    if h.freshness == "stale":
        st.warning(f"Index of **{h.name}** is stale: built from content version "
                   f"{h.index_content_version}, the table is at {h.table_version}. Newer "
                   "rows are not searched until it is rebuilt:")
    elif h.freshness == "missing":
        st.warning(f"Partition **{h.name}** has rows but no index; search skips it. Build it:")
    else:
        st.warning(f"Index of **{h.name}** has no table rows left; rebuild to drop it:")
    st.code(h.rebuild_command, language="bash")

frame = pl.DataFrame({
    "partition": [h.name for h in health], "state": [h.freshness for h in health],
    "rows": [h.rows for h in health], "embedded": [h.embedded for h in health],
    "pending": [h.pending for h in health], "failed": [h.failed for h in health],
    "index rows": [h.index_rows for h in health],
    "index version": [h.index_content_version for h in health],
    "table version": [h.table_version for h in health],
    "index bytes": [h.index_bytes for h in health], "model": [h.model for h in health],
    "built at": [h.built_at for h in health], "build s": [h.build_seconds for h in health],
}, schema_overrides={"index rows": pl.Int64, "index version": pl.Int64,
                     "table version": pl.Int64, "index bytes": pl.Int64, "model": pl.String,
                     "built at": pl.String, "build s": pl.Float64})
st.dataframe(frame, hide_index=True)

st.subheader("Embedding coverage")
total = sum(h.rows for h in health)
embedded = sum(h.embedded for h in health)
st.caption(f"{embedded:,} of {total:,} search rows embedded"
           + (f" ({embedded / total:.1%})" if total else "")
           + ". Pending or failed rows are found by the text generators only; "
             "`turnlake embed --backfill` retries them.")
st.altair_chart(charts.embedding_coverage(frame))
