"""Typed accessors over ``st.session_state``: the only place that knows its keys.

Widgets that need to be read or moved from elsewhere are created with the keys below, so their
values live in the session state and are read back here with their proper types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from app.models import SearchOutcome

TENANT_KEY = "wb_tenant"
VIEW_AS_ON_KEY = "wb_view_as_on"
VIEW_AS_USER_KEY = "wb_view_as_user"
REPLAY_CONVERSATION_KEY = "wb_replay_conversation"
REPLAY_TURN_KEY = "wb_replay_turn"
_LAST_SEARCH = "wb_last_search"
_APPLIED_LINK = "wb_applied_link"


class Session(Protocol):
    """What the state needs of ``st.session_state`` (a plain dict will do in tests)."""

    def get(self, key: str, default: Any, /) -> Any:
        """The value under ``key``, or ``default``."""

    def __setitem__(self, key: str, value: Any, /) -> None:
        """Store a value."""


class WorkbenchState:
    """One session's workbench state (pass ``st.session_state``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    def _str(self, key: str) -> str | None:
        value = self._s.get(key, None)
        return value if isinstance(value, str) and value else None

    # -- identity ------------------------------------------------------------------------

    @property
    def tenant(self) -> str | None:
        """The tenant chosen in the sidebar."""
        return self._str(TENANT_KEY)

    @property
    def view_as_user(self) -> str | None:
        """The user the workbench is restricted to, when "view as user" is on."""
        if not self._s.get(VIEW_AS_ON_KEY, None):
            return None
        return self._str(VIEW_AS_USER_KEY)

    # -- search --------------------------------------------------------------------------

    @property
    def last_search(self) -> SearchOutcome | None:
        """The last search's outcome, kept so its hits survive reruns (e.g. a button click)."""
        value = self._s.get(_LAST_SEARCH, None)
        return value if isinstance(value, SearchOutcome) else None

    @last_search.setter
    def last_search(self, outcome: SearchOutcome | None) -> None:
        self._s[_LAST_SEARCH] = outcome

    # -- replay --------------------------------------------------------------------------

    @property
    def replay_conversation(self) -> str | None:
        """The conversation open in Replay."""
        return self._str(REPLAY_CONVERSATION_KEY)

    @property
    def replay_turn(self) -> str | None:
        """The turn open in Replay."""
        return self._str(REPLAY_TURN_KEY)

    def apply_link(self, conversation_id: str | None, turn_id: str | None) -> None:
        """Open a deep link (``?conversation=...&turn=...``) once: later reruns keep whatever
        the user picked since, until the link itself changes."""
        link = (conversation_id, turn_id)
        if conversation_id is None or self._s.get(_APPLIED_LINK, None) == link:
            return
        self._s[REPLAY_CONVERSATION_KEY] = conversation_id
        self._s[REPLAY_TURN_KEY] = turn_id
        self._s[_APPLIED_LINK] = link

    def mark_link(self, conversation_id: str, turn_id: str) -> None:
        """Record the turn on show as the applied link (the page writes it into the URL)."""
        self._s[_APPLIED_LINK] = (conversation_id, turn_id)

    def step_turn(self, turn_ids: Sequence[str], delta: int) -> None:
        """Move the open turn ``delta`` places within ``turn_ids`` (clamped to the ends)."""
        if not turn_ids:
            return
        current = self.replay_turn
        index = turn_ids.index(current) if current in turn_ids else 0
        self._s[REPLAY_TURN_KEY] = turn_ids[max(0, min(len(turn_ids) - 1, index + delta))]

    def forget_turn(self) -> None:
        """Drop the open turn (another conversation was picked; Replay opens its first)."""
        self._s[REPLAY_TURN_KEY] = None

    def select_turn(self, turn_id: str) -> None:
        """Open a turn of the current conversation (before its picker is drawn)."""
        self._s[REPLAY_TURN_KEY] = turn_id
