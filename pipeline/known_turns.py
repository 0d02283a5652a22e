"""The stored turns of recently recorded conversations, kept in step with the TurnLog table.

Deduplicating a batch needs the identities of the stored turns of its conversations. Reading
them from the table filters every TurnLog file of the lake: ~40 ms for one turn recorded
live into a 100k-turn lake, whose table a live writer has split into a file per commit.
A warm writer records into the same conversations again and again, so :class:`KnownTurns`
keeps what it read, with the table's data files at that version, and next time reads only
the files added since, as the delta index segments do (lake.index.delta). Whenever a file
it had read is gone (an erase, a purge, a re-ingest, table upkeep), it forgets everything
and reads afresh: a turn leaves the table only with the file that held it, so while every
file is still there, the kept rows plus those of the added files are exactly the table's.

It also lists every conversation the table holds (read once, then kept up with the added
files): a conversation that is not listed has no stored turn, so a batch of new
conversations — most of what a service records — needs no filtered read at all.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lake.store import LakeStore
from lake.tables import TURN_LOGS, Table
from lake.timelines import conversation_filter

Conversation = tuple[str, str]  # (tenant, conversation_id)
COLUMNS = ("tenant", "conversation_id", "turn_id", "user_id", "started_at")
_SEPARATOR = "\x1f"
_KEY = "_conversation"


class KnownTurns:
    """The ``COLUMNS`` of stored TurnLogs per conversation; see the module notes.

    Not thread-safe: its owner (an :class:`pipeline.ingest.Ingestor`) asks under the lake's
    writer lock, one batch at a time."""

    def __init__(self, store: LakeStore, *, most_conversations: int = 20_000,
                 most_listed: int = 2_000_000) -> None:
        self._store = store
        self._most = most_conversations
        self._most_listed = most_listed
        self._files: frozenset[str] | None = None  # the table's files the rows are read from
        self._conversations: set[Conversation] = set()
        self._rows = _keyed(_empty())
        # Every conversation with a TurnLog in those files (None: not listed, or too many to
        # keep): a conversation not in it has no stored turn, and needs no read at all. A
        # host records new conversations all the time, and each read filters the table.
        self._listed: set[str] | None = None

    def read(self, conversations: set[Conversation]) -> pa.Table:
        """The stored TurnLogs (``COLUMNS``) of ``conversations``, as of the latest version."""
        version = self._store.latest_version(Table.TURN_LOGS)
        if version is None or not conversations:
            return _empty()
        files = self._store.data_files(Table.TURN_LOGS, version)
        if self._files is None or not self._files <= files \
                or len(self._conversations | conversations) > self._most:
            self._forget()
        elif (self._conversations or self._listed is not None) \
                and (added := files - self._files):
            rows = _keyed(self._store.read_files(Table.TURN_LOGS, added, columns=COLUMNS,
                                                 version=version))
            self._rows = pa.concat_tables([self._rows, _of(rows, self._conversations)])
            self._list(rows[_KEY].to_pylist())
        if self._files is None:
            self._listed = set()
            stored = self._store.read(Table.TURN_LOGS, columns=["tenant", "conversation_id"],
                                      version=version)
            self._list(pc.binary_join_element_wise(stored["tenant"], stored["conversation_id"],
                                                   _SEPARATOR).to_pylist())
        self._files = files
        missing = conversations - self._conversations
        if self._listed is not None:  # never stored: known to have no turns, nothing to read
            self._conversations |= {c for c in missing if _key_of(c) not in self._listed}
            missing = {c for c in missing if _key_of(c) in self._listed}
        if missing:
            rows = self._store.read(Table.TURN_LOGS, columns=list(COLUMNS),
                                    filter=conversation_filter(missing), version=version)
            self._rows = pa.concat_tables([self._rows, _keyed(rows)])
            self._conversations |= missing
        return _of(self._rows, conversations).select(list(COLUMNS))

    def _forget(self) -> None:
        self._files, self._conversations, self._rows = None, set(), _keyed(_empty())
        self._listed = None

    def _list(self, keys: list[str]) -> None:
        """Add conversations (keys) to the listed ones, or stop listing past the bound."""
        if self._listed is None:
            return
        self._listed.update(keys)
        if len(self._listed) > self._most_listed:
            self._listed = None


def _empty() -> pa.Table:
    return TURN_LOGS.empty_table().select(list(COLUMNS))


def _keyed(rows: pa.Table) -> pa.Table:
    """``COLUMNS`` plus each row's conversation as one string (``_KEY``), made once per row
    rather than at every look-up."""
    rows = rows.select(list(COLUMNS))
    return rows.append_column(_KEY, pc.binary_join_element_wise(
        rows["tenant"], rows["conversation_id"], _SEPARATOR))


def _key_of(conversation: Conversation) -> str:
    return f"{conversation[0]}{_SEPARATOR}{conversation[1]}"


def _of(rows: pa.Table, conversations: set[Conversation]) -> pa.Table:
    """The keyed rows of the given conversations."""
    wanted = pa.array([_key_of(c) for c in conversations], pa.string())
    return rows.filter(pc.is_in(rows[_KEY], value_set=wanted))
