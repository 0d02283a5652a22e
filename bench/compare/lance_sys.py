"""LanceDB (PyPI ``lancedb``): the shared rows in one table, its vector and native FTS indexes,
hybrid search with its RRF reranker, tenant + user filter applied before the search."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.compare.rows import Query, TurnKey
from bench.compare.systems import RowHit, SearchSettings, top_turns

TABLE = "rows"
# Below this many rows the vector column stays unindexed (exact scan): IVF training needs
# a few hundred rows per partition, and a flat scan of a few thousand rows is fast anyway.
MIN_INDEXED_ROWS = 50_000
_SELECT = ["rid", "conversation_id", "turn_id", "ts"]


def _lancedb() -> Any:
    # lance logs a deprecation warning per query that names no score column; the level is
    # read from the environment when the library first loads
    os.environ.setdefault("LANCEDB_LOG", "error")
    import lancedb

    return lancedb


def build(rows: pa.Table, folder: Path) -> dict[str, Any]:
    """Create the table and its indexes; returns timings (s), the vector index kind and bytes."""
    lancedb = _lancedb()
    from lancedb.index import FTS, BTree, IvfPq

    db = lancedb.connect(folder)
    data = rows.rename_columns(["vector" if c == "embedding" else c for c in rows.column_names])
    t0 = time.perf_counter()
    table = db.create_table(TABLE, data, mode="overwrite")
    load_s = time.perf_counter() - t0
    t = time.perf_counter()
    kind = "flat (no index)"
    if rows.num_rows >= MIN_INDEXED_ROWS:
        # lancedb's default vector index; 8-dim sub-vectors as its docs advise for 384-d
        table.create_index("vector", config=IvfPq(distance_type="cosine", num_sub_vectors=48))
        kind = "IVF_PQ cosine (sqrt(n) partitions, 48 sub-vectors)"
    vector_s = time.perf_counter() - t
    t = time.perf_counter()
    table.create_index("text", config=FTS())
    fts_s = time.perf_counter() - t
    t = time.perf_counter()
    table.create_index("user_id", config=BTree())
    table.create_index("tenant", config=BTree())
    btree_s = time.perf_counter() - t
    total = time.perf_counter() - t0
    return {"load_s": load_s, "vector_index_s": vector_s, "fts_index_s": fts_s,
            "btree_s": btree_s, "total_s": total, "vector_index": kind,
            "bytes": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())}


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class LanceSystem:
    """Searches the table built by :func:`build`."""

    name = "lancedb"
    arms: tuple[str, ...] = ("hybrid", "vector", "vector-flat", "fts")

    def __init__(self, folder: Path, settings: SearchSettings) -> None:
        lancedb = _lancedb()
        from lancedb.rerankers import RRFReranker

        self.settings = settings
        self.table = lancedb.connect(folder).open_table(TABLE)
        self.reranker = RRFReranker(K=60)

    def _rows(self, arm: str, query: Query, vector: np.ndarray) -> pa.Table:
        where = f"tenant = {_quote(query.tenant)} AND user_id = {_quote(query.user_id)}"
        depth = self.settings.depth
        if arm == "hybrid":
            # each sub-query fetches `depth` rows, like turnlake's per-generator depth
            q: Any = (self.table.search(query_type="hybrid").vector(vector).text(query.text)
                      .rerank(self.reranker))
        elif arm in ("vector", "vector-flat"):
            q = self.table.search(vector, query_type="vector")
            if arm == "vector-flat":
                q = q.bypass_vector_index()
        elif arm == "fts":
            q = self.table.search(query.text, query_type="fts")
        else:
            raise ValueError(f"lancedb has no arm {arm!r}; arms are {', '.join(self.arms)}")
        result: pa.Table = q.where(where, prefilter=True).select(_SELECT).limit(depth).to_arrow()
        return result

    def search(self, arm: str, query: Query, vector: np.ndarray) -> list[TurnKey]:
        """The arm's rows collapsed to the best k turns."""
        result = self._rows(arm, query, vector)
        convs = result.column("conversation_id").to_pylist()
        turns = result.column("turn_id").to_pylist()
        rids = result.column("rid").to_pylist()
        hits = [RowHit(r, (c, t), 0.0, 0.0) for r, c, t in zip(rids, convs, turns, strict=True)]
        return top_turns(hits, self.settings.k)

    def close(self) -> None:
        """Nothing to release (the table is memory-mapped files)."""
