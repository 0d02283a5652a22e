"""The precision a lake keeps embeddings at: 11 significant bits (float16's), on disk and in
every index.

A row's vector is stored twice: in the Delta table (the source every index is rebuilt from,
and what erasure removes) and in the semantic index's file of rows that searches re-score from.
Both keep float16's precision: the Delta column stays ``list<float32>``, its values rounded to
11 significant bits, so Parquet's dictionary encoding stores each value in about two bytes
(about 0.47 of the float32 bytes on MiniLM-like vectors); the index file is float16 itself.
Together they take the bytes of one float32 copy. A unit vector loses at most 2^-11 of each
component to the rounding, so a cosine moves by less than 5e-4 — far below the differences a
ranking acts on (LoCoMo recall unchanged: docs/operations/memory.md).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

SIGNIFICANT_BITS: int = 11  # float16's: 10 stored mantissa bits and the implicit one
_DROPPED_BITS = 24 - SIGNIFICANT_BITS  # of float32's 24
_HALF = np.uint32((1 << (_DROPPED_BITS - 1)) - 1)
_KEPT = np.uint32(~((1 << _DROPPED_BITS) - 1) & 0xFFFFFFFF)


def half_precision(values: np.ndarray) -> np.ndarray:
    """``values`` as float32 rounded to :data:`SIGNIFICANT_BITS` significant bits (to nearest,
    ties to even), float32's range kept: no value overflows or underflows as a float16 would.
    Non-finite values, and the few next to float32's largest that would round to infinity,
    are returned as they are. Idempotent."""
    floats = np.ascontiguousarray(values, dtype=np.float32)
    bits = floats.view(np.uint32)
    odd = (bits >> np.uint32(_DROPPED_BITS)) & np.uint32(1)
    rounded = ((bits + _HALF + odd) & _KEPT).view(np.float32)
    return np.where(np.isfinite(rounded), rounded, floats)


def half_precision_column(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A ``list<float32>`` column with every value rounded by :func:`half_precision` (nulls,
    offsets and chunks kept)."""
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([half_precision_column(chunk) for chunk in column.chunks],
                                type=column.type)
    if column.null_count == len(column) or len(column) == 0:
        return column
    assert isinstance(column, pa.ListArray)
    flat = column.values.to_numpy(zero_copy_only=False)
    values = pa.array(half_precision(flat), type=pa.float32())
    offsets = pa.array(column.offsets.to_numpy(), type=pa.int32())  # unsliced, for arrow
    return pa.ListArray.from_arrays(offsets, values, mask=column.is_null(), type=column.type)
