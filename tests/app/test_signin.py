"""Sign-in (AppTest): nothing of the lake before it; a key's or member's principal bounds every
page; purge and rebuild only for admins; revocation and sign-out end the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.access import auth_mode, key_access, member_access
from lake.errors import QueryError, Unauthenticated
from lake.keys import KeyStore
from lake.members import MemberStore
from lake.settings import Settings
from tests.app.test_pages import MAIN, PAGES, TIMEOUT
from tests.app.workbench_lake import (
    ANA,
    BEN,
    KNOWN_CONVERSATION,
    PRIVATE_CONVERSATION,
    QUERY,
    TENANT,
    SeededLake,
    seed,
)

OTHER_TENANTS = ("globex", "initech")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> SeededLake:
    """A lake of three tenants (demo data) plus the known turns of acme; its own, as the tests
    write keys and members into it."""
    return seed(tmp_path_factory.mktemp("signin") / "lake", demo_turns=60)


@pytest.fixture
def app(lake: SeededLake, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv("TURNLAKE_LAKE", str(lake.settings.lake))
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.delenv("TURNLAKE_TENANTS", raising=False)
    monkeypatch.delenv("TURNLAKE_WORKBENCH_AUTH", raising=False)
    yield AppTest.from_file(MAIN, default_timeout=TIMEOUT)


def _key(lake: SeededLake, role: str, user: str | None = None) -> str:
    return KeyStore(lake.settings.lake).create(tenant=TENANT, role=role, user_id=user)[1]


def _everything(at: AppTest) -> str:
    """Every text the run drew, widget labels and options and table cells included."""
    parts: list[str] = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning",
                 "error", "success", "code", "metric"):
        for element in at.get(kind):
            parts.append(str(getattr(element, "value", "")))
            parts.append(str(getattr(element, "label", "")))
    for box in (*at.selectbox, *at.multiselect):
        parts += [str(box.label), *(str(o) for o in box.options)]
    for frame in at.dataframe:
        parts.append(frame.value.to_csv())
    parts += [str(b.label) for b in at.button]
    return "\n".join(parts)


def _sign_in(at: AppTest, key: str) -> AppTest:
    next(t for t in at.text_input if t.label == "API key").input(key)
    return next(b for b in at.form_submit_button
                if b.label == "Sign in with key").click().run()


def test_no_page_shows_the_lake_before_sign_in(app: AppTest) -> None:
    at = app.run()
    assert not at.exception
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page
        assert [t.value for t in at.title] == ["Sign in"], page
        text = _everything(at)
        for tenant in (TENANT, *OTHER_TENANTS):
            assert tenant not in text, (page, tenant)
        assert QUERY.split()[0] not in text
        assert not at.sidebar.selectbox and not at.toggle


def test_a_wrong_or_a_recorder_key_is_refused(app: AppTest, lake: SeededLake) -> None:
    at = _sign_in(app.run(), "tlk_0123456789abcdef_nope")
    assert any("Sign-in refused: unknown, malformed or revoked API key" in e.value
               for e in at.error)
    assert [t.value for t in at.title] == ["Sign in"]
    at = _sign_in(at, _key(lake, "recorder"))
    assert any("recorder key" in e.value for e in at.error)
    assert [t.value for t in at.title] == ["Sign in"]


def test_an_analyst_key_reads_only_its_tenant_and_may_not_purge(
        app: AppTest, lake: SeededLake) -> None:
    at = _sign_in(app.run(), _key(lake, "analyst"))
    assert not at.exception and not at.error
    tenant = next(s for s in at.sidebar.selectbox if s.label == "Tenant")
    assert tenant.options == [TENANT]
    # A link naming another tenant is refused, never used.
    at.query_params = {"tenant": "globex"}
    at.run()
    assert any("may not read" in i.value for i in at.info)
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception and not at.error, page
        text = _everything(at)
        assert not [t for t in OTHER_TENANTS if t in text], page
        assert "Purge expired rows" not in text and "Rebuild" not in text
    at.switch_page("screens/search.py").run()
    next(s for s in at.selectbox if s.label == "Scope").select("tenant")
    at.text_input[0].input(QUERY)
    at = at.form_submit_button[0].click().run()
    assert at.dataframe[0].value["conversation"].iloc[0] == "Quokka workbook"  # the table
    assert not [t for t in OTHER_TENANTS if t in _everything(at)]
    # "view as user" is offered inside the tenant
    assert [t.label for t in at.sidebar.toggle] == ["View as user"]


def test_a_user_key_sees_only_that_users_conversations(app: AppTest, lake: SeededLake) -> None:
    at = _sign_in(app.run(), _key(lake, "user", ANA))
    assert not at.exception and not at.error
    assert not at.sidebar.toggle and not at.sidebar.selectbox  # no tenant, no view-as
    assert any(f"Reading as **user {ANA} of {TENANT}**" in c.value for c in at.sidebar.caption)
    at.switch_page("screens/replay.py").run()
    text = _everything(at)
    assert "Quokka workbook" in text and "Zanzibar" not in text
    # A link to Ben's conversation, or naming Ben, does not open it.
    at.query_params = {"tenant": TENANT, "as_user": BEN,
                       "conversation": PRIVATE_CONVERSATION, "turn": "t-0003"}
    at.switch_page("screens/replay.py").run()
    assert "zanzibar budget secret" not in _everything(at)
    assert any(f"Reading as **user {ANA} of {TENANT}**" in c.value for c in at.sidebar.caption)
    at.query_params = {"conversation": KNOWN_CONVERSATION, "turn": "t-0002"}
    at.switch_page("screens/replay.py").run()
    assert "April is fine" in _everything(at)
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception and not at.error, page
        assert "Purge expired rows" not in _everything(at)


def test_an_admin_key_may_purge_and_a_revoked_key_is_signed_out(
        app: AppTest, lake: SeededLake) -> None:
    stored, key = KeyStore(lake.settings.lake).create(tenant=TENANT, role="admin")
    at = _sign_in(app.run(), key)
    at.switch_page("screens/retention.py").run()
    assert [b.label for b in at.button if b.label == "Purge expired rows"]
    KeyStore(lake.settings.lake).revoke(stored.name)
    at.switch_page("screens/overview.py").run()  # the next page run
    assert [t.value for t in at.title] == ["Sign in"]
    assert any("You were signed out" in w.value for w in at.warning)
    assert TENANT not in _everything(at)


def test_sign_out_forgets_the_key_and_every_selection(app: AppTest, lake: SeededLake) -> None:
    at = _sign_in(app.run(), _key(lake, "analyst"))
    at.text_input[0].input(QUERY)
    at = at.form_submit_button[0].click().run()
    next(b for b in at.sidebar.button if b.label == "Sign out").click().run()
    assert [t.value for t in at.title] == ["Sign in"]
    assert any("You signed out" in w.value for w in at.warning)
    for name in ("wb_signin_key", "wb_last_search", "wb_viewer", "wb_tenant"):
        assert name not in at.session_state, name


def test_members_map_an_email_to_its_principal(lake: SeededLake, tmp_path: Path) -> None:
    settings = lake.settings
    MemberStore(settings.lake).add("Ana@Example.com", tenant=TENANT, role="user", user_id=ANA)
    access = member_access(settings, "ana@example.com", verified=True)
    assert (access.method, access.tenant, access.role, access.user_id) == (
        "oidc", TENANT, "user", ANA)
    assert not access.may_view_as and not access.may_admin
    with pytest.raises(Unauthenticated, match="not a member"):
        member_access(settings, "eve@example.com")
    with pytest.raises(Unauthenticated, match="not verified"):
        member_access(settings, "ana@example.com", verified=False)
    with pytest.raises(Unauthenticated, match="no email"):
        member_access(settings, None)
    MemberStore(settings.lake).remove("ana@example.com")
    with pytest.raises(Unauthenticated, match="not a member"):  # removed: gone at once
        member_access(settings, "ana@example.com")
    with pytest.raises(Unauthenticated):
        key_access(Settings(lake=tmp_path), "tlk_x")


def test_the_auth_mode_is_local_only_when_asked(app: AppTest,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert auth_mode({}) == "signin" and auth_mode({"TURNLAKE_WORKBENCH_AUTH": "LOCAL"}) == (
        "local")
    with pytest.raises(QueryError, match="TURNLAKE_WORKBENCH_AUTH must be"):
        auth_mode({"TURNLAKE_WORKBENCH_AUTH": "off"})
    monkeypatch.setenv("TURNLAKE_WORKBENCH_AUTH", "off")
    at = app.run()
    assert any("will not start" in e.value for e in at.error)
    assert TENANT not in _everything(at)
