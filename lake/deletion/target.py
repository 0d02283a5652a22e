"""What an erasure targets: one user, one conversation, or one turn, within a tenant.

The front ends build it from what their users give (the CLI's ``--user``/``--conversation``/
``--turn``, the HTTP routes' paths) and say their own words about a bad combination; this
class only refuses a target that is not one of the three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow.dataset as ds

from lake.errors import QueryError
from lake.refs import validate_id

TurnKey = tuple[str, str, str]  # (tenant, conversation_id, turn_id)


@dataclass(frozen=True)
class ErasureTarget:
    """What an erase removes: one user, one conversation, or one turn, within a tenant."""

    tenant: str
    user_id: str | None = None
    conversation_id: str | None = None
    turn_id: str | None = None

    def __post_init__(self) -> None:
        validate_id(self.tenant, "tenant")
        for value, what in ((self.user_id, "user_id"), (self.conversation_id, "conversation_id"),
                            (self.turn_id, "turn_id")):
            if value is not None:
                validate_id(value, what)
        if self.turn_id is not None and self.conversation_id is None:
            raise QueryError("an erased turn needs its conversation")
        if (self.user_id is None) == (self.conversation_id is None):
            raise QueryError("an erasure targets exactly one user, conversation or turn")

    @property
    def kind(self) -> str:
        """``user``, ``conversation`` or ``turn``."""
        if self.user_id is not None:
            return "user"
        return "turn" if self.turn_id is not None else "conversation"

    def describe(self) -> str:
        """``user u-ana``, ``conversation c-42`` or ``turn c-42/t-0001`` (for audit rows)."""
        if self.user_id is not None:
            return f"user {self.user_id}"
        if self.turn_id is not None:
            return f"turn {self.conversation_id}/{self.turn_id}"
        return f"conversation {self.conversation_id}"

    def sql(self) -> str:
        """The SQL predicate selecting the target's rows (ids are validated: no quotes)."""
        clauses = [f"tenant = '{self.tenant}'"]
        if self.user_id is not None:
            clauses.append(f"user_id = '{self.user_id}'")
        if self.conversation_id is not None:
            clauses.append(f"conversation_id = '{self.conversation_id}'")
        if self.turn_id is not None:
            clauses.append(f"turn_id = '{self.turn_id}'")
        return " AND ".join(clauses)

    def expression(self) -> ds.Expression:
        """The same selection as a dataset filter."""
        expr = ds.field("tenant") == self.tenant
        if self.user_id is not None:
            expr &= ds.field("user_id") == self.user_id
        if self.conversation_id is not None:
            expr &= ds.field("conversation_id") == self.conversation_id
        if self.turn_id is not None:
            expr &= ds.field("turn_id") == self.turn_id
        return expr

    def matches(self, tenant: object, user_id: object, conversation_id: object,
                turn_id: object) -> bool:
        """Whether a row with these ids belongs to the target."""
        return (tenant == self.tenant
                and (self.user_id is None or user_id == self.user_id)
                and (self.conversation_id is None or conversation_id == self.conversation_id)
                and (self.turn_id is None or turn_id == self.turn_id))

    def to_json(self) -> dict[str, str | None]:
        """JSON-ready fields (for job manifests)."""
        return {"tenant": self.tenant, "user_id": self.user_id,
                "conversation_id": self.conversation_id, "turn_id": self.turn_id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ErasureTarget:
        """Inverse of :meth:`to_json`."""
        return cls(str(data["tenant"]), user_id=data.get("user_id"),
                   conversation_id=data.get("conversation_id"), turn_id=data.get("turn_id"))
