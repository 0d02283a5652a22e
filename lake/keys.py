"""API keys: who a service request acts as.

A key is ``tlk_<key id>_<secret>``. The lake keeps, under ``<lake>/_keys/<key id>.json``,
the key's name, tenant, role and user plus a random salt and ``sha256(salt + secret)``:
never the secret, which is shown once when the key is created. Authentication reads the one
record the key id names (a blob on a local or s3:// lake) and compares digests in constant
time; a malformed, unknown, revoked or wrong key all get the same ``Unauthenticated``.

Roles, each within its tenant only::

    user       reads its own user's conversations (scopes user and conversation)
    analyst    reads the whole tenant (any scope)
    recorder   records turns, reads nothing
    admin      what analyst and recorder may, and erases
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, get_args

from lake.errors import AccessDenied, LakeError, QueryError, Unauthenticated
from lake.location import LakeLocation, S3Config
from lake.refs import validate_id
from lake.search.access import Principal

KEYS_DIR = "_keys"
KEY_PREFIX = "tlk"
KeyRole = Literal["user", "analyst", "recorder", "admin"]
KEY_ROLES: tuple[KeyRole, ...] = get_args(KeyRole)
Action = Literal["read", "record", "erase"]
# What each role may do; "read" is further bounded by the principal (own user or tenant).
ALLOWED: dict[KeyRole, frozenset[Action]] = {
    "user": frozenset({"read"}),
    "analyst": frozenset({"read"}),
    "recorder": frozenset({"record"}),
    "admin": frozenset({"read", "record", "erase"}),
}
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")
_CACHE_LIMIT = 10_000
_REFUSED = "unknown, malformed or revoked API key"


@dataclass(frozen=True)
class KeyPrincipal:
    """The identity a request's key gives it: never taken from the request body."""

    name: str
    tenant: str
    role: KeyRole
    user_id: str | None = None

    def may(self, action: Action) -> bool:
        """Whether the key's role allows the action at all (its tenant bounds it further)."""
        return action in ALLOWED[self.role]

    def require(self, action: Action) -> None:
        """Raise AccessDenied unless the role allows the action."""
        if not self.may(action):
            article = "an" if self.role in ("admin", "analyst") else "a"  # not "an user"
            raise AccessDenied(f"{article} {self.role} key may not {action}")

    def reader(self) -> Principal:
        """The search/catalog principal of a key allowed to read."""
        self.require("read")
        if self.role == "user":
            assert self.user_id is not None  # create() refuses a user key without a user
            return Principal(tenant=self.tenant, user_id=self.user_id)
        return Principal(tenant=self.tenant, user_id=self.user_id, analyst=True)

    def describe(self) -> str:
        """Short text for messages and audit rows."""
        return f"key {self.name} ({self.role} of tenant {self.tenant})"


@dataclass(frozen=True)
class StoredKey:
    """One key's record in the lake: everything but the secret."""

    key_id: str
    name: str
    tenant: str
    role: KeyRole
    user_id: str | None
    salt: str  # hex
    digest: str  # hex sha256(salt + secret)
    created_at: str  # ISO 8601
    revoked_at: str | None = None

    def principal(self) -> KeyPrincipal:
        """The principal this key acts as."""
        return KeyPrincipal(name=self.name, tenant=self.tenant, role=self.role,
                            user_id=self.user_id)

    def to_bytes(self) -> bytes:
        """The record's JSON."""
        return json.dumps(asdict(self), indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> StoredKey:
        """Parse a stored record; LakeError naming the blob when it is unreadable."""
        try:
            raw = json.loads(data)
            stored = cls(**raw)
        except (ValueError, TypeError) as exc:
            raise LakeError(f"key record {where} is unreadable: {exc}") from exc
        if stored.role not in KEY_ROLES:
            raise LakeError(f"key record {where} has an unknown role {stored.role!r}")
        return stored


def _digest(salt: bytes, secret: str) -> str:
    return hashlib.sha256(salt + secret.encode()).hexdigest()


class KeyStore:
    """Create, list, revoke and check the API keys of one lake.

    ``cache_s`` > 0 keeps each key record read for that long, so a busy service does not
    read a blob per request; a revocation then takes up to ``cache_s`` to be seen.
    """

    def __init__(self, root: Path | str | LakeLocation, *, s3: S3Config | None = None,
                 cache_s: float = 0.0) -> None:
        self._location = LakeLocation.of(root, s3)
        self._blobs = self._location.blobs
        self._cache_s = cache_s
        self._cache: dict[str, tuple[float, StoredKey | None]] = {}
        self._lock = threading.Lock()

    def create(self, *, tenant: str, role: str, user_id: str | None = None,
               name: str | None = None) -> tuple[StoredKey, str]:
        """A new key: its stored record and the key itself (shown once, never stored)."""
        validate_id(tenant, "tenant")
        if role not in KEY_ROLES:
            raise QueryError(f"role must be one of {', '.join(KEY_ROLES)}, not {role!r}")
        if user_id is not None:
            validate_id(user_id, "user")
        if role == "user" and user_id is None:
            raise QueryError("a user key needs --user")
        if role in ("recorder",) and user_id is not None:
            raise QueryError("a recorder key records for any user of its tenant: drop --user")
        key_id = secrets.token_hex(8)
        name = name or f"{role}-{key_id[:8]}"
        validate_id(name, "name")
        if any(k.name == name and k.revoked_at is None for k in self.list()):
            raise QueryError(f"a key named {name} exists already")
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        stored = StoredKey(key_id=key_id, name=name, tenant=tenant, role=role,
                           user_id=user_id, salt=salt.hex(), digest=_digest(salt, secret),
                           created_at=datetime.now(UTC).isoformat(timespec="seconds"))
        self._blobs.write_bytes(self._key(key_id), stored.to_bytes())
        return stored, f"{KEY_PREFIX}_{key_id}_{secret}"

    def list(self) -> list[StoredKey]:
        """Every key record (revoked ones too), oldest first."""
        keys = [StoredKey.from_bytes(self._blobs.read_bytes(k), self._location.child_uri(k))
                for k in self._blobs.keys(KEYS_DIR) if k.endswith(".json")]
        return sorted(keys, key=lambda k: (k.created_at, k.name))

    def revoke(self, name: str) -> StoredKey:
        """Revoke the live key of that name; QueryError when there is none."""
        for stored in self.list():
            if stored.name == name and stored.revoked_at is None:
                revoked = replace(stored, revoked_at=datetime.now(UTC).isoformat(
                    timespec="seconds"))
                self._blobs.write_bytes(self._key(stored.key_id), revoked.to_bytes())
                with self._lock:
                    self._cache.pop(stored.key_id, None)
                return revoked
        raise QueryError(f"no live key named {name}")

    def authenticate(self, key: str | None) -> KeyPrincipal:
        """The principal of a key; Unauthenticated (one message for every case) otherwise."""
        if not key:
            raise Unauthenticated("an API key is required (Authorization: Bearer KEY)")
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != KEY_PREFIX or not _KEY_ID.match(parts[1]):
            raise Unauthenticated(_REFUSED)
        stored = self._record(parts[1])
        # Compared even when the record is missing, against a digest of nothing, so that an
        # unknown key id and a wrong secret take the same path.
        salt = bytes.fromhex(stored.salt) if stored else b""
        expected = stored.digest if stored else _digest(b"", "")
        if not hmac.compare_digest(_digest(salt, parts[2]), expected) or stored is None \
                or stored.revoked_at is not None:
            raise Unauthenticated(_REFUSED)
        return stored.principal()

    def _record(self, key_id: str) -> StoredKey | None:
        now = time.monotonic()
        if self._cache_s > 0:
            with self._lock:
                hit = self._cache.get(key_id)
            if hit is not None and now - hit[0] < self._cache_s:
                return hit[1]
        blob = self._key(key_id)
        try:
            stored: StoredKey | None = StoredKey.from_bytes(
                self._blobs.read_bytes(blob), self._location.child_uri(blob))
        except FileNotFoundError:
            stored = None
        if self._cache_s > 0:
            with self._lock:
                if len(self._cache) >= _CACHE_LIMIT:  # unknown ids must not grow it forever
                    self._cache.clear()
                self._cache[key_id] = (now, stored)
        return stored

    @staticmethod
    def _key(key_id: str) -> str:
        return f"{KEYS_DIR}/{key_id}.json"
