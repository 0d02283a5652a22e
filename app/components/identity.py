"""The sidebar identity block and the context every page starts from."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from app.models import Viewer
from app.service import Workbench, cached_workbench
from app.state import TENANT_KEY, VIEW_AS_ON_KEY, VIEW_AS_USER_KEY, WorkbenchState
from lake.errors import TurnlakeError
from lake.refs import validate_id
from lake.settings import Settings


@dataclass(frozen=True)
class PageContext:
    """What a page works with: the shared service, who it acts as, and the session state."""

    workbench: Workbench
    viewer: Viewer
    state: WorkbenchState


def page_context() -> PageContext:
    """Draw the sidebar identity and return the page context.

    Stops the page with a clear message when the lake holds no tenant to show.
    """
    settings = Settings.from_env()
    state = WorkbenchState(st.session_state)
    try:
        workbench = cached_workbench(settings)
        tenants = workbench.tenants()
    except TurnlakeError as exc:
        st.error(f"Cannot read the lake at `{settings.lake}`: {exc}")
        st.stop()
    with st.sidebar:
        st.caption(f"Lake: `{settings.lake}`")
        if not tenants:
            st.info("No tenants yet.")
    if not tenants:
        st.info(f"The lake at `{settings.lake}` holds no conversations yet. Seed a demo with "
                f"`turnlake demo --lake {settings.lake}` or load turns with "
                f"`turnlake ingest FILES --lake {settings.lake}`, then reload this page.")
        st.stop()
    with st.sidebar:
        st.markdown("**Acting as analyst of** " + ", ".join(f"`{t}`" for t in tenants))
        tenant = st.selectbox("Tenant", tenants, key=TENANT_KEY)
        assert tenant is not None
        try:
            validate_id(tenant, "tenant")
        except TurnlakeError as exc:
            st.error(f"TURNLAKE_TENANTS names an invalid tenant: {exc}")
            st.stop()
        if st.toggle("View as user", key=VIEW_AS_ON_KEY,
                     help="Restrict every page to one user's own data, through the same "
                          "rules the service applies to that user."):
            users = workbench.users(Viewer(tenant))
            st.selectbox("User", users, key=VIEW_AS_USER_KEY)
            if state.view_as_user is None:
                st.warning(f"Tenant {tenant} has no user to view as.")
                st.stop()
        viewer = Viewer(tenant, state.view_as_user)
        st.caption(f"Reading as **{viewer.describe()}**")
    return PageContext(workbench, viewer, state)
