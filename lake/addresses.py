"""The canonical address of every durable object a turn leaves in the lake (spec section 06).

Each address is a ``conv:*`` ref (lake.refs) whose path says which object of the turn it
names; the path grammar of each namespace::

    conv:ar:conv_C.turn_T.record[@E]            the TurnLog record, whole
    conv:ar:conv_C.turn_T.completion[@E]        a part of it: the final answer,
    conv:ar:conv_C.turn_T.submissions/<i>[@E]   the i-th folded submission,
    conv:ar:conv_C.turn_T.attachments/<i>[@E]   the i-th attachment, the i-th citation
    conv:ar:conv_C.turn_T.citations/<i>[@E]
    conv:tc:conv_C.turn_T.steps/<i>[@E]         the i-th step (tool call) in record order
    conv:so:conv_C.turn_T.user/<seq>[@E]        a source row: a submission's search row,
    conv:so:conv_C.turn_T.assistant[@E]         the answer's, an attachment's text
    conv:so:conv_C.turn_T.attachment/<seq>[@E]
    conv:ws:conv_C.turn_T.summary[@E]           the working summary's search row
    conv:su:conv_C.turn_T.anchor/<seq>[@E]      the agent's other search records:
    conv:su:conv_C.turn_T.note/<seq>[@E]        anchors and notes
    conv:ev:conv_C.turn_T.events/<seq>[@E]      the seq-th recorded event (replay order)
    conv:fi:conv_C.turn_T.files/<path>          hosted file bytes (lake.refs.file_ref)

``E``, the edition, names which recording of the turn the object belongs to: ten hex digits
of the SHA-256 of the batch that committed the turn. Compaction, re-indexing and ``maintain``
(re-embedding, purges) keep a turn's batch, so the address stays; ``ingest --replace`` records
the turn in a new batch, so the superseded object's address answers as missing instead of
leading to its successor. An address without ``@E`` names the object in the turn's current
edition (what a person types); every address the lake hands out carries its edition.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from lake.errors import RefError
from lake.refs import Ref, parse_ref

EDITION_CHARS = 10
_EDITION_RE = re.compile(rf"[0-9a-f]{{{EDITION_CHARS}}}")
_INDEX_RE = re.compile(r"0|[1-9][0-9]{0,8}")

# Search-row roles by namespace (lake.tables.ROLES): so rows are the source texts of the
# exchange, ws the working summary, su the agent's other search records.
ROLE_NAMESPACES: dict[str, str] = {
    "user": "so", "assistant": "so", "attachment": "so",
    "summary": "ws", "anchor": "su", "note": "su"}
# Roles with exactly one row per turn take no index (their row's seq is 0).
SINGLE_ROW_ROLES = frozenset({"assistant", "summary"})
# The TurnLog's parts a conv:ar: address may name: whole, single, or list elements.
RECORD_WHOLE = "record"
RECORD_SINGLE = frozenset({"record", "completion"})
RECORD_LISTS = frozenset({"submissions", "attachments", "citations"})
STEPS = "steps"
EVENTS = "events"


@dataclass(frozen=True)
class Address:
    """A parsed address of a non-file object: namespace, turn, the object's kind and index
    within the turn, and the edition it names (None: the current one)."""

    namespace: str
    conversation_id: str
    turn_id: str
    kind: str  # a record part (conv:ar:), "steps", "events", or a search row's role
    index: int | None
    edition: str | None

    @property
    def path(self) -> str:
        """The ref path: ``kind[/index][@edition]``."""
        path = self.kind if self.index is None else f"{self.kind}/{self.index}"
        return path if self.edition is None else f"{path}@{self.edition}"

    def __str__(self) -> str:
        """The canonical address text."""
        return str(Ref(self.namespace, self.conversation_id, self.turn_id, self.path))

    def in_edition(self, edition: str) -> Address:
        """This object's address in ``edition``."""
        return Address(self.namespace, self.conversation_id, self.turn_id, self.kind,
                       self.index, edition)


def edition_of(batch_id: str) -> str:
    """The edition token of a turn committed by batch ``batch_id``."""
    return hashlib.sha256(batch_id.encode()).hexdigest()[:EDITION_CHARS]


def _split(ref: Ref) -> tuple[str, int | None, str | None]:
    """(kind, index, edition) of a non-file ref's path; RefError naming what is wrong."""
    path, at, edition = ref.path.partition("@")
    if at and _EDITION_RE.fullmatch(edition) is None:
        raise RefError(f"{ref}: the edition after '@' must be {EDITION_CHARS} lowercase hex "
                       f"digits, got {edition!r}")
    kind, slash, index = path.partition("/")
    if slash and _INDEX_RE.fullmatch(index) is None:
        raise RefError(f"{ref}: {index!r} is not an index (0, 1, 2 ...)")
    return kind, int(index) if slash else None, edition if at else None


def _expected(namespace: str) -> str:
    if namespace == "ar":
        return ("record, completion, submissions/<i>, attachments/<i> or citations/<i>")
    if namespace == "tc":
        return "steps/<i>"
    if namespace == "ev":
        return "events/<seq>"
    roles = sorted(r for r, ns in ROLE_NAMESPACES.items() if ns == namespace)
    return " or ".join(r if r in SINGLE_ROW_ROLES else f"{r}/<seq>" for r in roles)


def parse_address(text: str | Ref) -> Address:
    """Parse the address of a non-file object; RefError when the text is not a ref, is a
    conv:fi: ref, or its path names no kind of object of its namespace."""
    ref = text if isinstance(text, Ref) else parse_ref(text)
    if ref.is_file:
        raise RefError(f"{ref} is a file ref; it names bytes, not a record")
    kind, index, edition = _split(ref)
    ns = ref.namespace
    if ns == "ar":
        ok = (kind in RECORD_SINGLE and index is None) or (kind in RECORD_LISTS and
                                                           index is not None)
    elif ns in ("tc", "ev"):
        ok = kind == (STEPS if ns == "tc" else EVENTS) and index is not None
    else:
        ok = ROLE_NAMESPACES.get(kind) == ns and (index is None) == (kind in SINGLE_ROW_ROLES)
    if not ok:
        raise RefError(f"{ref}: a conv:{ns}: path is {_expected(ns)} (then @<edition> "
                       f"optionally), not {ref.path.partition('@')[0]!r}")
    return Address(ns, ref.conversation_id, ref.turn_id, kind, index, edition)


def record_address(conversation_id: str, turn_id: str, edition: str | None,
                   part: str = RECORD_WHOLE, index: int | None = None) -> str:
    """The conv:ar: address of a turn's record, or of one of its parts."""
    return str(Address("ar", conversation_id, turn_id, part, index, edition))


def step_address(conversation_id: str, turn_id: str, index: int, edition: str | None) -> str:
    """The conv:tc: address of the index-th step of a turn's record."""
    return str(Address("tc", conversation_id, turn_id, STEPS, index, edition))


def event_address(conversation_id: str, turn_id: str, seq: int, edition: str | None) -> str:
    """The conv:ev: address of a turn's recorded event ``seq``."""
    return str(Address("ev", conversation_id, turn_id, EVENTS, seq, edition))


def row_address(conversation_id: str, turn_id: str, role: str, seq: int,
                edition: str | None) -> str:
    """The address of a search row: conv:so:, conv:ws: or conv:su: as its role says."""
    namespace = ROLE_NAMESPACES.get(role)
    if namespace is None:
        raise RefError(f"no search-row role {role!r}; expected one of "
                       f"{', '.join(ROLE_NAMESPACES)}")
    index = None if role in SINGLE_ROW_ROLES else seq
    return str(Address(namespace, conversation_id, turn_id, role, index, edition))


def row_address_of_id(row_id: str, role: str, edition: str | None) -> str:
    """The address of the search row ``row_id`` (``C.T.role.seq``, lake.projection.row_id)."""
    conversation_id, turn_id, _, seq = row_id.rsplit(".", 3)
    return row_address(conversation_id, turn_id, role, int(seq), edition)
