"""One turn replayed: user bubbles, the answer, files, and the recorded events by type.

Events render by their type: ``chat.step`` rows join the steps timeline, ``panel.*`` events are
the panels the person saw live (``panel.code``: a code block with its output), ``badge.*``
events are badges beside the answer, ``citation*`` events are links, anything else is one
compact table row. ``conv:fi:`` refs in the answer become downloads through the resolver.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import polars as pl
import streamlit as st
from PIL import Image

from app.components.events import EventGroups, badge_text, group_events, ref_mentions
from app.components.text import EVENT_TYPE_COLORS, escape_markdown, human_bytes
from app.models import FileView, MentionView, RefView, ReplayTurn
from lake.records import Attachment, Citation, Step

FileLoader = Callable[[str], bytes]
_STEP_MARKS = {"completed": ":green[:material/check_circle:]",
               "failed": ":red[:material/error:]", "started": ":blue[:material/play_circle:]"}


def status_badge(turn: ReplayTurn) -> str | None:
    """A badge when the turn did not end well, else None: the record's ``completion.status``
    (interrupted, failed), or a step that failed in a completed turn."""
    status = turn.turn.completion_status
    if status == "interrupted":
        return ":orange-badge[:material/pause_circle: interrupted before the answer]"
    if status == "failed":
        return ":red-badge[:material/error: the turn failed]"
    if any(step.status == "failed" for step in turn.parts.steps):
        return ":red-badge[:material/error: a step failed]"
    return None


def turn_view(view: ReplayTurn, load_file: FileLoader, *, key: str = "") -> None:
    """Draw a turn as a chat exchange; ``load_file`` fetches a file's bytes (by ref) only
    when its download button is pressed, through the ref resolver. ``key`` sets its widgets
    apart when several turns are drawn on one page (the same ref may appear in two)."""
    turn = view.turn
    groups = group_events(view.parts.events)
    st.caption(f"Turn {turn.ordinal} · {turn.turn_id} · {turn.started_at:%Y-%m-%d %H:%M:%S} "
               f"→ {turn.ended_at:%H:%M:%S} UTC · {turn.app} / {turn.agent} · "
               f"{turn.writer} writer · user {turn.user_id}")
    with st.chat_message("user"):
        for sub in view.parts.submissions:
            st.badge(sub.event_type, color=EVENT_TYPE_COLORS.get(sub.event_type, "gray"))
            st.markdown(escape_markdown(sub.text))
        for att in view.parts.attachments:
            _attachment(att, view.attached.get(att.ref) if att.ref else None, key)
    with st.chat_message("assistant"):
        text, _ = ref_mentions(view.answer)
        st.markdown(text)
        for mention in view.mentions:
            _mention(mention, key)
        for file_view in view.files:
            _file_card(file_view, load_file, key)
        _badges(view, groups)
    for panel in groups.panels:
        with st.container(border=True):
            title = panel.field("title") or panel.type.removeprefix("panel.")
            st.markdown(f":material/terminal: **{escape_markdown(title)}** · `{panel.at}`")
            code = panel.field("code")
            if code is not None:
                st.code(code, language=panel.field("language") or "text")
            output = panel.field("output")
            if output is not None:
                st.caption("Output")
                st.code(output, language="text")
            if code is None and output is None:
                st.code(panel.data_json, language="json")
    citations = [*view.parts.citations, *groups.citations]
    if citations:
        with st.expander(f"Citations ({len(citations)})", expanded=True):
            for c in citations:
                st.markdown(_citation(c))
    if view.parts.steps:
        with st.expander(f"Steps ({len(view.parts.steps)})", expanded=True):
            _timeline(view.parts.steps)
    if view.refs:
        with st.expander(f"Refs in this turn ({len(view.refs)})"):
            for ref in view.refs:
                _ref(ref)
    if turn.summary or turn.anchors or turn.notes:
        with st.expander("Working summary, anchors and notes"):
            if turn.summary:
                st.markdown(escape_markdown(turn.summary))
            if turn.anchors:
                st.markdown("Anchors: " + ", ".join(f"`{a}`" for a in turn.anchors))
            for note in turn.notes:
                st.markdown(f"- {escape_markdown(note)}")
    if groups.other:
        with st.expander(f"Other recorded events ({len(groups.other)})"):
            st.dataframe(pl.DataFrame(
                {"seq": [e.seq for e in groups.other],
                 "source": [e.source for e in groups.other],
                 "type": [e.type for e in groups.other], "at": [e.at for e in groups.other],
                 "data": [e.data_json for e in groups.other]}), hide_index=True)


def _ref(ref: RefView) -> None:
    """A conv:* ref the turn's text names: what it leads to, or why it leads nowhere."""
    st.markdown(f"`{ref.ref}` · {ref.status}")
    if ref.value is not None:
        st.code(ref.value, language="json")
    elif ref.reason:
        st.caption(f":material/link_off: {escape_markdown(ref.reason)}")


def _mention(mention: MentionView, key: str) -> None:
    """A download of a file the answer names by ref (resolved through the resolver)."""
    if mention.data is None:
        st.caption(f":material/link_off: {escape_markdown(mention.name)}: "
                   f"{escape_markdown(mention.error or 'cannot be resolved')}")
        return
    st.download_button(f"Download {mention.name}", data=mention.data, file_name=mention.name,
                       key=f"{key}dl-mention-{mention.ref}", on_click="ignore",
                       icon=":material/download:")


def _timeline(steps: list[Step]) -> None:
    start = steps[0].at
    for step in steps:
        mark = _STEP_MARKS.get(step.status, ":gray[:material/pending:]")
        offset = (step.at - start).total_seconds()
        detail = step_detail(step)
        detail = f" — {escape_markdown(detail)}" if detail else ""
        st.markdown(f"{mark} `+{offset:.1f} s` **{escape_markdown(step.name)}** "
                    f"{step.status}{detail}")


def step_detail(step: Step) -> str:
    """A step's detail without a restatement of its name and status ("read_file completed
    in 89 s" under a "read_file completed" line says only "in 89 s")."""
    detail = (step.detail or "").strip()
    said = f"{step.name} {step.status}"
    if detail.lower().startswith(said.lower()):
        detail = detail[len(said):].strip(" :-—,")
    elif detail.lower() in (step.name.lower(), step.status.lower()):
        detail = ""
    return detail


def image_width(data: bytes, widest: int = 480) -> int:
    """The width to show an image at: its own, at most ``widest`` pixels (a 17 px icon is
    not blown up to 480)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return max(1, min(widest, image.width))
    except (OSError, ValueError):
        return widest


def _citation(c: Citation) -> str:
    # Only web links become links; anything else (javascript:, data:) is shown as text.
    safe = c.url.startswith(("https://", "http://")) and not any(ch in c.url for ch in ")< ")
    line = (f"- [{escape_markdown(c.title)}]({c.url})" if safe
            else f"- {escape_markdown(c.title)} `{c.url}`")
    return line + (f" — {escape_markdown(c.snippet)}" if c.snippet else "")


def _attachment(att: Attachment, resolved: MentionView | None, key: str) -> None:
    with st.container(border=True):
        searchable = " · text searchable" if att.text else ""
        st.markdown(f":material/attach_file: **{escape_markdown(att.name)}** · "
                    f"{att.mime} · {human_bytes(att.size)}{searchable}")
        if resolved is None:
            st.caption("Not hosted by turnlake (no ref): nothing to download.")
        elif resolved.data is None:
            st.caption(f":material/link_off: {escape_markdown(resolved.error or '')}")
        else:
            st.download_button(f"Download {att.name}", data=resolved.data, file_name=att.name,
                               mime=att.mime, key=f"{key}dl-att-{resolved.ref}", on_click="ignore",
                               icon=":material/download:")


def _file_card(view: FileView, load_file: FileLoader, key: str) -> None:
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
        if view.data is not None and card.mime in ("image/png", "image/jpeg", "image/gif",
                                                     "image/webp"):
            st.image(view.data, caption=card.name, width=image_width(view.data))
        ref = card.ref
        data = view.data if view.data is not None else (lambda: load_file(ref))
        st.download_button(f"Download {card.name}", data=data, file_name=card.name,
                           mime=card.mime, key=f"{key}dl-{ref}", on_click="ignore")


def _badges(view: ReplayTurn, groups: EventGroups) -> None:
    parts = []
    status = status_badge(view)
    if status is not None:
        parts.append(status)
    if view.parts.usage is not None:
        u = view.parts.usage
        parts.append(f":gray-badge[tokens {u.tokens_in or 0:,} in / {u.tokens_out or 0:,} out]")
        # A recorded cost badge says the same figure: shown once, as the recorded badge.
        if u.cost_usd is not None and not any(e.type == "badge.cost" for e in groups.badges):
            parts.append(f":gray-badge[\\${u.cost_usd:.4f}]")
        if u.duration_ms is not None:
            parts.append(f":gray-badge[{u.duration_ms / 1000:.1f} s]")
    parts += [f":blue-badge[{badge_text(event)}]" for event in groups.badges]
    if view.parts.feedback is not None:
        rating = view.parts.feedback.rating
        color, mark = (("green", ":material/thumb_up:") if rating > 0 else
                       ("red", ":material/thumb_down:") if rating < 0 else
                       ("gray", ":material/thumbs_up_down:"))
        parts.append(f":{color}-badge[{mark} feedback {rating:+d}]")
        if view.parts.feedback.comment:
            parts.append(f"“{escape_markdown(view.parts.feedback.comment)}”")
    if parts:
        st.markdown(" ".join(parts))
