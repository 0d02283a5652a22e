"""Arrow schemas derived from the record model: types as pydantic validates them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import pyarrow as pa
import pyarrow.json as pa_json
import pytest
from pydantic import AwareDatetime, BaseModel, Field

from lake.payload_schema import PayloadSchemaError, payload_schema
from lake.records import Count

TS = pa.timestamp("us", tz="UTC")


class Inner(BaseModel):
    name: str
    at: AwareDatetime
    small: int = Field(ge=-5, le=5)
    note: str | None = None


class Outer(BaseModel):
    kind_: Literal["a", "b"] = Field(alias="kind")
    big: Count
    unbounded: int
    ratio: float | None = None
    flag: bool = False
    when: Annotated[AwareDatetime, Field(ge=datetime(1970, 1, 1, tzinfo=UTC))]
    inner: Inner
    items: list[Inner] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    blob: dict[str, Any] = Field(default_factory=dict)


def test_types_follow_the_model() -> None:
    schema = payload_schema(Outer, {
        "kind_": True, "big": True, "unbounded": True, "ratio": True, "flag": True,
        "when": True, "inner": {"name": True, "small": True, "at": True},
        "items": {"at": True, "note": True}, "tags": True,
    }, timestamp=TS, instants_as_timestamps=frozenset({"items.at"}))
    assert schema == pa.schema([
        ("kind", pa.string()), ("big", pa.int64()), ("unbounded", pa.int64()),
        ("ratio", pa.float64()), ("flag", pa.bool_()), ("when", pa.string()),
        ("inner", pa.struct([("name", pa.string()), ("small", pa.int32()),
                             ("at", pa.string())])),
        ("items", pa.list_(pa.struct([("at", TS), ("note", pa.string())]))),
        ("tags", pa.list_(pa.string())),
    ])


def test_the_schema_reads_what_the_model_writes() -> None:
    value = Outer(kind="b", big=2**40, unbounded=-3, when=datetime(2026, 3, 1, tzinfo=UTC),
                  inner=Inner(name="x", at=datetime(2026, 3, 2, tzinfo=UTC), small=-5),
                  items=[Inner(name="y", at=datetime(2026, 3, 3, 4, 5, tzinfo=UTC), small=1)])
    schema = payload_schema(Outer, {"kind_": True, "big": True, "inner": {"small": True},
                                    "items": {"at": True}},
                            timestamp=TS, instants_as_timestamps=frozenset({"items.at"}))
    table = pa_json.read_json(pa.py_buffer(value.model_dump_json(by_alias=True).encode()),
                              parse_options=pa_json.ParseOptions(
                                  explicit_schema=schema, unexpected_field_behavior="ignore"))
    assert table.to_pylist() == [{"kind": "b", "big": 2**40, "inner": {"small": -5},
                                  "items": [{"at": datetime(2026, 3, 3, 4, 5, tzinfo=UTC)}]}]


@pytest.mark.parametrize(("select", "message"), [
    ({"nope": True}, "Outer has no field nope"),
    ({"inner": {"nope": True}}, "Inner has no field inner.nope"),
    ({"inner": True}, "inner: select the fields of Inner"),
    ({"tags": {"x": True}}, "tags: only a model's fields can be selected"),
    ({"blob": True}, "blob: no Arrow type"),
])
def test_a_selection_the_model_cannot_give_is_refused_by_path(select: dict[str, Any],
                                                               message: str) -> None:
    with pytest.raises(PayloadSchemaError, match=message):
        payload_schema(Outer, select, timestamp=TS)
