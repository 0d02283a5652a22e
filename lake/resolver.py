"""One resolver for every ``conv:*`` address (lake.addresses): a record, a part of it, a step,
a search row, an event (JSON), or a hosted file (bytes).

Every address goes through the same checks as a file ref: the object must be in the
principal's tenant, an end user's own, and retained. An end user gets one answer for another
user's object and for none (so a refusal never tells which); an analyst, whose reads span its
tenant, gets RefNotFound for none. An object past its expiry raises RefExpired (410) until
retention purges it; after that, or after an erasure, its address answers as missing. An
address whose edition is not the turn's current one names an object ``ingest --replace``
superseded: it answers RefNotFound, naming the current record, never the successor's content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pydantic import BaseModel, Field

from lake.addresses import (
    EVENTS,
    RECORD_WHOLE,
    STEPS,
    Address,
    edition_of,
    parse_address,
    record_address,
)
from lake.errors import AccessDenied, RefError, RefExpired, RefNotFound
from lake.mentions import Mention, well_formed, written_refs
from lake.refs import parse_ref
from lake.search.access import Principal
from lake.search.materialize import FileCard, MaterializedTurn, TurnMaterializer, card_of
from lake.tables import Table

_ROW_COLUMNS = ["row_id", "role", "seq", "event_type", "batch", "ts", "turn_at", "text",
                "expires_at", "embedding_status", "embedding_sampled"]


class ResolvedRecord(BaseModel):
    """What a non-file address resolves to: the object (``value``) and where it lives."""

    address: str = Field(description="The canonical address, with the turn's edition.")
    namespace: str = Field(description="ar, tc, so, ws, su or ev.")
    kind: str = Field(description="record, completion, submissions, attachments, citations, "
                                  "steps, events, or the search row's role.")
    index: int | None = Field(default=None, description="Position in the turn's list (a "
                              "row's or event's seq); null for a single object.")
    tenant: str
    user_id: str
    conversation_id: str
    turn_id: str
    edition: str = Field(description="Which recording of the turn the object belongs to.")
    expires_at: datetime
    value: Any = Field(description="The object as JSON: the materialized turn for "
                                   "conv:ar:...record, else the part, step, row or event.")


@dataclass(frozen=True)
class ResolvedFile:
    """What a conv:fi: ref resolves to: its card and bytes."""

    card: FileCard
    data: bytes


Resolved = ResolvedRecord | ResolvedFile


@dataclass(frozen=True)
class _Turn:
    user_id: str
    expires_at: datetime
    batch_id: str

    @property
    def edition(self) -> str:
        return edition_of(self.batch_id)


class RefResolver:
    """Resolves any conv:* address under a principal's access rules."""

    def __init__(self, materializer: TurnMaterializer) -> None:
        self._materializer = materializer
        self._store = materializer.store

    def resolve(self, principal: Principal, ref: str, *,
                as_of: datetime | None = None) -> Resolved:
        """The object behind ``ref``. Raises RefError (malformed), RefExpired (past its
        expiry), RefNotFound (none, or a superseded edition) or, for an end user, AccessDenied
        alike for another user's object and for none."""
        now = as_of or datetime.now(UTC)
        if parse_ref(ref).is_file:
            return ResolvedFile(*self._file(principal, ref, now, read=True))
        return self._record(principal, parse_address(ref), now, content=True)

    def mentions(self, principal: Principal, turn: MaterializedTurn, *,
                 as_of: datetime | None = None) -> list[Mention]:
        """The refs a turn's completion and summary name, each with what it leads to for
        ``principal``: found (with the object's canonical address), missing, expired or
        invalid (with the reason)."""
        return self.mentions_in(principal, [
            ("completion", str(turn.completion.get("text", ""))), ("summary", turn.summary)],
            as_of=as_of)

    def mentions_in(self, principal: Principal, texts: list[tuple[str, str | None]], *,
                    as_of: datetime | None = None) -> list[Mention]:
        """The refs written in (source, text) pairs, each with what it leads to."""
        return self.mentions_of(principal, written_refs(texts), as_of=as_of)

    def mentions_of(self, principal: Principal, refs: list[tuple[str, str]], *,
                    as_of: datetime | None = None) -> list[Mention]:
        """Each (source, ref) with what the ref leads to."""
        now = as_of or datetime.now(UTC)
        return [self._mention(principal, source, ref, now) for source, ref in refs]

    def _mention(self, principal: Principal, source: str, ref: str,
                 now: datetime) -> Mention:
        problem = well_formed(ref)
        if problem is not None:
            return Mention(source, ref, "invalid", reason=problem)
        try:
            if parse_ref(ref).is_file:
                self._file(principal, ref, now, read=False)
                address = str(parse_ref(ref))
            else:
                address = self._record(principal, parse_address(ref), now,
                                       content=False).address
        except RefExpired as exc:
            return Mention(source, ref, "expired", reason=str(exc))
        except (RefNotFound, AccessDenied) as exc:
            return Mention(source, ref, "missing", reason=str(exc))
        except RefError as exc:
            return Mention(source, ref, "invalid", reason=str(exc))
        return Mention(source, ref, "found", address=address)

    # -- files ---------------------------------------------------------------------------------

    def _file(self, principal: Principal, ref: str, now: datetime, *,
              read: bool) -> tuple[FileCard, bytes]:
        try:
            if read:
                return self._materializer.resolve(principal, ref, as_of=now)
            row = self._materializer.file_row(principal, ref, as_of=now)
            return card_of(row), b""
        except (AccessDenied, RefNotFound):
            raise _missing(principal, ref) from None

    # -- records -------------------------------------------------------------------------------

    def _record(self, principal: Principal, address: Address, now: datetime, *,
                content: bool) -> ResolvedRecord:
        ref = str(address)
        turn = self._turn(principal, address, ref)
        current = address.in_edition(turn.edition)
        if address.edition is not None and address.edition != turn.edition:
            raise RefNotFound(
                f"{ref} names an edition of turn {address.conversation_id}/{address.turn_id} "
                "that was superseded (the turn was recorded again); its current record is "
                f"{record_address(address.conversation_id, address.turn_id, turn.edition)}")
        if turn.expires_at <= now:
            raise RefExpired(f"{ref} expired at {turn.expires_at:%Y-%m-%d %H:%M} UTC")
        expires_at = turn.expires_at
        if address.namespace in ("so", "ws", "su"):
            row = self._row(principal, address, turn, ref)
            if row["expires_at"] <= now:
                raise RefExpired(f"{ref} expired at {row['expires_at']:%Y-%m-%d %H:%M} UTC")
            expires_at = min(expires_at, row["expires_at"])
            value: Any = {k: v.isoformat() if isinstance(v, datetime) else v
                          for k, v in row.items() if k != "expires_at"}
        elif address.kind == RECORD_WHOLE and not content:
            value = None  # the turn is there: nothing more to check
        else:
            shown = self._materializer.turn(principal, address.conversation_id,
                                            address.turn_id, as_of=now,
                                            mentions=address.kind == RECORD_WHOLE)
            value = _part(shown, address)
            if value is None:
                raise _missing(principal, ref)
        return ResolvedRecord(
            address=str(current), namespace=address.namespace, kind=address.kind,
            index=address.index, tenant=principal.tenant, user_id=turn.user_id,
            conversation_id=address.conversation_id, turn_id=address.turn_id,
            edition=turn.edition, expires_at=expires_at, value=value)

    def _turn(self, principal: Principal, address: Address, ref: str) -> _Turn:
        """The turn an address is in, if the principal may read it (retained or expired)."""
        rows = self._store.read(
            Table.TURN_LOGS, columns=["user_id", "expires_at", "batch_id"],
            filter=(ds.field("tenant") == principal.tenant)
            & (ds.field("conversation_id") == address.conversation_id)
            & (ds.field("turn_id") == address.turn_id)).to_pylist()
        if not rows or (not principal.analyst and rows[0]["user_id"] != principal.user_id):
            raise _missing(principal, ref)
        return _Turn(rows[0]["user_id"], rows[0]["expires_at"], rows[0]["batch_id"])

    def _row(self, principal: Principal, address: Address, turn: _Turn,
             ref: str) -> dict[str, Any]:
        """The search row an address names, in the turn's current edition."""
        # A lake not written since embedding_sampled was added lacks the column (until its
        # next write adds it): its rows show none.
        have = set(self._store.dataset(Table.CONTENT_ROWS).schema.names)
        rows = self._store.read(
            Table.CONTENT_ROWS, columns=[c for c in _ROW_COLUMNS if c in have],
            filter=(ds.field("tenant") == principal.tenant)
            & (ds.field("conversation_id") == address.conversation_id)
            & (ds.field("turn_id") == address.turn_id)
            & (ds.field("batch_id") == turn.batch_id)
            & (ds.field("role") == address.kind)
            & (ds.field("seq") == (address.index or 0))).to_pylist()
        if not rows:
            raise _missing(principal, ref)
        row: dict[str, Any] = rows[0]
        return row


def _part(shown: MaterializedTurn, address: Address) -> Any:
    """The part of a materialized turn an address names; None when there is none."""
    if address.kind == RECORD_WHOLE:
        return shown.to_json()
    if address.kind == "completion":
        return shown.completion
    if address.kind == EVENTS:
        return next((e for e in shown.events if e["seq"] == address.index), None)
    items: list[Any] = shown.steps if address.kind == STEPS else getattr(shown, address.kind)
    assert address.index is not None  # list kinds always carry one (parse_address)
    return items[address.index] if address.index < len(items) else None


def _missing(principal: Principal, ref: str) -> RefError | AccessDenied:
    """The answer for an object the principal cannot have: one refusal for an end user
    (another user's and none alike), RefNotFound for an analyst."""
    if not principal.analyst:
        return AccessDenied(f"{principal.describe()} may not read {ref}")
    return RefNotFound(f"{ref} names no retained object in tenant {principal.tenant}")


@dataclass(frozen=True)
class UnresolvedMention:
    """A ref a recorded turn's text names that leads to no object its user may read."""

    conversation_id: str
    turn_id: str
    mention: Mention

    def __str__(self) -> str:
        """One line: which turn, where, the ref and why."""
        m = self.mention
        return (f"turn {self.conversation_id}/{self.turn_id}: its {m.source} names {m.ref}, "
                f"which is {m.status}: {m.reason}")


def unresolved_mentions(materializer: TurnMaterializer, logs: pa.Table,
                        files: pa.Table) -> list[UnresolvedMention]:
    """The refs in the completions and summaries of just-recorded turns that lead nowhere for
    the turn's own user: missing, expired or malformed. ``logs`` and ``files`` are the
    committed batch's TurnLog and files rows: a ref to a file of the same batch and user is
    found there (the usual "produced ... at conv:fi:..." of a turn's own file) without a read;
    only payloads that contain ``conv:`` are parsed."""
    if not logs.num_rows:
        return []
    maybe = pc.match_substring(logs.column("payload"), "conv:")
    if not pc.any(maybe).as_py():
        return []
    own = set(zip(*(files.column(n).to_pylist() for n in ("tenant", "user_id", "ref")),
                  strict=True))
    resolver = RefResolver(materializer)
    found = []
    for row in logs.filter(maybe).select(["tenant", "user_id", "conversation_id", "turn_id",
                                          "payload"]).to_pylist():
        payload = json.loads(row["payload"])
        refs = [(source, ref) for source, ref in written_refs([
            ("completion", payload["completion"].get("text")),
            ("summary", payload.get("summary"))]) if (row["tenant"], row["user_id"], ref)
            not in own]
        if refs:
            principal = Principal(row["tenant"], row["user_id"])
            found += [UnresolvedMention(row["conversation_id"], row["turn_id"], m)
                      for m in resolver.mentions_of(principal, refs) if m.status != "found"]
    return found
