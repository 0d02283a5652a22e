"""Conversations & Replay: browse conversations a page at a time, replay one turn by turn or
the whole conversation in one scroll.

A deep link ``?conversation=C&turn=T`` opens that turn (``&view=conversation``: in the whole
conversation, ``&from=search`` or ``&from=overview``: scrolled to it, with a link back).
Selections are ids held by the workbench state (never a widget's display label), owned by the
view they were made in.
"""

from __future__ import annotations

from datetime import date

import polars as pl
import streamlit as st

from app.components.conversation import TURNS_PER_PAGE, conversation_view, page_of
from app.components.identity import page_context
from app.components.text import shorten
from app.components.turn import turn_view
from app.components.url import want_query_params
from app.state import URL_CONVERSATION, URL_TURN, identity_params
from lake.errors import TurnlakeError
from lake.search.catalog import ConversationQuery, SortColumn

ANY = "(any)"
URL_VIEW, WHOLE = "view", "conversation"
URL_FROM = "from"
VIEWS = ("One turn", "Whole conversation")
PAGE_SIZE = 50
SORTS: dict[str, SortColumn] = {"last activity": "last_activity_at", "started": "started_at",
                                "turns": "turn_count", "title": "title"}

ctx = page_context()
wb, viewer, state = ctx.workbench, ctx.viewer, ctx.state
st.title("Conversations & Replay")
state.apply_link(st.query_params.get(URL_CONVERSATION), st.query_params.get(URL_TURN))



def any_day() -> None:
    """Drop the list's day filter (set by a click on an Overview bar, or picked here)."""
    st.session_state["conv_day"] = None
    state.reset_conversation_page()


facets = wb.facets(viewer)
with st.expander("Conversations", expanded=state.replay_conversation is None
                 or state.conversation_list_in_use):
    f1, f2, f3, f4, f5, f6 = st.columns([3, 2, 2, 2, 3, 2])
    text = f1.text_input("Title or id contains", on_change=state.reset_conversation_page)
    # Keyed: Overview's top tables and per-day bars open this list filtered to a user, an
    # app or an agent, and (a bar) to a day.
    app_pick = f2.selectbox("App", [ANY, *facets["app"]], key="conv_app",
                            on_change=state.reset_conversation_page)
    agent_pick = f3.selectbox("Agent", [ANY, *facets["agent"]], key="conv_agent",
                              on_change=state.reset_conversation_page)
    user_pick = f4.selectbox("User", [ANY, *facets["user_id"]], key="conv_user",
                             on_change=state.reset_conversation_page)
    day_pick = f5.date_input("Active on (UTC day)", value=None, key="conv_day",
                             on_change=state.reset_conversation_page,
                             help="Only conversations with a turn started that day")
    sort = f6.selectbox("Sort by", list(SORTS), on_change=state.reset_conversation_page)
    day = day_pick if isinstance(day_pick, date) else None
    query = ConversationQuery(
        text=text.strip(), app=None if app_pick == ANY else app_pick,
        agent=None if agent_pick == ANY else agent_pick,
        user_id=None if user_pick == ANY else user_pick, day=day, sort=SORTS[sort],
        descending=sort != "title", offset=state.conversation_page * PAGE_SIZE,
        limit=PAGE_SIZE)
    page = wb.conversation_page(viewer, query)
    entries = page.entries
    titles = wb.titles(viewer, [e.conversation_id for e in entries if not e.title])
    listing = pl.DataFrame(
        {"conversation_id": [c.conversation_id for c in entries],
         "title": [c.title or titles.get(c.conversation_id, "") for c in entries],
         "user_id": [c.user_id for c in entries], "app": [c.app for c in entries],
         "agent": [c.agent for c in entries], "started_at": [c.started_at for c in entries],
         "last_activity_at": [c.last_activity_at for c in entries],
         "turn_count": [c.turn_count for c in entries]},
        schema_overrides={"turn_count": pl.Int64, "title": pl.String,
                          "conversation_id": pl.String, "user_id": pl.String})
    last = min(query.offset + len(entries), page.total)
    on_day = f" active on {day:%Y-%m-%d} (UTC)" if day is not None else ""
    st.caption(f"Conversations {query.offset + 1 if entries else 0}–{last} of {page.total:,}"
               f"{on_day} (untitled ones are named by their first message)")
    table_key = f"conversations-{state.conversation_page}"

    def open_row() -> None:
        rows = st.session_state[table_key].selection.rows
        if rows and rows[0] < len(entries):
            state.pick_conversation(entries[rows[0]].conversation_id)

    st.dataframe(listing, hide_index=True, height=260, on_select=open_row,
                 selection_mode="single-row", key=table_key)
    p1, p2, p3, _ = st.columns([1, 1, 2, 4])
    p1.button("◀ Newer", on_click=state.turn_conversation_page, args=(-1,),
              disabled=query.offset == 0)
    p2.button("Older ▶", on_click=state.turn_conversation_page, args=(1,),
              disabled=last >= page.total)
    if day is not None:
        p3.button(f"✕ {day:%Y-%m-%d}: any day", on_click=any_day,
                  help="Drop the day filter (the other filters stay)")

options = [e.conversation_id for e in entries]
labels = dict(zip(listing["conversation_id"], listing["title"], strict=True))
current = state.replay_conversation
if current is not None and current not in options:
    options.insert(0, current)  # a deep link, or a conversation on another list page
    labels.update(wb.titles(viewer, [current]))
if not options:
    st.info("No conversation to show: the filters match none, or this view has none.")
    st.stop()
cid = st.selectbox("Conversation", options,
                   index=options.index(current) if current in options else 0,
                   format_func=lambda c: f"{labels.get(c) or '(untitled)'} · {c}")
assert cid is not None
if cid != current:
    # Nothing open yet: the list's first conversation, opened by default.
    state.open_conversation(cid, chosen=current is not None)
try:
    turns = wb.turns(viewer, cid)
except TurnlakeError as exc:
    st.error(f"Cannot open conversation {cid}: {exc}")
    st.stop()
if not turns:
    st.warning(f"Conversation {cid} has no live turn (it may have expired).")
    st.stop()
state.claim(turns[0].user_id)

turn_ids = [t.turn_id for t in turns]
if state.replay_turn not in turn_ids:
    if state.replay_turn is not None:
        st.warning(f"Turn {state.replay_turn} is not a live turn of {cid}; showing the first.")
    state.select_turn(turn_ids[0])
previews = {t.turn_id: f"#{t.ordinal} · {t.started_at:%Y-%m-%d %H:%M} · "
                       f"{shorten(t.first_user_message, 60)}" for t in turns}
back, pick, forward = st.columns([1, 6, 1], vertical_alignment="bottom")
back.button("◀ Previous", on_click=state.step_turn, args=(turn_ids, -1),
            disabled=state.replay_turn == turn_ids[0])
open_turn = state.replay_turn
tid = pick.selectbox("Turn", turn_ids, index=turn_ids.index(open_turn) if open_turn in turn_ids
                     else 0, format_func=previews.__getitem__)
forward.button("Next ▶", on_click=state.step_turn, args=(turn_ids, 1),
               disabled=state.replay_turn == turn_ids[-1])
assert tid is not None
if tid != state.replay_turn:
    state.select_turn(tid, chosen=True)
whole = st.radio("Show", VIEWS, horizontal=True,
                 index=1 if st.query_params.get(URL_VIEW) == WHOLE else 0) == VIEWS[1]
# The open turn and the view go into the URL with the identity, one history entry a change;
# not a conversation opened by default (the list's first), which would add one for nothing.
if state.replay_chosen or URL_CONVERSATION in st.query_params or whole:
    want_query_params({**state.link_params(), URL_VIEW: WHOLE if whole else None})
came_from = st.query_params.get(URL_FROM)  # "search" or "overview": scroll to the turn
if came_from == "search" and state.last_search is not None:
    st.page_link("screens/search.py", label="Back to the results",
                 icon=":material/arrow_back:", query_params=identity_params(viewer))
elif came_from == "overview":
    st.page_link("screens/overview.py", label="Back to the Overview",
                 icon=":material/arrow_back:", query_params=identity_params(viewer))


def load_file(ref: str) -> bytes:
    return wb.file_bytes(viewer, ref)


try:
    if whole:
        st.subheader(labels.get(cid) or cid)
        pages = -(-len(turns) // TURNS_PER_PAGE)
        turn_page = page_of(turn_ids, tid)
        if pages > 1:
            turn_page = st.selectbox(
                "Turns", list(range(pages)), index=turn_page,
                format_func=lambda p: f"{p * TURNS_PER_PAGE + 1}–"
                                      f"{min((p + 1) * TURNS_PER_PAGE, len(turns))} "
                                      f"of {len(turns)}") or 0
        st.caption(f"{len(turns)} turns · user {turns[0].user_id}")
        conversation_view(turns, turn_page, lambda t: wb.replay(viewer, cid, t), load_file,
                          focus=tid if came_from in ("search", "overview") else None,
                          focus_label=f"from the {came_from or 'search'}")
    else:
        turn = wb.replay(viewer, cid, tid)
        st.subheader(turn.turn.title or labels.get(cid) or cid)
        turn_view(turn, load_file)
except TurnlakeError as exc:
    st.error(f"Cannot replay conversation {cid}: {exc}")
    st.stop()
