"""Hits carry addresses: the matched row's and its turn record's, in the turn's edition.

The index keeps no batch of a row, so the editions of the hit turns are read from their
TurnLogs: one read of the months the hits fall in, of three short columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow.dataset as ds

from lake.addresses import edition_of, record_address, row_address_of_id
from lake.projection import month_of
from lake.search.request import Hit
from lake.store import LakeStore
from lake.tables import Table


def with_addresses(store: LakeStore, hits: Sequence[Hit]) -> list[Hit]:
    """The hits with ``address`` and ``turn_address`` set (left null for a turn no longer
    recorded, which a stale index may still hold)."""
    if not hits:
        return list(hits)
    tenants = {h.tenant for h in hits}
    where = (ds.field("tenant").isin(sorted(tenants))
             & ds.field("month").isin(sorted({month_of(h.turn_at) for h in hits}))
             & ds.field("conversation_id").isin(sorted({h.conversation_id for h in hits}))
             & ds.field("turn_id").isin(sorted({h.turn_id for h in hits})))
    logs = store.read(Table.TURN_LOGS, columns=["tenant", "conversation_id", "turn_id",
                                                "batch_id"], filter=where)
    editions = {(t, c, u): edition_of(b) for t, c, u, b in zip(
        *(logs.column(n).to_pylist() for n in ("tenant", "conversation_id", "turn_id",
                                               "batch_id")), strict=True)}
    out = []
    for hit in hits:
        edition = editions.get((hit.tenant, hit.conversation_id, hit.turn_id))
        if edition is None:
            out.append(hit)
            continue
        out.append(dataclasses.replace(
            hit, address=row_address_of_id(hit.row_id, hit.role, edition),
            turn_address=record_address(hit.conversation_id, hit.turn_id, edition)))
    return out
