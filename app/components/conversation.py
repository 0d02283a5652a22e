"""A whole conversation in one scroll: every turn (a page of them at a time) with its
submissions, answer, files, steps on a time waterfall, and its tokens, cost and duration."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import polars as pl
import streamlit as st

from app.components import charts
from app.components.turn import FileLoader, turn_view
from app.models import ReplayTurn
from lake.records import Step
from lake.search.catalog import CatalogTurn

# Turns drawn per page of a long conversation.
TURNS_PER_PAGE = 20


def page_of(turn_ids: list[str], focus: str | None) -> int:
    """The page (0-based) holding ``focus``, else the first."""
    if focus in turn_ids:
        return turn_ids.index(focus) // TURNS_PER_PAGE
    return 0


def turn_anchor(turn_id: str) -> str:
    """The HTML id of a turn's heading (a hit's link scrolls there)."""
    return f"turn-{''.join(ch if ch.isalnum() or ch == '-' else '-' for ch in turn_id)}"


def step_frame(steps: list[Step], ended_at: datetime) -> pl.DataFrame:
    """The steps as waterfall bars: each from its time to the next step's (the last to the
    turn's end), in seconds from the first step; a numbered label keeps repeats apart."""
    if not steps:
        return pl.DataFrame(schema={"step": pl.String, "status": pl.String,
                                    "start_s": pl.Float64, "end_s": pl.Float64})
    start = steps[0].at
    ends = [s.at for s in steps[1:]] + [max(ended_at, steps[-1].at)]
    return pl.DataFrame({
        "step": [f"{i}. {s.name}" for i, s in enumerate(steps, start=1)],
        "status": [s.status for s in steps],
        "start_s": [(s.at - start).total_seconds() for s in steps],
        "end_s": [max((e - start).total_seconds(), (s.at - start).total_seconds() + 0.05)
                  for s, e in zip(steps, ends, strict=True)],
    })


def conversation_view(turns: list[CatalogTurn], page: int,
                      replay: Callable[[str], ReplayTurn], load_file: FileLoader, *,
                      focus: str | None = None, focus_label: str = "from the search") -> None:
    """Draw one page of a conversation's turns, ``replay`` rebuilding each; scrolls to
    ``focus`` (a turn id on this page) once drawn and marks it with ``focus_label``."""
    chunk = turns[page * TURNS_PER_PAGE:(page + 1) * TURNS_PER_PAGE]
    for turn in chunk:
        view = replay(turn.turn_id)
        marker = f" :orange-badge[{focus_label}]" if turn.turn_id == focus else ""
        st.subheader(f"#{turn.ordinal} · {turn.started_at:%Y-%m-%d %H:%M}{marker}",
                     anchor=turn_anchor(turn.turn_id))
        turn_view(view, load_file, key=f"{turn.turn_id}-")
        if view.parts.steps:
            st.altair_chart(charts.step_waterfall(
                step_frame(view.parts.steps, view.turn.ended_at)))
        st.divider()
    if focus is not None and any(t.turn_id == focus for t in chunk):
        _scroll_to(turn_anchor(focus))


def _scroll_to(anchor: str) -> None:
    # Streamlit has no scroll call. The anchor is made of letters, digits and "-" only
    # (turn_anchor), so the script holds nothing taken from the lake as code. The heading
    # may be drawn after the script runs: it looks for it a few times.
    st.html(
        "<script>(function find(n) { const t = document.getElementById("
        f"'{anchor}'); if (t) t.scrollIntoView({{block: 'start'}}); "
        "else if (n > 0) setTimeout(() => find(n - 1), 250); })(40);</script>",
        unsafe_allow_javascript=True)
