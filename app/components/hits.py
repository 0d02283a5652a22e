"""A search hit as a card (title, time, role, highlighted plain-text snippet, score breakdown)
and the shown hits as an export table."""

from __future__ import annotations

import polars as pl
import streamlit as st

from app.components.text import (
    ROLE_COLORS,
    escape_markdown,
    highlight_markdown,
    strip_markdown,
)
from app.models import HitView
from lake.search.request import GENERATORS


def breakdown_frame(view: HitView) -> pl.DataFrame:
    """The score breakdown as a table: component, rank (generators only: "not found" when
    the generator did not return the turn, blank for the fused figures), score."""
    lines = view.breakdown()
    generators = len(GENERATORS)  # the fused figures (rrf, lift, final, relevance) follow
    return pl.DataFrame({
        "component": [line.component for line in lines],
        "rank": [str(line.rank) if line.rank is not None else
                 ("not found" if i < generators else "") for i, line in enumerate(lines)],
        "score": ["" if line.score is None else repr(line.score) for line in lines],
    }, schema={"component": pl.String, "rank": pl.String, "score": pl.String})


def export_frame(hits: list[HitView]) -> pl.DataFrame:
    """The hits as rows for CSV / JSONL export: identity, time, role, score, relevance,
    title, text."""
    return pl.DataFrame({
        "rank": list(range(1, len(hits) + 1)),
        "conversation_id": [v.hit.conversation_id for v in hits],
        "turn_id": [v.hit.turn_id for v in hits],
        "user_id": [v.hit.user_id for v in hits],
        "turn_at": [v.hit.turn_at.isoformat() for v in hits],
        "role": [v.hit.role for v in hits],
        "score": [v.hit.score for v in hits],
        "relevance": [v.hit.relevance for v in hits],
        "title": [v.title for v in hits],
        "text": [v.hit.text for v in hits],
    }, schema_overrides={"title": pl.String, "conversation_id": pl.String,
                         "turn_id": pl.String, "user_id": pl.String, "turn_at": pl.String,
                         "role": pl.String, "text": pl.String, "score": pl.Float64,
                         "relevance": pl.Float64})


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
        text = strip_markdown(hit.text)
        st.markdown(highlight_markdown(text, query))
        for role in ("user", "assistant"):
            snippet = strip_markdown(hit.snippets.get(role) or "")
            # The hit's own role is its text already: its snippet would repeat it.
            if snippet and role != hit.role and snippet not in text:
                st.markdown(f"*{role}:* " + highlight_markdown(snippet, query, limit=300))
        with st.expander("Score breakdown"):
            st.dataframe(breakdown_frame(view), hide_index=True)
            st.caption(f"final = rrf × lift = {hit.rrf:.5f} × {hit.lift:.4f} = "
                       f"{hit.score:.5f}")
    return opened
