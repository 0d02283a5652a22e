"""Tables of turns whose rows open that turn in its conversation (Overview's drill-downs
and failure review)."""

from __future__ import annotations

from typing import Any

import polars as pl
import streamlit as st

from app.models import Viewer
from app.state import identity_params

_PENDING = "wb_open_turn"
_EPOCH = "wb_turn_tables_epoch"
ROW_PX, HEADER_PX, MAX_PX = 35, 38, 420


def open_picked_turn(viewer: Viewer) -> None:
    """Open the turn a row was picked for on the previous interaction (call at the top of a
    page): the whole conversation, scrolled to the turn."""
    picked = st.session_state.pop(_PENDING, None)
    if isinstance(picked, tuple) and len(picked) == 2:
        conversation_id, turn_id = picked
        st.switch_page("screens/replay.py", query_params={
            **identity_params(viewer), "conversation": conversation_id, "turn": turn_id,
            "view": "conversation", "from": "overview"})


def turn_table(frame: pl.DataFrame, name: str, *, column_order: list[str],
               column_config: dict[str, Any] | None = None) -> None:
    """``frame`` (with ``conversation_id`` and ``turn_id`` columns) as a sortable table;
    selecting a row opens that turn on the next run (:func:`open_picked_turn`)."""
    key = f"turns-{name}-{st.session_state.get(_EPOCH, 0)}"

    def picked() -> None:
        rows = st.session_state[key].selection.rows
        if rows and rows[0] < frame.height:
            row = frame.row(rows[0], named=True)
            st.session_state[_PENDING] = (row["conversation_id"], row["turn_id"])
            # A fresh (unselected) table after: coming back opens nothing by itself.
            st.session_state[_EPOCH] = st.session_state.get(_EPOCH, 0) + 1

    st.dataframe(frame, key=key, hide_index=True, on_select=picked,
                 selection_mode="single-row", column_order=column_order,
                 column_config=column_config,
                 height=min(MAX_PX, HEADER_PX + ROW_PX * max(frame.height, 1) + 3))
