"""Workbench members: the principal an identity-provider sign-in (an email) acts as.

The workbench signs people in through OpenID Connect; the provider proves an email, and this
store says what that email may read: one tenant, a role (``user``, ``analyst``, ``admin``, as
for API keys) and, for a user, the user id it reads as. An email without a record may not
read anything. Records live under ``<lake>/_members/<sha256 of the email>.json`` (one blob a
member, on a local or s3:// lake), so a sign-in reads exactly one blob and a removal is seen
at the next page run.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, get_args

from lake.errors import LakeError, QueryError
from lake.keys import KeyPrincipal
from lake.location import LakeLocation, S3Config
from lake.refs import validate_id

MEMBERS_DIR = "_members"
MemberRole = Literal["user", "analyst", "admin"]
MEMBER_ROLES: tuple[MemberRole, ...] = get_args(MemberRole)
# One "@", no spaces or control characters, a dot-free local part allowed; not a full RFC 5322
# check: the provider has verified the address, this only refuses an obvious typo.
_EMAIL = re.compile(r"^[^@\s\x00-\x1f]+@[^@\s\x00-\x1f]+$")
_MAX_EMAIL = 254


def normalize_email(email: str) -> str:
    """The email as the store keys it (trimmed, lower case); QueryError when malformed."""
    text = email.strip().lower()
    if len(text) > _MAX_EMAIL or not _EMAIL.match(text):
        raise QueryError(f"{email!r} is not an email address (NAME@DOMAIN)")
    return text


@dataclass(frozen=True)
class Member:
    """One member's record: everything the workbench needs to act for that email."""

    email: str
    tenant: str
    role: MemberRole
    user_id: str | None
    added_at: str  # ISO 8601

    def principal(self) -> KeyPrincipal:
        """The member as the same principal an API key of that role would give."""
        return KeyPrincipal(name=self.email, tenant=self.tenant, role=self.role,
                            user_id=self.user_id)

    def to_bytes(self) -> bytes:
        """The record's JSON."""
        return json.dumps(asdict(self), indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Member:
        """Parse a stored record; LakeError naming the blob when it is unreadable."""
        try:
            member = cls(**json.loads(data))
        except (ValueError, TypeError) as exc:
            raise LakeError(f"member record {where} is unreadable: {exc}") from exc
        if member.role not in MEMBER_ROLES:
            raise LakeError(f"member record {where} has an unknown role {member.role!r}")
        return member


class MemberStore:
    """Add, list, remove and look up the workbench members of one lake."""

    def __init__(self, root: Path | str | LakeLocation, *, s3: S3Config | None = None) -> None:
        self._location = LakeLocation.of(root, s3)
        self._blobs = self._location.blobs

    def add(self, email: str, *, tenant: str, role: str,
            user_id: str | None = None) -> tuple[Member, bool]:
        """Add the member, or replace an existing record of that email; returns the record
        and whether one was replaced. QueryError for a bad email, tenant, role or user."""
        address = normalize_email(email)
        validate_id(tenant, "tenant")
        if role not in MEMBER_ROLES:
            raise QueryError(f"role must be one of {', '.join(MEMBER_ROLES)}, not {role!r}")
        if role == "user" and user_id is None:
            raise QueryError("a member of role user needs --user (the user it reads as)")
        if role != "user" and user_id is not None:
            raise QueryError(f"--user only narrows a member of role user: an {role} reads "
                             "every user of its tenant; drop --user (or use --role user)")
        if user_id is not None:
            validate_id(user_id, "user")
        blob = self._blob(address)
        replaced = self._blobs.exists(blob)
        member = Member(email=address, tenant=tenant, role=role, user_id=user_id,
                        added_at=datetime.now(UTC).isoformat(timespec="seconds"))
        self._blobs.write_bytes(blob, member.to_bytes())
        return member, replaced

    def get(self, email: str) -> Member | None:
        """The member of that email, or None (also for a string that is not an email)."""
        try:
            address = normalize_email(email)
        except QueryError:
            return None
        blob = self._blob(address)
        try:
            return Member.from_bytes(self._blobs.read_bytes(blob),
                                     self._location.child_uri(blob))
        except FileNotFoundError:
            return None

    def list(self) -> list[Member]:
        """Every member, by tenant then email."""
        members = [Member.from_bytes(self._blobs.read_bytes(k), self._location.child_uri(k))
                   for k in self._blobs.keys(MEMBERS_DIR) if k.endswith(".json")]
        return sorted(members, key=lambda m: (m.tenant, m.email))

    def remove(self, email: str) -> Member:
        """Remove the member; QueryError when there is none of that email."""
        member = self.get(email)
        if member is None:
            raise QueryError(f"no member with email {email.strip()!r}")
        self._blobs.delete(self._blob(member.email))
        return member

    @staticmethod
    def _blob(address: str) -> str:
        return f"{MEMBERS_DIR}/{hashlib.sha256(address.encode()).hexdigest()}.json"
