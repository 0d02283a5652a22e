"""Search: hybrid conversation search with every knob of the service, hits open in Replay."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import streamlit as st

from app.components.hits import export_bytes, export_frame, hit_card
from app.components.identity import page_context
from app.components.results import draw_hit_counts, draw_hits_table
from app.components.text import shorten
from app.models import HitView, SearchForm
from app.state import HITS_STEP, identity_params
from lake.errors import TurnlakeError
from lake.search.access import Scope
from lake.search.coverage import DEFAULT_COVERAGE_GAIN
from lake.search.named_time import DEFAULT_TIME_WEIGHT
from lake.search.neighbours import DEFAULT_NEIGHBOUR_WEIGHT
from lake.search.relevance import DEFAULT_MIN_RELEVANCE
from lake.search.request import DEFAULT_WEIGHTS
from lake.tables import DEFAULT_SEARCH_ROLES, ROLES

ANY = "(any)"
MAX_K = 200
ECHO_CHARS = 80
# Every setting lives in the URL (a link or a reload reproduces the search) and in the
# session (it is still there after a visit to Replay).
BOUND: dict[str, Any] = {"bind": "query-params", "persist_state": "session"}
LAYOUTS = ("table", "cards")
EXPORTS = {"csv": "text/csv", "jsonl": "application/jsonl",
           "parquet": "application/vnd.apache.parquet"}

ctx = page_context()
wb, viewer, state = ctx.workbench, ctx.viewer, ctx.state
st.title("Search")

# The same choices in every view: a choice that disappears when "view as user" is switched
# is reset by Streamlit, which rewrites the URL in one more history entry per widget. In a
# user view both are fixed: the user's own turns (one conversation's when its id is given).
scopes: list[Scope] = ["tenant", "user", "conversation"]
users = [ANY, *wb.users(viewer)]
scope_labels = {} if viewer.is_analyst else dict.fromkeys(scopes, "own turns")

with st.form("search-form"):
    query = st.text_input("Query", placeholder="e.g. spreadsheet shows wrong hours", key="q",
                          **BOUND)
    c1, c2, c3 = st.columns(3)
    scope = c1.selectbox("Scope", scopes, key="scope", disabled=not viewer.is_analyst,
                         format_func=lambda s: scope_labels.get(s, s), **BOUND)
    user = c2.selectbox("User", users, disabled=not viewer.is_analyst, key="user", **BOUND)
    conversation = c3.text_input(
        "Conversation id", help="Only this conversation's turns; empty = any.", key="conv",
        **BOUND)
    c1, c2, c3 = st.columns([2, 1, 1])
    roles = c1.multiselect("Roles", ROLES, default=list(DEFAULT_SEARCH_ROLES), key="roles",
                           **BOUND)
    agent = c3.text_input("Agent", placeholder="codex · claude-code · gemini-cli",
                          help="Only conversations this agent recorded; empty = any.",
                          key="agent", **BOUND)
    app_name = c3.text_input("App", help="Only conversations of this app; empty = any.",
                             key="app", **BOUND)
    when = c2.text_input("When", placeholder="last week · in March 2026 · since Monday",
                         help="A catalog phrase; leave empty for all time.", key="when", **BOUND)
    with st.expander("Generators, recency and limits"):
        g1, g2, g3, g4 = st.columns(4)
        semantic = g1.toggle("Semantic", value=True, key="semantic", **BOUND)
        semantic_w = g1.number_input("Semantic weight", 0.0, 10.0,
                                     DEFAULT_WEIGHTS["semantic"], 0.1, key="w_semantic", **BOUND)
        lexical = g2.toggle("Lexical (BM25)", value=True, key="lexical", **BOUND)
        lexical_w = g2.number_input("Lexical weight", 0.0, 10.0,
                                    DEFAULT_WEIGHTS["lexical"], 0.1, key="w_lexical", **BOUND)
        trigram = g3.toggle("Trigram", value=True, key="trigram", **BOUND)
        trigram_w = g3.number_input("Trigram weight", 0.0, 10.0,
                                    DEFAULT_WEIGHTS["trigram"], 0.1, key="w_trigram", **BOUND)
        neighbour_w = g4.number_input(
            "Neighbour weight", 0.0, 5.0, DEFAULT_NEIGHBOUR_WEIGHT, 0.1,
            help="How much a turn gains from a matching previous or next turn of its "
                 "conversation, as a share of that turn's fused score; a turn alone in its "
                 "conversation gains that share of its own; 0 = off.", key="w_neighbour", **BOUND)
        coverage_g = g4.number_input(
            "Lexical coverage gain", 0.0, 10.0, DEFAULT_COVERAGE_GAIN, 0.5,
            help="Each lexical match votes with its weight times the square of this many "
                 "times the share of the query's words the turn holds; 0 keeps the weight "
                 "fixed.", key="coverage", **BOUND)
        r1, r2, r3, r4, r5 = st.columns(5)
        half_life = r1.number_input("Half-life (days)", 0.0, 3650.0, 7.0, 1.0, key="half_life",
                                **BOUND)
        recency_w = r2.number_input("Recency weight", 0.0, 10.0, 1.0, 0.1, key="w_recency",
                                **BOUND)
        time_w = r2.number_input(
            "Named-time weight", 0.0, 20.0, DEFAULT_TIME_WEIGHT, 0.5,
            help="Turns in a time the query names (“in May 2023”, “last week”) rank up to "
                 "1 + this many times higher, less with each 3 days outside it; 0 = off.",
            key="w_time", **BOUND)
        k = r3.number_input("k (hits)", 1, MAX_K, 10, 1, key="k", **BOUND)
        cap = r4.number_input("Max per conversation", 0, 100, value=None, step=1,
                              placeholder="auto", help="0 = no cap; empty = the default",
                              key="cap", **BOUND)
        floor = r5.number_input(
            "Relevance floor", 0.0, 1.0, DEFAULT_MIN_RELEVANCE, 0.05,
            help="Hits whose relevance (0-1) is below this are left out, so a query nothing "
                 "matches finds nothing; 0 shows the nearest turns whatever they are.",
            key="floor", **BOUND)
    submitted = st.form_submit_button("Search", type="primary")

form = SearchForm(
    query=query, scope=(scope or scopes[0]) if viewer.is_analyst else (
        "conversation" if conversation.strip() else "user"),
    user_id=None if user in (None, ANY) or not viewer.is_analyst else user,
    conversation_id=conversation.strip() or None, roles=tuple(roles),
    when=when, semantic=semantic, lexical=lexical, trigram=trigram,
    semantic_weight=float(semantic_w), lexical_weight=float(lexical_w),
    trigram_weight=float(trigram_w), half_life_days=float(half_life),
    recency_weight=float(recency_w), time_weight=float(time_w), k=int(k),
    max_per_conversation=None if cap is None else int(cap), min_relevance=float(floor),
    neighbour_weight=float(neighbour_w), coverage_gain=float(coverage_g),
    agent=(agent or "").strip() or None, app=(app_name or "").strip() or None)
last = state.last_search
# A link or a reload carries the settings in the URL: run the search it names once. (Show
# more widens k, so k alone differing is no new search.)
linked = "q" in st.query_params and form.has_words() and (
    last is None or last.viewer != viewer or replace(last.form, k=0) != replace(form, k=0))
if submitted or linked:
    if not wb.warmup.ready:
        with st.spinner("Waiting for the model to finish loading (it started with the app)…"):
            wb.warmup.wait()
    try:
        state.last_search = wb.search(viewer, form)
    except TurnlakeError as exc:
        state.last_search = None
        st.error(f"Search refused: {exc}")

outcome = state.last_search


def open_in_replay(view: HitView) -> None:
    st.switch_page("screens/replay.py", query_params={
        **identity_params(viewer), "conversation": view.hit.conversation_id,
        "turn": view.hit.turn_id, "view": "conversation", "from": "search"})


if outcome is not None and outcome.viewer == viewer:
    picked = state.take_open()
    if picked is not None and picked < len(outcome.hits):
        open_in_replay(outcome.hits[picked])
    echo = shorten(outcome.query, ECHO_CHARS)
    for warning in outcome.warnings:
        st.warning(warning)
    for note in outcome.notes():
        st.info(note)
    for note in [*outcome.when_notes(), *outcome.time_notes()]:
        st.caption(note)
    if not outcome.hits:
        if outcome.form.generators_on():
            st.info(outcome.empty_state(echo))
    else:
        left, *exports = st.columns([3, 1, 1, 1], vertical_alignment="bottom")
        layout = left.segmented_control(
            "Show as", LAYOUTS, default=LAYOUTS[0], required=True, key="layout",
            format_func=str.capitalize, help="A sortable table (a row opens its turn) or a "
            "card a hit with its highlighted text.", **BOUND)
        cards = layout == "cards"
        shown = outcome.hits[:state.shown_hits] if cards else outcome.hits
        left.caption(f"{len(outcome.hits)} turns for “{echo}” in {outcome.total_ms:.0f} ms"
                     + (f" · showing {len(shown)}" if len(shown) < len(outcome.hits) else ""))
        # The export holds every hit up to k, not only those on show.
        table = export_frame(outcome.hits)
        for column, (fmt, mime) in zip(exports, EXPORTS.items(), strict=True):
            column.download_button(
                f"Export {fmt.upper() if fmt != 'parquet' else 'Parquet'}",
                partial(export_bytes, table, fmt), file_name=f"hits.{fmt}", mime=mime,
                on_click="ignore", icon=":material/download:", width="stretch",
                help=f"Export all {len(outcome.hits)} hits with ids, tenant, times, "
                     "relevance, per-generator ranks and snippets.")
        if cards:
            for i, view in enumerate(shown, start=1):
                if hit_card(view, outcome.query, i):
                    open_in_replay(view)
        else:
            st.caption("Click a column's header to sort; select a row (its left edge) to "
                       "open the turn in its conversation.")
            draw_hits_table(outcome.hits, f"hits-table-{state.table_epoch}",
                            state.request_open)
        with st.expander(f"Counts of these {len(outcome.hits)} hits by user, app, agent, "
                         "role and month", expanded=not cards):
            draw_hit_counts(outcome.hits)
        # More exist on the page already, or the service filled k and may have more.
        more = len(outcome.hits) > len(shown) or (
            len(outcome.hits) == outcome.form.k and outcome.form.k < MAX_K)
        if more and st.button(f"Show {HITS_STEP} more"):
            wanted = len(shown) + HITS_STEP
            if wanted > len(outcome.hits) and outcome.form.k < MAX_K:
                # Ask the service for that many; the form's k becomes what was asked.
                bigger = replace(outcome.form, k=min(MAX_K, wanted))
                try:
                    state.widen_search(wb.search(viewer, bigger))
                except TurnlakeError as exc:
                    st.error(f"Search refused: {exc}")
            state.show_hits(wanted)
            st.rerun()
else:
    st.caption("Type a query and press Search. Scope, roles, time and generator weights "
               "follow the CLI's `turnlake search` options.")
