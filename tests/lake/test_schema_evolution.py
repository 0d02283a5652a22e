"""A new nullable column on a table works on a lake written with the previous schema."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from lake import store as store_module
from lake.errors import LakeError
from lake.store import LakeStore
from lake.tables import SCHEMAS, Table

AT = datetime(2026, 11, 1, tzinfo=UTC)


def _audit(schema: pa.Schema, action: str, **extra: str) -> pa.Table:
    row = {"at": [AT], "action": [action], "actor": ["ops"], "tenant": ["acme"],
           "target": ["t"], "counts": ["{}"], **{k: [v] for k, v in extra.items()}}
    return pa.table(row, schema=schema)


def test_a_new_nullable_column_reads_null_in_old_files(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    previous = SCHEMAS[Table.AUDIT]
    LakeStore(tmp_path).append(Table.AUDIT, _audit(previous, "before"))
    wider = previous.append(pa.field("reviewer", pa.string()))
    monkeypatch.setitem(store_module.SCHEMAS, Table.AUDIT, wider)
    lake = LakeStore(tmp_path)  # a later release, reading the lake the previous one wrote
    lake.append(Table.AUDIT, _audit(wider, "after", reviewer="ana"))
    rows = lake.read(Table.AUDIT).sort_by("action").to_pylist()
    assert [(r["action"], r["reviewer"]) for r in rows] == [("after", "ana"), ("before", None)]
    # replacing rows (an overwrite with a predicate) works on the evolved table too
    lake.replace_where(Table.AUDIT, _audit(wider, "before", reviewer="bo"), "action = 'before'")
    rows = lake.read(Table.AUDIT).sort_by("action").to_pylist()
    assert [(r["action"], r["reviewer"]) for r in rows] == [("after", "ana"), ("before", "bo")]


def test_a_new_required_column_is_refused_with_the_reason(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    previous = SCHEMAS[Table.AUDIT]
    LakeStore(tmp_path).append(Table.AUDIT, _audit(previous, "before"))
    wider = previous.append(pa.field("reviewer", pa.string(), nullable=False))
    monkeypatch.setitem(store_module.SCHEMAS, Table.AUDIT, wider)
    with pytest.raises(LakeError, match="reviewer are not nullable"):
        LakeStore(tmp_path).append(Table.AUDIT, _audit(wider, "after", reviewer="ana"))
