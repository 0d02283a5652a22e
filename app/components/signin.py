"""The sign-in page and sign-out: the only thing drawn before a person has signed in.

Nothing here opens the lake's tables: a key is checked against the lake's key store and an
identity-provider email against its members store, one small blob each, on every page run.
The key is kept in the session's state only (never in the URL or a cookie): it lasts while the
browser tab keeps its session.
"""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from app.access import (
    LOCAL,
    Access,
    auth_mode,
    key_access,
    local_access,
    member_access,
)
from lake.errors import TurnlakeError, Unauthenticated
from lake.settings import Settings

KEY_STATE = "wb_signin_key"
_NOTICE = "wb_signin_notice"

Provider = tuple[str | None, str]  # (st.login's provider argument, its button label)


def oidc_providers() -> list[Provider]:
    """The identity providers ``.streamlit/secrets.toml`` configures under ``[auth]``: the
    unnamed one (``client_id`` directly under ``[auth]``) and each ``[auth.NAME]``."""
    if not st.secrets.load_if_toml_exists():
        return []
    auth = st.secrets.get("auth")
    if not isinstance(auth, Mapping):
        return []
    found: list[Provider] = []
    if "client_id" in auth:
        found.append((None, str(auth.get("provider_label", "single sign-on"))))
    for name, section in auth.items():
        if isinstance(section, Mapping) and "client_id" in section:
            found.append((str(name), str(section.get("provider_label", str(name).title()))))
    return found


def signed_in(settings: Settings) -> Access | None:
    """Who is signed in, checked afresh; None when nobody is (the caller draws
    :func:`signin_page` and stops)."""
    try:
        mode = auth_mode()
    except TurnlakeError as exc:
        st.error(f"The workbench will not start: {exc}")
        st.stop()
    if mode == LOCAL:
        return local_access()
    key = st.session_state.get(KEY_STATE)
    if isinstance(key, str) and key:
        try:
            return key_access(settings, key)
        except Unauthenticated as exc:
            _forget(f"You were signed out: {exc}.")
        except TurnlakeError as exc:
            st.error(f"Cannot read the lake's keys at `{settings.lake}`: {exc}")
            st.stop()
    if oidc_providers() and st.user.is_logged_in:
        email = st.user.get("email")
        verified = st.user.get("email_verified")
        try:
            return member_access(settings, email if isinstance(email, str) else None,
                                 verified=verified if isinstance(verified, bool) else None)
        except Unauthenticated as exc:
            st.title("Not a member of this workbench")
            st.error(str(exc))
            if st.button("Sign out", icon=":material/logout:"):
                _forget(None)
                st.logout()
            st.stop()
        except TurnlakeError as exc:
            st.error(f"Cannot read the lake's members at `{settings.lake}`: {exc}")
            st.stop()
    return None


def signin_page(settings: Settings) -> None:
    """The sign-in form: a button per identity provider, and an API key field."""
    st.title("Sign in")
    st.caption("The turnlake workbench shows a lake's conversations to signed-in people only.")
    notice = st.session_state.pop(_NOTICE, None)
    if isinstance(notice, str):
        st.warning(notice)
    for provider, label in oidc_providers():
        if st.button(f"Sign in with {label}", icon=":material/login:"):
            if provider is None:
                st.login()
            else:
                st.login(provider)
    with st.form("signin-key", clear_on_submit=True):
        key = st.text_input("API key", type="password", placeholder="tlk_…",
                            help="A user, analyst or admin key from `turnlake keys create`; "
                                 "kept for this browser session only.")
        if st.form_submit_button("Sign in with key", type="primary"):
            try:
                key_access(settings, key)
            except Unauthenticated as exc:
                st.error(f"Sign-in refused: {exc}.")
            except TurnlakeError as exc:
                st.error(f"Cannot read the lake's keys at `{settings.lake}`: {exc}")
            else:
                _forget(None)  # nothing of an earlier session carries over
                st.session_state[KEY_STATE] = key
                st.rerun()


def sign_out_button(access: Access) -> None:
    """The sidebar's sign-out (nothing in the local demo, where nobody signed in)."""
    if access.method == "local":
        return
    if st.button("Sign out", icon=":material/logout:"):
        _forget("You signed out.")
        if access.method == "oidc":
            # st.logout queues the browser's visit to /auth/logout, which deletes the identity
            # cookie: a rerun now would start a new run that drops that message (the page then
            # said "You signed out" while the cookie signed the person in again on reload)
            st.logout()
            st.stop()
        st.rerun()


def _forget(notice: str | None) -> None:
    """Drop the whole session state (the key, the identity, searches, open conversations)."""
    for name in list(st.session_state.keys()):
        del st.session_state[name]
    if notice is not None:
        st.session_state[_NOTICE] = notice
