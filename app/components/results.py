"""A search's hits as an analyst's table (one compact, sortable row a hit) and as counts by
user, app, agent, role and month."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import streamlit as st

from app.components import charts
from app.components.events import refs_as_names
from app.components.text import shorten, strip_markdown
from app.models import HitView
from lake.search.request import GENERATORS

# What the counts can be split by: a column of :func:`hits_table`.
FACETS = ("user", "app", "agent", "role", "month")
SNIPPET_CHARS = 160
ROW_PX, HEADER_PX, MAX_TABLE_PX = 35, 38, 640
# Categories a count chart shows (the rest are summed as "other").
TOP_CATEGORIES = 12
UNKNOWN = "(none)"


def _rank(view: HitView, generator: str) -> int | None:
    found = view.hit.ranks.get(generator)
    return found.rank if found is not None else None


def hits_table(hits: list[HitView]) -> pl.DataFrame:
    """One row a hit, in the service's order: its place, relevance (0-1), time, user, agent,
    app, role, month, conversation title, a plain-text snippet of the matched text (``conv:fi:``
    refs read as file names), each generator's rank (null where it did not find the turn),
    and the conversation and turn ids."""
    columns: dict[str, list[Any]] = {
        "#": list(range(1, len(hits) + 1)),
        "relevance": [round(v.hit.relevance, 3) for v in hits],
        "when": [v.hit.turn_at for v in hits],
        "user": [v.hit.user_id for v in hits],
        "agent": [v.hit.agent or UNKNOWN for v in hits],
        "app": [v.hit.app or UNKNOWN for v in hits],
        "role": [v.hit.role for v in hits],
        "month": [f"{v.hit.turn_at:%Y-%m}" for v in hits],
        "conversation": [v.title or v.hit.conversation_id for v in hits],
        "snippet": [shorten(strip_markdown(refs_as_names(v.hit.text)), SNIPPET_CHARS)
                    for v in hits],
        **{g: [_rank(v, g) for v in hits] for g in GENERATORS},
        "conversation_id": [v.hit.conversation_id for v in hits],
        "turn_id": [v.hit.turn_id for v in hits],
    }
    return pl.DataFrame(columns, schema_overrides={
        "#": pl.Int64, "relevance": pl.Float64, "user": pl.String, "agent": pl.String,
        "app": pl.String, "role": pl.String, "month": pl.String, "conversation": pl.String,
        "snippet": pl.String, "conversation_id": pl.String, "turn_id": pl.String,
        **{g: pl.Int64 for g in GENERATORS}})


def hit_counts(hits: list[HitView], by: str) -> pl.DataFrame:
    """How many of the hits fall in each ``by`` (one of :data:`FACETS`): columns ``by`` and
    ``hits``, the largest first (months in calendar order); past :data:`TOP_CATEGORIES`
    categories the rest are summed as "other"."""
    if by not in FACETS:
        raise ValueError(f"hit_counts: by must be one of {', '.join(FACETS)}, not {by!r}")
    column = hits_table(hits)[by] if hits else pl.Series(by, [], pl.String)
    counts = column.value_counts(name="hits").with_columns(pl.col("hits").cast(pl.Int64))
    if by == "month":
        return counts.sort(by)
    counts = counts.sort(["hits", by], descending=[True, False])
    if counts.height > TOP_CATEGORIES:
        rest = int(counts["hits"][TOP_CATEGORIES - 1:].sum())
        counts = pl.concat([counts.head(TOP_CATEGORIES - 1),
                            pl.DataFrame({by: ["other"], "hits": [rest]},
                                         schema=counts.schema)])
    return counts


def table_height(rows: int) -> int:
    """Pixels for a table of ``rows`` rows: every row up to a page's worth, then a scroll."""
    return min(MAX_TABLE_PX, HEADER_PX + ROW_PX * max(rows, 1) + 3)


def draw_hits_table(hits: list[HitView], key: str, on_open: Callable[[int], None]) -> None:
    """The hits as a sortable table (click a header to sort); selecting a row calls
    ``on_open`` with that hit's place in ``hits`` (the sort does not change it)."""
    table = hits_table(hits)

    def picked() -> None:
        rows = st.session_state[key].selection.rows
        if rows and rows[0] < len(hits):
            on_open(rows[0])

    rank_help = "{} rank of the turn (1 = best; empty: not found by it)"
    config: dict[str, Any] = {
        "#": st.column_config.NumberColumn("#", width=40, help="The service's order"),
        "relevance": st.column_config.ProgressColumn(
            "relevance", min_value=0.0, max_value=1.0, format="%.2f", width=90,
            help="How likely the turn is a real match, 0 to 1"),
        "when": st.column_config.DatetimeColumn("when (UTC)", format="YYYY-MM-DD HH:mm",
                                                width=140),
        "role": st.column_config.TextColumn("role", width=80),
        "snippet": st.column_config.TextColumn("snippet", width=360),
        "conversation": st.column_config.TextColumn("conversation", width=180),
        **{g: st.column_config.NumberColumn(g, width=75, help=rank_help.format(g.title()))
           for g in GENERATORS},
    }
    st.dataframe(
        table, key=key, hide_index=True, on_select=picked, selection_mode="single-row",
        height=table_height(table.height),
        column_order=["#", "relevance", "when", "user", "role", "snippet", "conversation",
                      "agent", "app", *GENERATORS],
        column_config=config)


def draw_hit_counts(hits: list[HitView]) -> None:
    """Counts of the hits by user, app, agent, role and month, one tab each; only the open
    tab's chart is drawn (the tab is in the URL as ``counts``)."""
    tabs = st.tabs([f"by {f}" for f in FACETS], key="counts", on_change="rerun",
                   bind="query-params")
    for tab, facet in zip(tabs, FACETS, strict=True):
        if tab.open:
            with tab:
                st.altair_chart(charts.counts_bar(hit_counts(hits, facet), facet, "hits",
                                                  sort=None if facet == "month" else "-x"))
