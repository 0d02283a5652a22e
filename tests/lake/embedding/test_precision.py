"""Embeddings kept at half precision: the rounding itself, and the Delta column it gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lake.embedding.precision import half_precision, half_precision_column
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.jobs import run_ingest
from tests.factories import make_record, write_jsonl

FLOATS = st.floats(width=32, allow_nan=True, allow_infinity=True)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float32, st.integers(0, 64), elements=FLOATS))
def test_half_precision_rounds_as_float16_does_and_keeps_the_range(values: np.ndarray) -> None:
    rounded = half_precision(values)
    assert rounded.dtype == np.float32 and rounded.shape == values.shape
    finite = np.isfinite(values)
    np.testing.assert_array_equal(rounded[~finite], values[~finite])
    # within half a step of 11 significant bits (float32's subnormals: of their fixed step),
    # and rounding again changes nothing
    wide = values[finite].astype(np.float64)
    assert bool(np.all(np.abs(rounded[finite] - wide)
                       <= np.maximum(np.abs(wide) * 2.0**-11, 2.0**-137)))
    np.testing.assert_array_equal(half_precision(rounded), rounded)
    # where float16 has its full precision (normal, in range), the same value as float16
    normal = finite & (np.abs(values) >= 2.0**-14) & (np.abs(values) < 65504)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(rounded[normal],
                                      values[normal].astype(np.float16).astype(np.float32))


def test_a_column_keeps_its_nulls_and_offsets() -> None:
    column = pa.array([[1.0, 1 / 3], None, [], [0.1]], type=pa.list_(pa.float32())).slice(1)
    rounded = half_precision_column(column)
    assert rounded.type == column.type and rounded.to_pylist()[:2] == [None, []]
    assert rounded.to_pylist()[2] == [float(np.float16(0.1))]


def test_the_lake_stores_vectors_at_half_precision(hashing_settings: Settings,
                                                  tmp_path: Path) -> None:
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl",
                                              [make_record(i) for i in range(6)])])
    store = LakeStore(hashing_settings.lake)
    column = store.read(Table.CONTENT_ROWS).column("embedding")
    values = np.concatenate([np.asarray(v, np.float32) for v in column.to_pylist() if v])
    assert values.size > 0
    np.testing.assert_array_equal(half_precision(values), values)
    [path, *_] = sorted(store.path(Table.CONTENT_ROWS).rglob("*.parquet"))
    group = pq.read_metadata(path).row_group(0)
    [embedding] = [group.column(i) for i in range(group.num_columns)
                   if group.column(i).path_in_schema.startswith("embedding.")]
    assert "RLE_DICTIONARY" in embedding.encodings  # ~2 bytes a value, not 4
