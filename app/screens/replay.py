"""Conversations & Replay: browse conversations, replay one turn by turn, download files.

A deep link ``?conversation=C&turn=T`` opens that turn.
"""

from __future__ import annotations

import polars as pl
import streamlit as st

from app.components.identity import page_context
from app.components.turn import turn_view
from app.state import REPLAY_CONVERSATION_KEY, REPLAY_TURN_KEY
from lake.errors import TurnlakeError

ANY = "(any)"
SORTS = {"last activity": "last_activity_at", "started": "started_at", "turns": "turn_count",
         "title": "title"}

ctx = page_context()
wb, viewer, state = ctx.workbench, ctx.viewer, ctx.state
st.title("Conversations & Replay")
state.apply_link(st.query_params.get("conversation"), st.query_params.get("turn"))

entries = wb.conversations(viewer)
listing = pl.DataFrame(
    {"conversation_id": [c.conversation_id for c in entries],
     "title": [c.title or "" for c in entries], "user_id": [c.user_id for c in entries],
     "app": [c.app for c in entries], "agent": [c.agent for c in entries],
     "started_at": [c.started_at for c in entries],
     "last_activity_at": [c.last_activity_at for c in entries],
     "turn_count": [c.turn_count for c in entries]},
    schema_overrides={"turn_count": pl.Int64})

with st.expander(f"Conversations ({listing.height})", expanded=state.replay_conversation is None):
    f1, f2, f3, f4, f5 = st.columns([3, 2, 2, 2, 2])
    text = f1.text_input("Title or id contains")
    app_pick = f2.selectbox("App", [ANY, *sorted(set(listing["app"]))])
    agent_pick = f3.selectbox("Agent", [ANY, *sorted(set(listing["agent"]))])
    user_pick = f4.selectbox("User", [ANY, *sorted(set(listing["user_id"]))])
    sort = f5.selectbox("Sort by", list(SORTS))
    shown = listing
    if text:
        needle = text.lower()
        shown = shown.filter(pl.col("title").str.to_lowercase().str.contains(needle, literal=True)
                             | pl.col("conversation_id").str.contains(needle, literal=True))
    for column, pick in (("app", app_pick), ("agent", agent_pick), ("user_id", user_pick)):
        if pick != ANY:
            shown = shown.filter(pl.col(column) == pick)
    shown = shown.sort(SORTS[sort], descending=sort != "title")
    st.dataframe(shown, hide_index=True, height=260)

titles = dict(zip(listing["conversation_id"], listing["title"], strict=True))
options = shown["conversation_id"].to_list()
if state.replay_conversation and state.replay_conversation not in options:
    options.insert(0, state.replay_conversation)  # a deep link outside the filtered list
if not options:
    st.info("No conversation to show: the filters match none, or this view has none.")
    st.stop()
cid = st.selectbox("Conversation", options, key=REPLAY_CONVERSATION_KEY,
                   on_change=state.forget_turn,
                   format_func=lambda c: f"{titles.get(c) or '(untitled)'} · {c}")
assert cid is not None
try:
    turns = wb.turns(viewer, cid)
except TurnlakeError as exc:
    st.error(f"Cannot open conversation {cid}: {exc}")
    st.stop()
if not turns:
    st.warning(f"Conversation {cid} has no live turn (it may have expired).")
    st.stop()

turn_ids = [t.turn_id for t in turns]
if state.replay_turn not in turn_ids:
    if state.replay_turn is not None:
        st.warning(f"Turn {state.replay_turn} is not a live turn of {cid}; showing the first.")
    state.select_turn(turn_ids[0])
previews = {t.turn_id: f"#{t.ordinal} · {t.started_at:%Y-%m-%d %H:%M} · "
                       f"{t.first_user_message[:60]}" for t in turns}
back, pick, forward = st.columns([1, 6, 1], vertical_alignment="bottom")
back.button("◀ Previous", on_click=state.step_turn, args=(turn_ids, -1),
            disabled=state.replay_turn == turn_ids[0])
tid = pick.selectbox("Turn", turn_ids, key=REPLAY_TURN_KEY, format_func=previews.__getitem__)
forward.button("Next ▶", on_click=state.step_turn, args=(turn_ids, 1),
               disabled=state.replay_turn == turn_ids[-1])
assert tid is not None
st.query_params.from_dict({"conversation": cid, "turn": tid})
state.mark_link(cid, tid)

try:
    turn = wb.replay(viewer, cid, tid)
except TurnlakeError as exc:
    st.error(f"Cannot replay turn {cid}/{tid}: {exc}")
    st.stop()
st.subheader(turn.title or cid)
turn_view(turn, lambda ref: wb.file_bytes(viewer, ref))
