"""A search hit as a card: title, time, role, highlighted text, snippets, score breakdown."""

from __future__ import annotations

import polars as pl
import streamlit as st

from app.components.text import ROLE_COLORS, escape_markdown, highlight_markdown
from app.models import HitView


def breakdown_frame(view: HitView) -> pl.DataFrame:
    """The score breakdown as a table: component, rank (generators only), score."""
    lines = view.breakdown()
    return pl.DataFrame({
        "component": [line.component for line in lines],
        "rank": [line.rank for line in lines],
        "score": [line.score for line in lines],
    }, schema={"component": pl.String, "rank": pl.Int64, "score": pl.Float64})


def hit_card(view: HitView, query: str, index: int) -> bool:
    """Draw one hit; returns True when its "Open in Replay" button was pressed."""
    hit = view.hit
    with st.container(border=True):
        head, action = st.columns([5, 1])
        with head:
            title = escape_markdown(view.title or hit.conversation_id)
            st.markdown(f"**{index}. {title}**")
            st.caption(f"{hit.turn_at:%Y-%m-%d %H:%M} UTC · {hit.user_id} · "
                       f"{hit.conversation_id} / {hit.turn_id} · score {hit.score:.4f}")
        with action:
            st.badge(hit.role, color=ROLE_COLORS.get(hit.role, "gray"))
            opened = st.button("Open in Replay", key=f"open-{index}-{hit.row_id}")
        st.markdown(highlight_markdown(hit.text, query))
        for role in ("user", "assistant"):
            snippet = hit.snippets.get(role)
            if snippet:
                st.markdown(f"*{role}:* " + highlight_markdown(snippet, query, limit=300))
        with st.expander("Score breakdown"):
            st.dataframe(breakdown_frame(view), hide_index=True)
            st.caption(f"final = rrf × lift = {hit.rrf:.5f} × {hit.lift:.4f} = "
                       f"{hit.score:.5f}")
    return opened
