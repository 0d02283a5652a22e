"""Arrow schemas read off the record model, for reading selected fields of canonical payloads.

The projection reads a batch's canonical payloads (:meth:`lake.records.TurnRecord.to_json_bytes`)
with Arrow's JSON reader, which needs an explicit schema of the fields it keeps. That schema
is derived here from the pydantic models, so a field's type is written down once, in
:mod:`lake.records`: a changed or renamed field changes what the reader expects, or fails at
import with the field's name, instead of drifting from a second hand-kept copy.

Types map as pydantic validates them: ``str`` and ``Literal`` strings to string; ``int`` to
int32 when its bounds fit 32 bits, else int64; ``float`` to float64; a nested model to a struct
of its selected fields; ``list[X]`` to a list of X; ``X | None`` to X (every Arrow field is
nullable). An instant is read as its RFC 3339 text unless its path is named in
``instants_as_timestamps``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, Union

import annotated_types
import pyarrow as pa
from pydantic import AwareDatetime, BaseModel, NaiveDatetime

# What to read of a model: each field name maps to True (the whole field) or, for a field
# holding a model or a list of models, to the selection of that model's fields.
Selection = Mapping[str, "bool | Selection"]
_INT32 = (-(2**31), 2**31 - 1)
# pydantic's datetime markers are classes of their own at run time, not datetime subclasses
_INSTANT_MARKERS: tuple[Any, ...] = (AwareDatetime, NaiveDatetime)


class PayloadSchemaError(TypeError):
    """A selection names a field the model lacks, or a type with no Arrow counterpart."""


def payload_schema(model: type[BaseModel], select: Selection, *, timestamp: pa.DataType,
                   instants_as_timestamps: frozenset[str] = frozenset()) -> pa.Schema:
    """The Arrow schema of ``select``'s fields of ``model``, in ``select``'s order, each under
    the name it has in the canonical JSON (a field's alias); instants at the paths in
    ``instants_as_timestamps`` (``"steps.at"``) are read as ``timestamp``, others as text."""
    return pa.schema(_fields(model, select, "", instants_as_timestamps, timestamp))


def _fields(model: type[BaseModel], select: Selection, prefix: str, instants: frozenset[str],
            timestamp: pa.DataType) -> list[pa.Field]:
    out = []
    for name, sub in select.items():
        info = model.model_fields.get(name)
        if info is None:
            raise PayloadSchemaError(f"{model.__name__} has no field {prefix}{name}")
        path = f"{prefix}{name}"
        kind = _arrow(info.annotation, list(info.metadata), sub, path, instants, timestamp)
        out.append(pa.field(info.alias or name, kind))
    return out


def _arrow(annotation: Any, metadata: list[Any], sub: bool | Selection, path: str,
           instants: frozenset[str], timestamp: pa.DataType) -> pa.DataType:
    annotation, metadata = _unwrapped(annotation, metadata)
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return pa.list_(_arrow(item, [], sub, path, instants, timestamp))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not isinstance(sub, Mapping):
            raise PayloadSchemaError(f"{path}: select the fields of {annotation.__name__}")
        return pa.struct(_fields(annotation, sub, f"{path}.", instants, timestamp))
    if sub is not True:
        raise PayloadSchemaError(f"{path}: only a model's fields can be selected")
    if origin is Literal:
        if all(isinstance(v, str) for v in typing.get_args(annotation)):
            return pa.string()
    elif annotation is str:
        return pa.string()
    elif annotation is bool:
        return pa.bool_()
    elif annotation is int:
        return pa.int32() if _fits_int32(metadata) else pa.int64()
    elif annotation is float:
        return pa.float64()
    elif annotation in _INSTANT_MARKERS or (isinstance(annotation, type)
                                            and issubclass(annotation, datetime)):
        return timestamp if path in instants else pa.string()
    raise PayloadSchemaError(f"{path}: no Arrow type for {annotation!r}")


def _unwrapped(annotation: Any, metadata: list[Any]) -> tuple[Any, list[Any]]:
    """The annotation without ``Annotated`` (its constraints joined to ``metadata``) and
    without ``| None``."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *extra = typing.get_args(annotation)
            metadata = [*metadata, *extra]
        elif origin in (Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                raise PayloadSchemaError(f"no Arrow type for the union {annotation!r}")
            annotation = options[0]
        else:
            return annotation, _flattened(metadata)


def _flattened(metadata: list[Any]) -> list[Any]:
    """Constraints, with a ``Field(...)`` used inside ``Annotated`` opened into its own."""
    out: list[Any] = []
    for item in metadata:
        inner = getattr(item, "metadata", None)
        out += list(inner) if isinstance(inner, list) else [item]
    return out


def _fits_int32(metadata: list[Any]) -> bool:
    low = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in metadata if isinstance(m, annotated_types.Le)), None)
    return (isinstance(low, int) and isinstance(high, int)
            and _INT32[0] <= low and high <= _INT32[1])
