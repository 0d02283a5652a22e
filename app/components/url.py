"""The URL's query parameters, changed in as few browser-history entries as possible.

Streamlit's browser side pushes one history entry for every query-parameter message a run
sends (``st.query_params[k] = v`` sends one each), so a run that set two parameters one after
the other made the Back button step through a half-changed URL.
"""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st
from streamlit.errors import StreamlitAPIException


def sync_query_params(wanted: Mapping[str, str | None]) -> None:
    """Bring the URL to ``wanted`` (a value: set it; None: drop the parameter), leaving the
    other parameters alone, in one message (none when the URL already says so)."""
    params = st.query_params
    sets = {k: v for k, v in wanted.items() if v is not None and params.get(k) != v}
    drops = [k for k, v in wanted.items() if v is None and k in params]
    if drops and sets:
        kept = {k: params.get_all(k) for k in params if k not in drops}
        try:
            # One message; refused when a kept parameter is bound to a widget (Search).
            params.from_dict({**kept, **sets})
            return
        except StreamlitAPIException:
            pass
    for key in drops:
        del params[key]
    if sets:
        params.update(sets)


_WANTED = "wb_url_wanted"


def want_query_params(wanted: Mapping[str, str | None]) -> None:
    """Ask for URL parameters at the end of this run (:func:`flush_query_params`): the
    sidebar's identity and a page's own parameters then go in one message, one entry."""
    pending = st.session_state.get(_WANTED)
    st.session_state[_WANTED] = {**(pending if isinstance(pending, dict) else {}), **wanted}


def flush_query_params() -> None:
    """Write what this run asked for with :func:`want_query_params` (the entrypoint calls
    it once the page has run or stopped; never before a page switch, which names its own)."""
    pending = st.session_state.pop(_WANTED, None)
    if isinstance(pending, dict) and pending:
        sync_query_params(pending)


def drop_wanted_query_params() -> None:
    """Forget what this run asked for (a page switch or rerun names its own URL)."""
    st.session_state.pop(_WANTED, None)
