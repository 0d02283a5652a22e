"""A search hit as a card (title, time, role, highlighted plain-text snippet, score breakdown)
and the shown hits as an export table."""

from __future__ import annotations

import io

import polars as pl
import streamlit as st

from app.components import charts
from app.components.events import refs_as_names
from app.components.text import (
    ROLE_COLORS,
    escape_markdown,
    highlight_markdown,
    strip_markdown,
)
from app.models import HitView
from lake.search.request import GENERATORS


def rank_frame(view: HitView) -> pl.DataFrame:
    """The score breakdown as ranks: per generator, the rank of the turn's best row (null when
    the generator did not return the turn) and its score rounded to 3 significant digits
    (a generator's raw scores are on its own scale: only the rank enters the fusion)."""
    lines = view.breakdown()[:len(GENERATORS)]
    return pl.DataFrame({
        "generator": [line.component for line in lines],
        "rank": [line.rank for line in lines],
        "found": ["yes" if line.rank is not None else "not found" for line in lines],
        "score": [None if line.score is None else float(f"{line.score:.3g}")
                  for line in lines],
    }, schema={"generator": pl.String, "rank": pl.Int64, "found": pl.String,
               "score": pl.Float64})


def export_frame(hits: list[HitView]) -> pl.DataFrame:
    """Every hit as a row for CSV / JSONL / Parquet export: ids (tenant included), the agent
    and app that recorded the turn, the matched row's address, times, role, relevance, fused
    score, each generator's rank (null where it did not find the turn), title, text and the
    user and assistant snippets. Floats are rounded to 6 places: more digits say nothing and
    make a spreadsheet unreadable."""
    def rank(view: HitView, generator: str) -> int | None:
        found = view.hit.ranks.get(generator)
        return found.rank if found is not None else None

    return pl.DataFrame({
        "rank": list(range(1, len(hits) + 1)),
        "tenant": [v.hit.tenant for v in hits],
        "user_id": [v.hit.user_id for v in hits],
        "conversation_id": [v.hit.conversation_id for v in hits],
        "turn_id": [v.hit.turn_id for v in hits],
        "row_id": [v.hit.row_id for v in hits],
        "agent": [v.hit.agent for v in hits],
        "app": [v.hit.app for v in hits],
        "address": [v.hit.address for v in hits],
        "turn_at": [v.hit.turn_at.isoformat() for v in hits],
        "role": [v.hit.role for v in hits],
        "relevance": [round(v.hit.relevance, 6) for v in hits],
        "score": [round(v.hit.score, 6) for v in hits],
        **{f"{g}_rank": [rank(v, g) for v in hits] for g in GENERATORS},
        "title": [v.title for v in hits],
        "text": [v.hit.text for v in hits],
        "user_snippet": [v.hit.snippets.get("user") for v in hits],
        "assistant_snippet": [v.hit.snippets.get("assistant") for v in hits],
    }, schema_overrides={"title": pl.String, "conversation_id": pl.String, "tenant": pl.String,
                         "turn_id": pl.String, "user_id": pl.String, "turn_at": pl.String,
                         "row_id": pl.String, "role": pl.String, "text": pl.String,
                         "agent": pl.String, "app": pl.String, "address": pl.String,
                         "score": pl.Float64, "relevance": pl.Float64,
                         "user_snippet": pl.String, "assistant_snippet": pl.String,
                         **{f"{g}_rank": pl.Int64 for g in GENERATORS}})


def export_bytes(frame: pl.DataFrame, fmt: str) -> bytes:
    """The export table as CSV, JSONL or Parquet bytes."""
    if fmt == "csv":
        return frame.write_csv().encode()
    if fmt == "jsonl":
        return frame.write_ndjson().encode()
    out = io.BytesIO()
    frame.write_parquet(out)
    return out.getvalue()


def hit_card(view: HitView, query: str, index: int) -> bool:
    """Draw one hit; returns True when its "Open in Replay" button was pressed."""
    hit = view.hit
    with st.container(border=True):
        head, action = st.columns([5, 1])
        with head:
            title = escape_markdown(view.title or hit.conversation_id)
            st.markdown(f"**{index}. {title}**")
            agent = f" · {hit.agent}" if hit.agent else ""
            st.caption(f"{hit.turn_at:%Y-%m-%d %H:%M} UTC · {hit.user_id}{agent} · "
                       f"{hit.conversation_id} / {hit.turn_id} · relevance "
                       f"{hit.relevance:.2f}")
        with action:
            st.badge(hit.role, color=ROLE_COLORS.get(hit.role, "gray"))
            opened = st.button("Open in Replay", key=f"open-{index}-{hit.row_id}")
        text = strip_markdown(refs_as_names(hit.text))
        st.markdown(highlight_markdown(text, query))
        for role in ("user", "assistant"):
            snippet = strip_markdown(refs_as_names(hit.snippets.get(role) or ""))
            # The hit's own role is its text already: its snippet would repeat it.
            if snippet and role != hit.role and snippet not in text:
                st.markdown(f"*{role}:* " + highlight_markdown(snippet, query, limit=300))
        with st.expander("Ranks per generator and addresses"):
            ranks = rank_frame(view)
            left, right = st.columns([2, 3])
            left.dataframe(ranks.select(
                "generator",
                pl.col("rank").cast(pl.String).fill_null("not found"),
                pl.col("score").map_elements(lambda v: f"{v:.3g}", pl.String).fill_null("")),
                hide_index=True, column_config={
                    "rank": st.column_config.TextColumn("rank", help="1 = its best"),
                    "score": st.column_config.TextColumn(
                        "score", help="The generator's own score, on its own scale")})
            if ranks["rank"].null_count() < ranks.height:
                right.altair_chart(charts.generator_ranks(ranks))
            st.caption(f"relevance {hit.relevance:.2f} · fused {hit.fused:.4f} × lift "
                       f"{hit.lift:.3f} = score {hit.score:.4f}")
            # st.code carries a copy button: an agent or a colleague resolves these with
            # get_ref, GET /v1/refs or `turnlake ref resolve`.
            for label, address in (("matched row", hit.address), ("turn", hit.turn_address)):
                if address:
                    st.caption(label)
                    st.code(address, language=None)
    return opened
