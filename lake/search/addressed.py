"""Hits carry addresses — the matched row's and its turn record's, in the turn's edition —
and the agent and app that recorded the turn.

The index keeps no batch of a row, so the editions of the hit turns come from their TurnLogs.
:class:`Editions` remembers what it read at the TurnLog table's version (the one the search's
index statuses last saw, so no second look at the log). A new version that only added data
files (a live writer's commits) keeps what was remembered and reads the added files whole
(a few rows each): the turns they hold are the only ones it can have recorded or recorded
again. Any other change (an erase, a replace, a compaction: files removed) forgets it all,
since a replaced turn's edition changes with no other sign. The turns still not remembered
are read in one scan of the months the hits fall in, of four short columns (~8 ms on a busy
machine; on a live lake, where a month is one small file per commit, many times that)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.dataset as ds

from lake.addresses import edition_of, record_address, row_address_of_id
from lake.errors import LakeError
from lake.index.status import UNSET, Unset
from lake.projection import month_of
from lake.search.request import Hit
from lake.store import LakeStore
from lake.tables import Table

_TurnKey = tuple[str, str, str]  # tenant, conversation, turn
_Known = tuple[str, str, str]  # the turn's edition, agent and app
# Past this many turns remembered, the memory starts again (a search asks for tens).
_MAX_REMEMBERED = 100_000
_COLUMNS = ["tenant", "conversation_id", "turn_id", "batch_id", "agent", "app"]


class Editions:
    """The editions of turns, remembered per TurnLog table version."""

    def __init__(self, store: LakeStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._version: int | None = None
        self._files: frozenset[str] | None = None  # the TurnLog data files at _version
        self._known: dict[_TurnKey, _Known | None] = {}

    def with_addresses(self, hits: Sequence[Hit], version: int | Unset | None = UNSET,
                       ) -> list[Hit]:
        """The hits with ``address``, ``turn_address``, ``agent`` and ``app`` set (left null
        for a turn no longer recorded, which a stale index may still hold); ``version``: the
        TurnLog table's, when the caller knows it (else it is read)."""
        if not hits:
            return list(hits)
        if isinstance(version, Unset):
            version = self._store.latest_version(Table.TURN_LOGS)
        editions = self._editions(hits, version)
        out = []
        for hit in hits:
            known = editions.get((hit.tenant, hit.conversation_id, hit.turn_id))
            if known is None:
                out.append(hit)
                continue
            edition, agent, app = known
            out.append(dataclasses.replace(
                hit, address=row_address_of_id(hit.row_id, hit.role, edition),
                turn_address=record_address(hit.conversation_id, hit.turn_id, edition),
                agent=agent, app=app))
        return out

    def _editions(self, hits: Sequence[Hit], version: int | None
                  ) -> dict[_TurnKey, _Known | None]:
        with self._lock:
            if version != self._version or len(self._known) > _MAX_REMEMBERED:
                self._moved(version)
            known = dict(self._known)
        missing = [h for h in hits if (h.tenant, h.conversation_id, h.turn_id) not in known]
        if missing:
            read = self._read(missing)
            known.update(read)
            with self._lock:
                if version == self._version:
                    self._known.update(read)
        return known

    def _moved(self, version: int | None) -> None:
        """Follow the table to ``version`` (under the lock): keep what is remembered when it
        only added data files since, and learn the turns those files hold; else forget."""
        files = self._data_files(version)
        before, self._version, self._files = self._files, version, files
        if (before is None or files is None or not before <= files
                or len(self._known) > _MAX_REMEMBERED):
            self._known = {}
            return
        added = files - before
        if added:
            self._known.update(self._read_files(added, version))

    def _data_files(self, version: int | None) -> frozenset[str] | None:
        """The TurnLog table's data files at ``version`` (None: not known)."""
        if version is None:
            return None
        try:
            return self._store.data_files(Table.TURN_LOGS, version)
        except LakeError:  # that version's log is gone: nothing says what changed
            return None

    def _read_files(self, files: frozenset[str], version: int | None
                    ) -> dict[_TurnKey, _Known | None]:
        """The editions, agents and apps of every turn in ``files`` (whole: a commit's)."""
        logs = self._store.read_files(Table.TURN_LOGS, files, columns=_COLUMNS,
                                      version=version)
        return _known_of(logs)

    def _read(self, hits: Sequence[Hit]) -> dict[_TurnKey, _Known | None]:
        """The editions, agents and apps of the hits' turns, None for a turn not recorded."""
        where = (ds.field("tenant").isin(sorted({h.tenant for h in hits}))
                 & ds.field("month").isin(sorted({month_of(h.turn_at) for h in hits}))
                 & ds.field("conversation_id").isin(sorted({h.conversation_id for h in hits}))
                 & ds.field("turn_id").isin(sorted({h.turn_id for h in hits})))
        logs = self._store.read(Table.TURN_LOGS, columns=_COLUMNS, filter=where)
        found: dict[_TurnKey, _Known | None] = {
            (h.tenant, h.conversation_id, h.turn_id): None for h in hits}
        found.update(_known_of(logs))
        return found


def _known_of(logs: pa.Table) -> dict[_TurnKey, _Known | None]:
    """Each turn of ``logs`` (the :data:`_COLUMNS` of TurnLog rows) with its edition, agent
    and app."""
    return {(t, c, u): (edition_of(b), agent, app)
            for t, c, u, b, agent, app in zip(*(logs.column(n).to_pylist() for n in _COLUMNS),
                                              strict=True)}
