"""The scale bench's lake with long rows: a share of its answers carry passage vectors, pooled
into their vector, and the indexes serve them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.scale import LONG_PASSAGES, build_scale_lake, make_queries, measure, scale_lake_dir
from lake.embedding.passages import pooled
from lake.embedding.precision import SIGNIFICANT_BITS
from lake.index.manifest import local_build
from lake.index.partition import PartitionIndex
from lake.index.status import partition_statuses
from lake.store import LakeStore
from lake.tables import Table


def test_a_share_of_answers_is_long_and_searched(tmp_path: Path) -> None:
    root = scale_lake_dir(tmp_path, 600, "clustered", 0.5)
    assert root.name == "scale-600-clustered-long50"
    settings, _, _ = build_scale_lake(root, 600, vectors="clustered", long_share=0.5)
    store = LakeStore(settings.lake)
    rows = store.read(Table.CONTENT_ROWS, columns=["role", "embedding", "passage_embeddings"])
    roles = rows.column("role").to_pylist()
    long = [i for i, p in enumerate(rows.column("passage_embeddings").to_pylist())
            if p is not None]
    answers = roles.count("assistant")
    assert {roles[i] for i in long} == {"assistant"}
    assert 0.3 * answers < len(long) < 0.7 * answers
    for i in long[:20]:
        parts = np.array(rows.column("passage_embeddings")[i].as_py(), np.float32)
        parts = parts.reshape(LONG_PASSAGES, -1)
        # The row's vector was pooled from the passages before either was rounded to 11
        # significant bits (lake.embedding.precision): each of its components may be off by
        # its own rounding, the norm's, and the rounding of every passage's component summed.
        stored = np.array(rows.column("embedding")[i].as_py(), np.float64)
        unit = 2.0 ** -SIGNIFICANT_BITS
        summed_norm = float(np.linalg.norm(parts.astype(np.float64).sum(axis=0)))
        bound = unit * (2 * np.abs(stored) + np.abs(parts).sum(axis=0) / summed_norm) + 1e-7
        error = np.abs(stored - pooled(parts))
        assert (error <= bound).all(), (i, float((error / bound).max()))
        assert float(stored @ pooled(parts)) > 1 - 5e-4
    passages = 0
    for status in partition_statuses(store).values():
        assert status.manifest is not None
        index = PartitionIndex(local_build(store.root, status.manifest), status.manifest)
        passages += 0 if index.passages is None else len(index.passages)
    assert passages == LONG_PASSAGES * len(long)
    latency = measure(settings, make_queries(store, 30), scope="user", vectors="clustered")
    assert np.isfinite([latency.p50, latency.p95]).all()
