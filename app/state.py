"""Typed accessors over ``st.session_state`` and the URL: the only place that knows their keys.

Identity (tenant, view as user) lives in the sidebar widgets of the entrypoint (``app/main.py``),
whose state Streamlit keeps across page changes, and is mirrored into the URL as
``?tenant=…&as_user=…`` so that a link reopens the same view. Selections made under one
identity (the open conversation and turn, the last search) are owned by that viewer: when the
identity changes they are checked and, when they belong to another tenant or user, cleared
with a note the page shows once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from app.models import SearchOutcome, Viewer

TENANT_KEY = "wb_tenant"
VIEW_AS_ON_KEY = "wb_view_as_on"
VIEW_AS_USER_KEY = "wb_view_as_user"
_VIEWER = "wb_viewer"
_URL_IDENTITY = "wb_url_identity"
_TOUCHED = "wb_identity_touched"
_NOTES = "wb_notes"
_RESULTS = "wb_results_"
_ACTIONS = "wb_actions"
_LAST_SEARCH = "wb_last_search"
_SHOWN_HITS = "wb_shown_hits"
_OPEN_HIT = "wb_open_hit"
_TABLE_EPOCH = "wb_hits_table_epoch"
_REPLAY = "wb_replay"
_APPLIED_LINK = "wb_applied_link"
_CONVERSATION_PAGE = "wb_conversation_page"
_LIST_IN_USE = "wb_conversation_list_in_use"

URL_TENANT = "tenant"
URL_AS_USER = "as_user"
URL_CONVERSATION = "conversation"
URL_TURN = "turn"

# How many more hits "show more" reveals, and how many a search shows at first.
HITS_STEP = 20


class Session(Protocol):
    """What the state needs of ``st.session_state`` (a plain dict will do in tests)."""

    def get(self, key: str, default: Any, /) -> Any:
        """The value under ``key``, or ``default``."""

    def __setitem__(self, key: str, value: Any, /) -> None:
        """Store a value."""


@dataclass(frozen=True)
class ReplaySelection:
    """The conversation (and turn) open in Replay, with the view it was opened in."""

    owner: Viewer
    conversation_id: str
    turn_id: str | None = None
    user_id: str | None = None  # the conversation's user, once Replay has read it
    # False for the conversation Replay opens by default (the list's first), which the URL
    # does not name until the person picks something (a history entry for nothing else).
    chosen: bool = True

    def belongs_to(self, viewer: Viewer) -> bool:
        """Whether ``viewer`` may keep this selection: same tenant, and for a user view the
        conversation is that user's (when its user is not known yet: opened as that user)."""
        if viewer.tenant != self.owner.tenant:
            return False
        if viewer.as_user is None:
            return True
        known = self.user_id if self.user_id is not None else self.owner.as_user
        return known == viewer.as_user


def identity_params(viewer: Viewer) -> dict[str, str]:
    """The URL parameters that name a view: ``tenant`` and, for a user view, ``as_user``."""
    params = {URL_TENANT: viewer.tenant}
    if viewer.as_user is not None:
        params[URL_AS_USER] = viewer.as_user
    return params


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

    def apply_url_identity(self, params: Mapping[str, str], tenants: Sequence[str]) -> None:
        """Take ``?tenant=…&as_user=…`` into the sidebar widgets (call before drawing them).

        Only a URL that differs from the one last applied or written counts: a page change
        drops the query string, and that must not reset the identity. A tenant the analyst
        may not read is refused with a note, never used.
        """
        tenant, as_user = params.get(URL_TENANT) or None, params.get(URL_AS_USER) or None
        if tenant is None or self._s.get(_URL_IDENTITY, None) == (tenant, as_user):
            return
        self._s[_URL_IDENTITY] = (tenant, as_user)
        if tenant not in tenants:
            # Not echoed: a page never shows a tenant id outside the signed-in ones.
            self.note("The link names a tenant this sign-in may not read; it was ignored.")
            return
        self._s[TENANT_KEY] = tenant
        self._s[VIEW_AS_ON_KEY] = as_user is not None
        if as_user is not None:
            self._s[VIEW_AS_USER_KEY] = as_user

    def keep_identity(self) -> None:
        """Put the current identity back into the sidebar widgets' state unless the user
        changed one of them since the last run (call before drawing them).

        Streamlit may forget a widget's state, or give it back at its default, after a run
        that did not draw it: a page change clicked while the previous run was still drawing
        reset "view as" to off. A change the user made is told apart by the widgets'
        ``on_change`` callback (:meth:`identity_touched`), which Streamlit runs before the
        script; anything else that differs from the identity is a dropped state.
        """
        if self._s.get(_TOUCHED, False):
            self._s[_TOUCHED] = False
            return
        viewer = self.viewer
        if viewer is None:
            return
        self._s[TENANT_KEY] = viewer.tenant
        self._s[VIEW_AS_ON_KEY] = viewer.as_user is not None
        if viewer.as_user is not None:
            self._s[VIEW_AS_USER_KEY] = viewer.as_user

    def identity_touched(self) -> None:
        """The sidebar widgets' ``on_change``: the user changed the identity."""
        self._s[_TOUCHED] = True

    def settle_user(self, users: Sequence[str]) -> None:
        """Keep the view-as user only when the tenant has that user (before its widget is
        drawn); another tenant's user is replaced by the first one, with a note."""
        user = self._str(VIEW_AS_USER_KEY)
        if user is not None and user not in users:
            self.note(f"User {user} is not a user of tenant {self.tenant}; "
                      "the view-as choice was reset.")
            self._s[VIEW_AS_USER_KEY] = users[0] if users else None
        elif user is None and users:
            self._s[VIEW_AS_USER_KEY] = users[0]

    @property
    def viewer(self) -> Viewer | None:
        """Who the pages act as, set by the entrypoint on every run."""
        value = self._s.get(_VIEWER, None)
        return value if isinstance(value, Viewer) else None

    def enter(self, viewer: Viewer) -> dict[str, str]:
        """Make ``viewer`` the current identity: selections owned by another tenant or user
        are cleared (with a note). Returns the identity's URL parameters."""
        previous = self.viewer
        self._s[_VIEWER] = viewer
        if previous is not None and previous != viewer:
            self._drop_foreign(viewer)
        self._s[_URL_IDENTITY] = (viewer.tenant, viewer.as_user)
        return identity_params(viewer)

    def _drop_foreign(self, viewer: Viewer) -> None:
        outcome = self.last_search
        if outcome is not None and outcome.viewer != viewer:
            self.last_search = None
            self.note(f"The search for {outcome.query[:60]!r} made as "
                      f"{outcome.viewer.describe()} was cleared.")
        selection = self.replay
        if selection is not None and not selection.belongs_to(viewer):
            self._s[_REPLAY] = None
            self._s[_CONVERSATION_PAGE] = 0
            self.note(f"Conversation {selection.conversation_id}, opened as "
                      f"{selection.owner.describe()}, was closed: it is not part of "
                      f"{viewer.describe()}.")

    # -- notes ---------------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Queue a note for the next page drawn (e.g. a selection that was cleared)."""
        self._s[_NOTES] = [*(self._s.get(_NOTES, None) or []), text]

    def take_notes(self) -> list[str]:
        """The queued notes, once."""
        notes = list(self._s.get(_NOTES, None) or [])
        self._s[_NOTES] = []
        return notes

    def add_result(self, page: str, text: str) -> None:
        """Keep an action's outcome (a purge, a rebuild) for its page's next run: the page
        reruns right after the action so that every figure on it is read afresh."""
        self._s[f"{_RESULTS}{page}"] = [*(self._s.get(f"{_RESULTS}{page}", None) or []), text]

    def take_results(self, page: str) -> list[str]:
        """The page's kept outcomes, once."""
        results = list(self._s.get(f"{_RESULTS}{page}", None) or [])
        self._s[f"{_RESULTS}{page}"] = []
        return results

    @property
    def actions(self) -> int:
        """How many actions (purges, rebuilds) this session ran: part of the keys of their
        confirmation widgets, so that a finished action leaves them unticked."""
        value = self._s.get(_ACTIONS, None)
        return value if isinstance(value, int) else 0

    def count_action(self) -> None:
        """Count one more action run."""
        self._s[_ACTIONS] = self.actions + 1

    # -- search --------------------------------------------------------------------------

    @property
    def last_search(self) -> SearchOutcome | None:
        """The last search's outcome, kept so its hits survive reruns (e.g. a button click)."""
        value = self._s.get(_LAST_SEARCH, None)
        return value if isinstance(value, SearchOutcome) else None

    @last_search.setter
    def last_search(self, outcome: SearchOutcome | None) -> None:
        self._s[_LAST_SEARCH] = outcome
        # A new search shows its k hits (at most a step of them at first).
        self._s[_SHOWN_HITS] = min(HITS_STEP, outcome.form.k) if outcome else HITS_STEP

    @property
    def shown_hits(self) -> int:
        """How many of the last search's hits are on show."""
        value = self._s.get(_SHOWN_HITS, None)
        return value if isinstance(value, int) and value > 0 else HITS_STEP

    def widen_search(self, outcome: SearchOutcome) -> None:
        """Replace the last search by the same one with a larger k (the hits on show stay)."""
        self._s[_LAST_SEARCH] = outcome

    def show_hits(self, count: int) -> None:
        """Have ``count`` hits on show (fewer when the search has fewer)."""
        self._s[_SHOWN_HITS] = max(1, count)

    def request_open(self, index: int) -> None:
        """A hit of the last search picked in the results table, to open in Replay on this
        run; the table is drawn afresh (unselected) after, so that coming back from Replay
        does not open it again."""
        self._s[_OPEN_HIT] = index
        self._s[_TABLE_EPOCH] = self.table_epoch + 1

    def take_open(self) -> int | None:
        """The hit picked in the table (its place in the last search's hits), once."""
        value = self._s.get(_OPEN_HIT, None)
        self._s[_OPEN_HIT] = None
        return value if isinstance(value, int) else None

    @property
    def table_epoch(self) -> int:
        """Part of the results table's key: a new one clears its row selection."""
        value = self._s.get(_TABLE_EPOCH, None)
        return value if isinstance(value, int) else 0

    # -- conversations list --------------------------------------------------------------

    @property
    def conversation_page(self) -> int:
        """The page of the conversation list on show (0 = the most recent)."""
        value = self._s.get(_CONVERSATION_PAGE, None)
        return value if isinstance(value, int) and value >= 0 else 0

    def turn_conversation_page(self, delta: int) -> None:
        """Move the conversation list ``delta`` pages (never before the first)."""
        self._s[_CONVERSATION_PAGE] = max(0, self.conversation_page + delta)
        self._s[_LIST_IN_USE] = True

    def reset_conversation_page(self) -> None:
        """Back to the first page (the filters changed)."""
        self._s[_CONVERSATION_PAGE] = 0
        self._s[_LIST_IN_USE] = True

    @property
    def conversation_list_in_use(self) -> bool:
        """Whether the person is filtering or paging the list (it stays open meanwhile),
        until they open a conversation from it."""
        return bool(self._s.get(_LIST_IN_USE, False))

    def pick_conversation(self, conversation_id: str) -> None:
        """Open a conversation chosen in the list (which may then fold away)."""
        self.open_conversation(conversation_id)
        self._s[_LIST_IN_USE] = False

    # -- replay --------------------------------------------------------------------------

    @property
    def replay(self) -> ReplaySelection | None:
        """What is open in Replay, if anything."""
        value = self._s.get(_REPLAY, None)
        return value if isinstance(value, ReplaySelection) else None

    @property
    def replay_conversation(self) -> str | None:
        """The conversation open in Replay."""
        selection = self.replay
        return selection.conversation_id if selection else None

    @property
    def replay_turn(self) -> str | None:
        """The turn open in Replay."""
        selection = self.replay
        return selection.turn_id if selection else None

    def apply_link(self, conversation_id: str | None, turn_id: str | None) -> None:
        """Open a deep link (``?conversation=...&turn=...``) once: later reruns keep whatever
        the user picked since, until the link itself changes."""
        link = (conversation_id, turn_id)
        viewer = self.viewer
        if conversation_id is None or viewer is None or self._s.get(_APPLIED_LINK, None) == link:
            return
        self._s[_REPLAY] = ReplaySelection(viewer, conversation_id, turn_id)
        self._s[_APPLIED_LINK] = link

    def open_conversation(self, conversation_id: str, turn_id: str | None = None, *,
                          chosen: bool = True) -> None:
        """Open a conversation (at its first turn unless ``turn_id`` is given); ``chosen``
        False: opened by default, not picked by the person."""
        viewer = self.viewer
        if viewer is None:
            return
        self._s[_REPLAY] = ReplaySelection(viewer, conversation_id, turn_id, chosen=chosen)

    @property
    def replay_chosen(self) -> bool:
        """Whether the open conversation was picked (a link, the list, a turn), not opened
        by default."""
        selection = self.replay
        return selection is not None and selection.chosen

    def link_params(self) -> dict[str, str]:
        """The open turn's URL parameters, recorded as the applied link."""
        selection = self.replay
        if selection is None or selection.turn_id is None:
            return {}
        self._s[_APPLIED_LINK] = (selection.conversation_id, selection.turn_id)
        return {URL_CONVERSATION: selection.conversation_id, URL_TURN: selection.turn_id}

    def step_turn(self, turn_ids: Sequence[str], delta: int) -> None:
        """Move the open turn ``delta`` places within ``turn_ids`` (clamped to the ends)."""
        selection = self.replay
        if not turn_ids or selection is None:
            return
        current = selection.turn_id
        index = turn_ids.index(current) if current in turn_ids else 0
        self.select_turn(turn_ids[max(0, min(len(turn_ids) - 1, index + delta))], chosen=True)

    def forget_turn(self) -> None:
        """Drop the open turn (Replay opens the conversation's first)."""
        self.select_turn(None)

    def select_turn(self, turn_id: str | None, *, chosen: bool | None = None) -> None:
        """Open a turn of the current conversation; ``chosen`` True: the person picked it
        (None keeps what the selection says)."""
        selection = self.replay
        if selection is not None:
            self._s[_REPLAY] = replace(selection, turn_id=turn_id,
                                       chosen=selection.chosen if chosen is None else chosen)

    def claim(self, user_id: str) -> None:
        """Record whose conversation is open (Replay read its turns)."""
        selection = self.replay
        if selection is not None and selection.user_id != user_id:
            self._s[_REPLAY] = replace(selection, user_id=user_id)
