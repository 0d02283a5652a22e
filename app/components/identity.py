"""The sidebar (page links, identity, service state) and the context every page starts from.

The sidebar is drawn by the entrypoint, ``app/main.py``, on every run: Streamlit keeps the
state of the entrypoint's widgets across page changes, where a page script's widgets would be
reset. Pages read the identity back through :func:`page_context`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.navigation.page import StreamlitPage

from app.access import Access
from app.components.signin import sign_out_button
from app.components.url import want_query_params
from app.models import Viewer
from app.service import Warmup, Workbench, cached_workbench
from app.state import (
    TENANT_KEY,
    URL_AS_USER,
    URL_TENANT,
    VIEW_AS_ON_KEY,
    VIEW_AS_USER_KEY,
    WorkbenchState,
)
from lake.errors import TurnlakeError
from lake.refs import validate_id
from lake.settings import Settings


@dataclass(frozen=True)
class PageContext:
    """What a page works with: the shared service, who it acts as, and the session state."""

    workbench: Workbench
    viewer: Viewer
    state: WorkbenchState


def sidebar(settings: Settings, links: Sequence[StreamlitPage], access: Access) -> None:
    """Draw the sidebar: page links, who is signed in, the tenant and view-as choice (only
    inside the signed-in tenant), the service's state, and sign-out.

    Stops the run with a clear message when the lake cannot be read or holds no tenant.
    """
    state = WorkbenchState(st.session_state)
    try:
        workbench = cached_workbench(settings)
        tenants = workbench.tenants() if access.tenant is None else [access.tenant]
    except TurnlakeError as exc:
        st.error(f"Cannot read the lake at `{settings.lake}`: {exc}")
        st.stop()
    # The page links go first, but carry the identity chosen below: a link that names it
    # needs no second history entry to put it back into the URL.
    nav = st.sidebar.container()
    with st.sidebar:
        st.divider()
        if access.method == "local":
            st.warning("**Local demo mode**: no sign-in; whoever reaches this address acts as "
                       "admin of every tenant. Keep it on 127.0.0.1.",
                       icon=":material/lock_open:")
        else:
            st.markdown(f"**Signed in** as {access.describe()}")
        st.caption(f"Lake: `{settings.lake}`")
    if not tenants:
        _links(nav, links, {})
        st.sidebar.info("No tenants yet.")
        st.info(f"The lake at `{settings.lake}` holds no conversations yet. Seed a demo with "
                f"`turnlake demo --lake {settings.lake}` or load turns with "
                f"`turnlake ingest FILES --lake {settings.lake}`, then reload this page.")
        st.stop()
    for tenant in tenants:
        try:
            validate_id(tenant, "tenant")
        except TurnlakeError as exc:
            st.error(f"TURNLAKE_TENANTS names an invalid tenant: {exc}")
            st.stop()
    state.keep_identity()
    if access.may_view_as:
        state.apply_url_identity(st.query_params.to_dict(), tenants)
    if state.tenant not in tenants:
        st.session_state[TENANT_KEY] = tenants[0]
    with st.sidebar:
        viewer = _choose_viewer(workbench, state, tenants, access)
        st.caption(f"Reading as **{viewer.describe()}**")
        _service_state(workbench.warmup)
        sign_out_button(access)
    params = state.enter(viewer)
    _links(nav, links, params)
    # The identity into the URL in one message (keeping a page's own keys), but not on a
    # first visit whose URL names none and whose view is the default one: that would add a
    # history entry (Back) for nothing.
    default = Viewer(tenants[0], None if access.may_view_as else access.user_id,
                     admin=access.may_admin)
    if URL_TENANT in st.query_params or viewer != default:
        want_query_params({URL_TENANT: params[URL_TENANT],
                           URL_AS_USER: params.get(URL_AS_USER)})


def _links(nav: DeltaGenerator, links: Sequence[StreamlitPage],
           params: dict[str, str]) -> None:
    with nav:
        for link in links:
            st.page_link(link, query_params=params or None)


def _choose_viewer(workbench: Workbench, state: WorkbenchState, tenants: list[str],
                   access: Access) -> Viewer:
    """The tenant and view-as widgets of an analyst or admin; a user's fixed identity."""
    if not access.may_view_as:
        assert access.tenant is not None and access.user_id is not None
        return Viewer(access.tenant, access.user_id)
    if access.method == "local":
        st.markdown("**Acting as admin of** " + ", ".join(f"`{t}`" for t in tenants))
    tenant = st.selectbox("Tenant", tenants, key=TENANT_KEY, on_change=state.identity_touched,
                          disabled=len(tenants) == 1)
    assert tenant is not None
    as_user = None
    if st.toggle("View as user", key=VIEW_AS_ON_KEY, on_change=state.identity_touched,
                 help="Restrict every page to one user's own data, through the same "
                      "rules the service applies to that user."):
        users = workbench.users(Viewer(tenant))
        state.settle_user(users)
        if not users:
            st.warning(f"Tenant {tenant} has no user to view as.")
            st.stop()
        as_user = st.selectbox("User", users, key=VIEW_AS_USER_KEY,
                               on_change=state.identity_touched)
    return Viewer(tenant, as_user, admin=access.may_admin)


def _service_state(warmup: Warmup) -> None:
    if warmup.ready:
        st.caption(warmup.describe())
        return
    _loading(warmup)


@st.fragment(run_every=1.0)
def _loading(warmup: Warmup) -> None:
    if warmup.ready:
        st.rerun()  # the whole app: the page drops its loading state
    st.info(f":material/hourglass_top: {warmup.describe()}")


def start_warmup(settings: Settings) -> None:
    """Start loading the model, tables and indexes in the background (once per service)."""
    cached_workbench(settings).warmup.start()


def page_context() -> PageContext:
    """The context of the page being drawn; shows (once) the notes the identity change left,
    e.g. a conversation of another user that was closed."""
    state = WorkbenchState(st.session_state)
    viewer = state.viewer
    if viewer is None:  # the entrypoint always sets it before a page runs
        st.error("No identity chosen: open the workbench from its start page.")
        st.stop()
    for note in state.take_notes():
        st.info(note, icon=":material/info:")
    return PageContext(cached_workbench(Settings.from_env()), viewer, state)
