"""Altair charts of the workbench, built from the polars frames of lake.analytics."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

# The colour of a chart that draws one series.
SERIES_COLOR = "#1c7ed6"
# Pixels of a daily trend chart, axes included (a chart's height is its whole element's).
TREND_HEIGHT = 220


# The name of the per-day chart's click selection (Overview reads it back).
PICK = "pick"


def turns_per_day(frame: pl.DataFrame, group_label: str) -> alt.Chart:
    """Stacked bars of turns per day, coloured by app, agent or user; one bar and at most one
    tick per calendar day (never hourly ticks on a short window). A click selects one bar
    (its ``day_key``, ``YYYY-MM-DD``, and ``group``: the selection :data:`PICK`)."""
    data = frame.with_columns(day_key=pl.col("day").cast(pl.String))
    pick = alt.selection_point(name=PICK, fields=["day_key", "group"])
    chart: alt.Chart = alt.Chart(data).mark_bar(cursor="pointer").encode(
        x=alt.X("yearmonthdate(day):T", title="day",
                axis=alt.Axis(format="%b %d", tickCount="day", labelOverlap=True)),
        y=alt.Y("turns:Q", title="turns", axis=alt.Axis(format=",d", tickMinStep=1)),
        color=alt.Color("group:N", title=group_label),
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.35)),
        tooltip=[alt.Tooltip("day:T", format="%Y-%m-%d"),
                 alt.Tooltip("group:N", title=group_label), "turns:Q"],
    ).add_params(pick).properties(height=260)
    return chart


def counts_bar(frame: pl.DataFrame, category: str, value: str,
               colors: dict[str, str] | None = None, *, sort: str | None = "-x") -> alt.Chart:
    """Horizontal bars of a count per category (role mix, writers, feedback, hit counts), in
    one colour unless ``colors`` pins one to each category where the meaning calls for it;
    ``sort`` None keeps the frame's order (months)."""
    color: Any = (
        alt.Color(f"{category}:N", legend=None,
                  scale=alt.Scale(domain=list(colors), range=list(colors.values())))
        if colors else alt.value(SERIES_COLOR))
    chart: alt.Chart = alt.Chart(frame).mark_bar().encode(
        x=alt.X(f"{value}:Q", title=value, axis=alt.Axis(format=",d", tickMinStep=1)),
        y=alt.Y(f"{category}:N", sort=sort if sort is not None else None, title=None),
        color=color,
        tooltip=[f"{category}:N", alt.Tooltip(f"{value}:Q", format=",d")],
    ).properties(height=_band_height(frame.height))
    return chart


def table_bytes(frame: pl.DataFrame) -> alt.Chart:
    """Bytes (or rows, when bytes are unknown) per table, stacked by month."""
    measure = "bytes" if frame["bytes"].null_count() < frame.height else "rows"
    data = frame.with_columns(pl.col("month").fill_null("(all)"))
    chart: alt.Chart = alt.Chart(data).mark_bar().encode(
        x=alt.X(f"{measure}:Q", title=measure),
        y=alt.Y("table:N", title=None),
        color=alt.Color("month:N", title="month"),
        tooltip=["table:N", "month:N", "rows:Q", "bytes:Q"],
    ).properties(height=_band_height(frame['table'].n_unique()))
    return chart


def expiry_histogram(frame: pl.DataFrame) -> alt.Chart:
    """Rows expiring per coming week, one bar group per table."""
    chart: alt.Chart = alt.Chart(frame).mark_bar().encode(
        x=alt.X("week_start:T", title="week starting"),
        xOffset="table:N",
        y=alt.Y("rows:Q", title="rows expiring"),
        color=alt.Color("table:N", title="table"),
        tooltip=["week_start:T", "table:N", "rows:Q"],
    ).properties(height=260)
    return chart


def embedding_coverage(frame: pl.DataFrame) -> alt.Chart:
    """Embedded / pending / failed rows per partition, stacked."""
    long = frame.select("partition", "embedded", "pending", "failed").unpivot(
        index="partition", variable_name="status", value_name="rows")
    chart: alt.Chart = alt.Chart(long).mark_bar().encode(
        x=alt.X("rows:Q", title="search rows"),
        y=alt.Y("partition:N", title=None),
        color=alt.Color("status:N", scale=alt.Scale(
            domain=["embedded", "pending", "failed"],
            range=["#2b8a3e", "#f59f00", "#c92a2a"])),
        tooltip=["partition:N", "status:N", "rows:Q"],
    ).properties(height=_band_height(frame.height))
    return chart


def _band_height(bands: int) -> int:
    """Chart height for horizontal bars: room for each band's label."""
    return max(140, 40 * bands + 40)


def step_waterfall(frame: pl.DataFrame) -> alt.Chart:
    """A turn's steps on a time waterfall: one bar a step, from its recorded time to the next
    step's (the last one to the turn's end), in seconds from the turn's start; one colour a
    status."""
    chart: alt.Chart = alt.Chart(frame).mark_bar().encode(
        x=alt.X("start_s:Q", title="seconds from the turn's start"),
        x2="end_s:Q",
        y=alt.Y("step:N", sort=None, title=None),
        color=alt.Color("status:N", title="status", scale=alt.Scale(
            domain=["completed", "started", "failed"],
            range=["#2b8a3e", "#1c7ed6", "#c92a2a"])),
        tooltip=["step:N", "status:N", alt.Tooltip("start_s:Q", format=".1f"),
                 alt.Tooltip("end_s:Q", format=".1f")],
    ).properties(height=_band_height(frame.height))
    return chart


def daily_metric(frame: pl.DataFrame, column: str, title: str, fmt: str) -> alt.Chart:
    """One daily metric as bars in one colour, its axis in the metric's unit (``fmt`` is a
    d3 format: ``,d`` counts, ``$,.2f`` dollars, ``.1f`` seconds, ``.0%`` shares)."""
    chart: alt.Chart = alt.Chart(frame).mark_bar(color=SERIES_COLOR).encode(
        x=alt.X("yearmonthdate(day):T", title="day",
                axis=alt.Axis(format="%b %d", labelOverlap=True)),
        y=alt.Y(f"{column}:Q", title=title, axis=alt.Axis(format=fmt)),
        tooltip=[alt.Tooltip("day:T", format="%Y-%m-%d"),
                 alt.Tooltip(f"{column}:Q", title=title, format=fmt)],
    ).properties(height=TREND_HEIGHT)  # no chart title: Streamlit counts it in the height
    return chart


def duration_percentiles(frame: pl.DataFrame) -> alt.Chart:
    """p50 and p95 turn duration per day, in seconds: two lines, named in the legend."""
    long = frame.select("day", "p50_s", "p95_s").unpivot(
        index="day", variable_name="percentile", value_name="seconds").with_columns(
        pl.col("percentile").str.replace("_s", ""))
    chart: alt.Chart = alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("yearmonthdate(day):T", title="day",
                axis=alt.Axis(format="%b %d", labelOverlap=True)),
        y=alt.Y("seconds:Q", title="turn duration p50 / p95 (s)", axis=alt.Axis(format=".1f")),
        color=alt.Color("percentile:N", title=None),
        tooltip=[alt.Tooltip("day:T", format="%Y-%m-%d"), "percentile:N",
                 alt.Tooltip("seconds:Q", format=".1f")],
    ).properties(height=TREND_HEIGHT)
    return chart


def generator_ranks(frame: pl.DataFrame) -> alt.Chart:
    """A hit's rank in each generator that found it, as a dot on a log axis (1, the best, on
    the left), labelled with the rank; ``frame`` has ``generator`` and ``rank`` columns."""
    # The stems start at rank 1 (a column: an ``alt.datum`` start drew nothing in Streamlit).
    found = frame.filter(pl.col("rank").is_not_null()).with_columns(best=pl.lit(1))
    ranks = [int(r) for r in found["rank"].to_list()]
    top = max(10, max(ranks, default=1) * 2)
    base = alt.Chart(found).encode(
        y=alt.Y("generator:N", sort=frame["generator"].to_list(), title=None),
        x=alt.X("rank:Q", title="rank (1 = best, log scale)",
                scale=alt.Scale(type="log", domain=[1, top], nice=False),
                axis=alt.Axis(format="d")),
        tooltip=["generator:N", "rank:Q"])
    stem = base.mark_rule(color=SERIES_COLOR).encode(x="best:Q", x2="rank:Q")
    dots = base.mark_circle(size=90, color=SERIES_COLOR, opacity=1)
    labels = base.mark_text(align="left", dx=9).encode(text="rank:Q")
    chart: alt.Chart = (stem + dots + labels).properties(height=30 * frame.height + 40)
    return chart
