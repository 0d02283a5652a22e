"""API keys: salted hashes in the lake, one refusal for every bad key, revocation."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lake.errors import AccessDenied, QueryError, RefError, Unauthenticated
from lake.keys import KEYS_DIR, KeyStore
from pipeline.cli import app


def test_create_stores_only_a_salted_hash(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    stored, key = keys.create(tenant="acme", role="user", user_id="u-ana", name="ana")
    files = list((tmp_path / KEYS_DIR).iterdir())
    assert [f.name for f in files] == [f"{stored.key_id}.json"]
    text = files[0].read_text()
    secret = key.split("_", 2)[2]
    assert secret not in text and key not in text
    # Two keys never share a salt, so equal secrets would not share a digest either.
    other, _ = keys.create(tenant="acme", role="user", user_id="u-ana", name="ana2")
    assert other.salt != stored.salt
    principal = keys.authenticate(key)
    assert (principal.name, principal.tenant, principal.role, principal.user_id) == (
        "ana", "acme", "user", "u-ana")


@pytest.mark.parametrize("bad", [None, "", "tlk", "tlk_zz_secret", "nope_0123456789abcdef_x",
                                 "tlk_0123456789abcdef_secret"])
def test_every_bad_key_is_refused_alike(tmp_path: Path, bad: str | None) -> None:
    keys = KeyStore(tmp_path)
    keys.create(tenant="acme", role="analyst")
    with pytest.raises(Unauthenticated):
        keys.authenticate(bad)


def test_wrong_secret_of_a_real_key_id_is_refused(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    _, key = keys.create(tenant="acme", role="analyst")
    prefix, key_id, secret = key.split("_", 2)
    with pytest.raises(Unauthenticated, match="unknown, malformed or revoked"):
        keys.authenticate(f"{prefix}_{key_id}_{secret[:-1]}x")


def test_revoke_refuses_the_key(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    _, key = keys.create(tenant="acme", role="recorder", name="rec")
    assert keys.authenticate(key).role == "recorder"
    revoked = keys.revoke("rec")
    assert revoked.revoked_at is not None
    with pytest.raises(Unauthenticated):
        keys.authenticate(key)
    with pytest.raises(QueryError, match="no live key named rec"):
        keys.revoke("rec")
    assert [k.name for k in keys.list()] == ["rec"]  # listed, as revoked


def test_a_cached_store_sees_a_revocation_after_its_cache_time(tmp_path: Path) -> None:
    long_cache, short_cache = KeyStore(tmp_path, cache_s=3600), KeyStore(tmp_path, cache_s=0.2)
    _, key = KeyStore(tmp_path).create(tenant="acme", role="analyst", name="a")
    long_cache.authenticate(key)
    short_cache.authenticate(key)
    KeyStore(tmp_path).revoke("a")
    assert long_cache.authenticate(key).name == "a"  # trusted until its cache time is up
    time.sleep(0.5)
    with pytest.raises(Unauthenticated):
        short_cache.authenticate(key)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tenant": "acme", "role": "owner"}, "role must be one of"),
    ({"tenant": "acme", "role": "user"}, "needs --user"),
    ({"tenant": "acme", "role": "recorder", "user_id": "u-ana"}, "drop --user"),
    ({"tenant": "../x", "role": "admin"}, "tenant"),
])
def test_create_refuses_bad_options(tmp_path: Path, kwargs: dict[str, str],
                                    message: str) -> None:
    with pytest.raises((QueryError, RefError), match=message):
        KeyStore(tmp_path).create(**kwargs)  # type: ignore[arg-type]


def test_names_are_unique_among_live_keys(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    keys.create(tenant="acme", role="admin", name="ops")
    with pytest.raises(QueryError, match="exists already"):
        keys.create(tenant="acme", role="admin", name="ops")
    keys.revoke("ops")
    keys.create(tenant="acme", role="admin", name="ops")


@pytest.mark.parametrize(("role", "read", "record", "erase"), [
    ("user", True, False, False), ("analyst", True, False, False),
    ("recorder", False, True, False), ("admin", True, True, True)])
def test_role_actions(tmp_path: Path, role: str, read: bool, record: bool,
                      erase: bool) -> None:
    _, key = KeyStore(tmp_path).create(tenant="acme", role=role,
                                        user_id="u-ana" if role == "user" else None)
    principal = KeyStore(tmp_path).authenticate(key)
    assert (principal.may("read"), principal.may("record"), principal.may("erase")) == (
        read, record, erase)
    if read:
        reader = principal.reader()
        assert reader.tenant == "acme" and reader.analyst == (role != "user")
    else:
        with pytest.raises(AccessDenied):
            principal.reader()


def test_keys_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    lake = str(tmp_path / "lake")
    made = runner.invoke(app, ["keys", "create", "--tenant", "acme", "--role", "user",
                               "--user", "u-ana", "--name", "ana", "--lake", lake])
    assert made.exit_code == 0, made.output
    key = made.stdout.split()[-1]
    assert KeyStore(lake).authenticate(key).user_id == "u-ana"
    listed = runner.invoke(app, ["keys", "list", "--lake", lake])
    assert "ana" in listed.stdout and key not in listed.stdout
    assert runner.invoke(app, ["keys", "revoke", "ana", "--lake", lake]).exit_code == 0
    again = runner.invoke(app, ["keys", "revoke", "ana", "--lake", lake])
    assert again.exit_code == 2 and "no live key named ana" in again.output
    bad = runner.invoke(app, ["keys", "create", "--tenant", "acme", "--role", "root",
                              "--lake", lake])
    assert bad.exit_code == 2 and "role must be one of" in bad.output
