"""Who is signed in to the workbench and what they may do there.

Three ways in, chosen by ``TURNLAKE_WORKBENCH_AUTH``:

- unset (or ``signin``): a person signs in, with a turnlake API key (``turnlake keys create``)
  or, when ``.streamlit/secrets.toml`` configures a provider, through OpenID Connect
  (``st.login``) as an email the lake's members store knows (``turnlake members add``);
- ``local``: the local demo (``make run``), no sign-in, admin of every tenant of the lake;
  only ever chosen explicitly, never a fallback.

The principal is fixed exactly as ``turnlake serve`` fixes a key's: a user reads its own
conversations, an analyst its whole tenant (and may view as one of its users), an admin what
an analyst may plus purge and rebuild. It is checked again on every page run, so a revoked
key or a removed member loses access at the next one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from lake.errors import QueryError, Unauthenticated
from lake.keys import KeyPrincipal, KeyStore
from lake.members import MemberStore
from lake.settings import Settings

AUTH_ENV = "TURNLAKE_WORKBENCH_AUTH"
LOCAL = "local"
SIGNIN = "signin"
Method = Literal["local", "key", "oidc"]
Role = Literal["user", "analyst", "admin"]


@dataclass(frozen=True)
class Access:
    """The signed-in person: how they signed in, their tenant, role and (for a user) user.

    ``tenant`` is None only in the local demo, which may read every tenant of the lake.
    """

    method: Method
    who: str
    role: Role
    tenant: str | None
    user_id: str | None = None

    @property
    def may_view_as(self) -> bool:
        """Whether "view as user" is offered (analysts and admins, inside their tenant)."""
        return self.role in ("analyst", "admin")

    @property
    def may_admin(self) -> bool:
        """Whether purge, rebuild and erase are offered."""
        return self.role == "admin"

    def describe(self) -> str:
        """One line for the sidebar: who, and as what."""
        if self.method == "local":
            return "local demo (no sign-in): admin of every tenant"
        where = f"{self.role} of {self.tenant}"
        if self.user_id is not None and self.role == "user":
            where = f"user {self.user_id} of {self.tenant}"
        return f"{self.who} · {where}"


def auth_mode(env: Mapping[str, str] | None = None) -> str:
    """``local`` or ``signin`` from ``TURNLAKE_WORKBENCH_AUTH``; QueryError naming the
    variable for any other value (a typo must not open the lake)."""
    value = (env if env is not None else os.environ).get(AUTH_ENV, "").strip().lower()
    if value in ("", SIGNIN):
        return SIGNIN
    if value == LOCAL:
        return LOCAL
    raise QueryError(f"{AUTH_ENV} must be {LOCAL!r} (the local demo, no sign-in) or "
                     f"{SIGNIN!r} (the default), not {value!r}")


def local_access() -> Access:
    """The local demo's access: admin of every tenant, no sign-in."""
    return Access(method="local", who="local demo", role="admin", tenant=None)


def _from_principal(method: Method, who: str, principal: KeyPrincipal) -> Access:
    if principal.role == "recorder":
        raise Unauthenticated(f"{who} is a recorder key: it records turns and reads nothing; "
                              "sign in with a user, analyst or admin key")
    return Access(method=method, who=who, role=principal.role, tenant=principal.tenant,
                  user_id=principal.user_id if principal.role == "user" else None)


def key_access(settings: Settings, key: str) -> Access:
    """The access an API key gives; Unauthenticated when it is unknown, malformed, revoked
    or a recorder's."""
    principal = KeyStore(settings.lake, s3=settings.s3).authenticate(key.strip())
    return _from_principal("key", f"key {principal.name}", principal)


def member_access(settings: Settings, email: str | None, *,
                  verified: bool | None = None) -> Access:
    """The access of an identity-provider sign-in; Unauthenticated when the provider gave no
    email, said it is unverified, or the lake has no member of that email."""
    if not email:
        raise Unauthenticated("the identity provider gave no email for this sign-in")
    if verified is False:
        raise Unauthenticated(f"the identity provider has not verified {email}")
    member = MemberStore(settings.lake, s3=settings.s3).get(email)
    if member is None:
        raise Unauthenticated(f"{email} is not a member of this workbench: an admin adds it "
                              f"with `turnlake members add {email} --tenant T --role ROLE`")
    return _from_principal("oidc", member.email, member.principal())
