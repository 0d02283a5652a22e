"""The workbench members store: add, replace, look up, list and remove, with bad input refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake.errors import LakeError, QueryError, TurnlakeError
from lake.members import MEMBERS_DIR, MemberStore


def test_add_get_replace_list_and_remove(tmp_path: Path) -> None:
    store = MemberStore(tmp_path)
    member, replaced = store.add(" Ana@Example.com ", tenant="acme", role="user", user_id="u-ana")
    assert not replaced and member.email == "ana@example.com"
    assert store.get("ANA@example.com") == member
    assert member.principal().reader().user_id == "u-ana"
    assert not member.principal().reader().analyst
    again, replaced = store.add("ana@example.com", tenant="acme", role="analyst")
    assert replaced and again.role == "analyst" and again.user_id is None
    assert again.principal().reader().analyst
    store.add("bo@example.com", tenant="globex", role="admin")
    assert [(m.email, m.tenant) for m in store.list()] == [
        ("ana@example.com", "acme"), ("bo@example.com", "globex")]
    assert store.remove("ana@example.com").role == "analyst"
    assert store.get("ana@example.com") is None
    assert [m.email for m in store.list()] == ["bo@example.com"]
    with pytest.raises(QueryError, match="no member"):
        store.remove("ana@example.com")
    # the email never appears in a blob name
    assert all("@" not in p.name for p in (tmp_path / MEMBERS_DIR).iterdir())


@pytest.mark.parametrize(("email", "kwargs", "message"), [
    ("not-an-email", {"tenant": "acme", "role": "analyst"}, "not an email"),
    ("a@b@c", {"tenant": "acme", "role": "analyst"}, "not an email"),
    ("ana@example.com", {"tenant": "acme", "role": "recorder"}, "role must be one of"),
    ("ana@example.com", {"tenant": "acme", "role": "user"}, "needs --user"),
    ("ana@example.com", {"tenant": "acme", "role": "admin", "user_id": "u-1"}, "drop --user"),
    ("ana@example.com", {"tenant": "../x", "role": "analyst"}, "tenant"),
])
def test_bad_input_is_refused_and_nothing_is_written(
        tmp_path: Path, email: str, kwargs: dict[str, str], message: str) -> None:
    store = MemberStore(tmp_path)
    with pytest.raises(TurnlakeError, match=message):
        store.add(email, **kwargs)  # type: ignore[arg-type]
    assert store.list() == []


def test_an_unreadable_record_names_its_blob(tmp_path: Path) -> None:
    store = MemberStore(tmp_path)
    store.add("ana@example.com", tenant="acme", role="analyst")
    blob = next((tmp_path / MEMBERS_DIR).iterdir())
    blob.write_text("{not json")
    with pytest.raises(LakeError, match=blob.name):
        store.get("ana@example.com")
    assert store.get("nobody") is None
