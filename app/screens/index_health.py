"""Index health: per partition freshness, coverage, sizes, build times, and a rebuild of stale
partitions for admins (under the same index lock as the CLI)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from app.components import charts
from app.components.identity import page_context
from app.components.tables import health_table
from app.components.text import human_bytes
from app.service import index_rebuilder
from lake.errors import TurnlakeError

ctx = page_context()
wb, viewer, state = ctx.workbench, ctx.viewer, ctx.state
st.title("Index health")
for done in state.take_results("index"):
    st.success(done)
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

todo = [h for h in health if h.rebuild_command is not None]
for h in todo:
    if h.freshness == "stale":
        st.warning(f"Index of **{h.name}** is stale: built from content version "
                   f"{h.index_content_version}, the table is at {h.table_version}. Newer "
                   "rows are not searched until it is rebuilt:")
    elif h.freshness == "missing":
        st.warning(f"Partition **{h.name}** has rows but no index; search skips it. Build it:")
    else:
        st.warning(f"Index of **{h.name}** has no table rows left; rebuild to drop it:")
    st.code(h.rebuild_command, language="bash")
if todo and viewer.may_admin:
    label = f"Rebuild {len(todo)} partition{'s' if len(todo) > 1 else ''} now"
    if st.button(label, type="primary", icon=":material/build:"):
        bar = st.progress(0.0, text="Waiting for the index lock …")

        def progress(name: str, done: int, total: int) -> None:
            bar.progress(done / max(total, 1), text=f"Built {name} ({done} of {total})")

        try:
            built = index_rebuilder(wb)(viewer, [(h.tenant, h.month) for h in todo], progress)
        except TurnlakeError as exc:
            st.error(f"Rebuild failed: {exc}")
        else:
            state.add_result("index", "Rebuilt " + (", ".join(built) or "nothing (another "
                                                    "build had already made them fresh)"))
            st.rerun()
elif todo:
    st.caption("Rebuilding is for admins of the tenant (not viewing as a user); this view "
               "shows the state and the commands only.")

st.caption("*Versions*: the content-rows table version the index was built from, then "
           "that table's version now. Every commit to any partition "
           "raises the table version, so an index stays **fresh** while its own partition's "
           "data files (content rows and turn logs) are unchanged, even when the numbers "
           "differ.")
frame = pl.DataFrame({
    "partition": [h.name for h in health], "state": [h.freshness for h in health],
    "rows": [h.rows for h in health], "embedded": [h.embedded for h in health],
    "pending": [h.pending for h in health], "failed": [h.failed for h in health],
    "index rows": [h.index_rows for h in health],
    "index size": [human_bytes(h.index_bytes) for h in health],
    "built at": [(h.built_at or "-")[:16].replace("T", " ") for h in health],
    "build s": [h.build_seconds for h in health],
    # One column for both versions: the table fits a 1,400 px window without scrolling.
    "versions": [f"{'-' if h.index_content_version is None else h.index_content_version} / "
                 f"{h.table_version}" for h in health],
    "model": [h.model or "-" for h in health],
}, schema_overrides={"index rows": pl.Int64, "versions": pl.String, "model": pl.String,
                     "built at": pl.String, "build s": pl.Float64})
if not viewer.is_analyst:
    # An index serves the whole tenant: its rows, size and versions are not a user's figures.
    frame = frame.drop("index rows", "index size", "versions")
    st.caption("A user view shows the user's own rows; index sizes are the tenant's and are "
               "shown to analysts only.")
models = set(frame["model"])
if len(models) == 1:  # the usual case: one model, said once rather than in a column
    st.caption(f"Every index holds vectors of the model **{models.pop()}**.")
    frame = frame.drop("model")
small = {name: st.column_config.NumberColumn(name, format="%d", width=70)
         for name in ("rows", "embedded", "pending", "failed", "index rows")}
st.dataframe(health_table(frame), hide_index=True, width="stretch", column_config={
    **small, "state": st.column_config.TextColumn("state", width=70),
    "build s": st.column_config.NumberColumn("build s", format="%.2f", width=70),
    "versions": st.column_config.TextColumn(
        "versions", width=80, help="The content-rows table version the index was built from "
                                   "/ that table's version now")})

st.subheader("Embedding coverage")
total = sum(h.rows for h in health)
embedded = sum(h.embedded for h in health)
st.caption(f"{embedded:,} of {total:,} search rows embedded"
           + (f" ({embedded / total:.1%})" if total else "")
           + ". Pending or failed rows are found by the text generators only; "
             "`turnlake embed --backfill` retries them.")
st.altair_chart(charts.embedding_coverage(frame))
