"""One turn replayed: user bubbles, the answer, attachments, hosted files, steps, evidence."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
import streamlit as st

from app.components.text import EVENT_TYPE_COLORS, escape_markdown, human_bytes
from app.models import FileView, ReplayTurn

FileLoader = Callable[[str], bytes]


def turn_view(turn: ReplayTurn, load_file: FileLoader) -> None:
    """Draw a turn as a chat exchange; ``load_file`` fetches a large file's bytes (by ref)
    only when its download button is pressed."""
    st.caption(f"Turn {turn.ordinal} · {turn.turn_id} · {turn.started_at:%Y-%m-%d %H:%M:%S} "
               f"→ {turn.ended_at:%H:%M:%S} UTC · {turn.app} / {turn.agent} · "
               f"{turn.writer} writer · user {turn.user_id}")
    with st.chat_message("user"):
        for sub in turn.submissions:
            st.badge(sub.event_type,
                     color=EVENT_TYPE_COLORS.get(sub.event_type, "gray"))
            st.markdown(escape_markdown(sub.text))
        for att in turn.attachments:
            with st.container(border=True):
                searchable = " · text searchable" if att.has_text else ""
                st.markdown(f":material/attach_file: **{escape_markdown(att.name)}** · "
                            f"{att.mime} · {human_bytes(att.size)}{searchable}")
    with st.chat_message("assistant"):
        st.markdown(turn.answer)
        for view in turn.files:
            _file_card(view, load_file)
        _badges(turn)
    if turn.citations:
        with st.expander(f"Citations ({len(turn.citations)})", expanded=True):
            for c in turn.citations:
                # Only web links become links; anything else (javascript:, data:) is shown.
                safe = c.url.startswith(("https://", "http://")) and ")" not in c.url
                line = (f"- [{escape_markdown(c.title)}]({c.url})" if safe
                        else f"- {escape_markdown(c.title)} `{c.url}`")
                st.markdown(line + (f" — {escape_markdown(c.snippet)}" if c.snippet else ""))
    if turn.steps:
        with st.expander(f"Steps ({len(turn.steps)})"):
            for step in turn.steps:
                mark = {"completed": ":green[:material/check_circle:]",
                        "failed": ":red[:material/error:]"}.get(
                    step.status, ":gray[:material/pending:]")
                detail = f" — {escape_markdown(step.detail)}" if step.detail else ""
                st.markdown(f"{mark} `{step.at}` **{escape_markdown(step.name)}** "
                            f"{step.status}{detail}")
    if turn.summary or turn.anchors or turn.notes:
        with st.expander("Working summary, anchors and notes"):
            if turn.summary:
                st.markdown(escape_markdown(turn.summary))
            if turn.anchors:
                st.markdown("Anchors: " + ", ".join(f"`{a}`" for a in turn.anchors))
            for note in turn.notes:
                st.markdown(f"- {escape_markdown(note)}")
    if turn.events:
        with st.expander(f"Recorded events ({len(turn.events)})"):
            st.dataframe(pl.DataFrame(
                {"seq": [e.seq for e in turn.events], "source": [e.source for e in turn.events],
                 "type": [e.type for e in turn.events], "at": [e.at for e in turn.events],
                 "data": [e.data_json for e in turn.events]}), hide_index=True)


def _file_card(view: FileView, load_file: FileLoader) -> None:
    card = view.card
    with st.container(border=True):
        st.markdown(f":material/description: **{escape_markdown(card.name)}** · {card.mime} · "
                    f"{human_bytes(card.size)}")
        if card.description:
            st.caption(card.description)
        st.caption(f"`{card.ref}` · expires {card.expires_at:%Y-%m-%d}")
        if view.error is not None:
            st.warning(f"Cannot download: {view.error}")
            return
        ref = card.ref
        data = view.data if view.data is not None else (lambda: load_file(ref))
        st.download_button(f"Download {card.name}", data=data, file_name=card.name,
                           mime=card.mime, key=f"dl-{ref}", on_click="ignore")


def _badges(turn: ReplayTurn) -> None:
    parts = []
    if turn.usage is not None:
        u = turn.usage
        parts.append(f":gray-badge[tokens {u.tokens_in or 0} in / {u.tokens_out or 0} out]")
        if u.cost_usd is not None:
            parts.append(f":gray-badge[${u.cost_usd:.4f}]".replace("$", "\\$"))
        if u.duration_ms is not None:
            parts.append(f":gray-badge[{u.duration_ms / 1000:.1f} s]")
    if turn.feedback is not None:
        rating = turn.feedback.rating
        color, mark = (("green", ":material/thumb_up:") if rating > 0 else
                       ("red", ":material/thumb_down:") if rating < 0 else
                       ("gray", ":material/thumbs_up_down:"))
        parts.append(f":{color}-badge[{mark} feedback {rating:+d}]")
        if turn.feedback.comment:
            parts.append(f"“{escape_markdown(turn.feedback.comment)}”")
    if parts:
        st.markdown(" ".join(parts))
