"""The shared work: one row set and one query set, exported from a turnlake lake.

Every system loads exactly the rows turnlake's default user-scope search can see: committed
content rows (joined to their TurnLog on tenant, conversation, turn and batch), of the default
search roles, unexpired at ``as_of``, with a finished embedding. Queries carry their vectors
so no system's latency includes query embedding.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather

from lake.store import LakeStore
from lake.tables import DEFAULT_SEARCH_ROLES, Table

DIM = 384
TurnKey = tuple[str, str]
ROW_COLUMNS = ["rid", "tenant", "user_id", "conversation_id", "turn_id", "role", "text",
               "anchors", "ts", "embedding"]


def export_rows(root: Path, as_of: datetime) -> pa.Table:
    """The searchable rows of the lake at ``root``; ``rid`` numbers them 0..n-1.

    ``anchors`` holds the text of anchor rows (NULL elsewhere) so Postgres can weigh it A;
    ``ts`` is the turn's time (what recency lifts); ``embedding`` is a fixed-size float32 list.
    """
    store = LakeStore(root)
    logs = pl.from_arrow(store.read(Table.TURN_LOGS, columns=[
        "tenant", "conversation_id", "turn_id", "batch_id", "expires_at"]))
    content = pl.from_arrow(store.read(Table.CONTENT_ROWS, columns=[
        "tenant", "user_id", "conversation_id", "turn_id", "batch_id", "role", "seq", "text",
        "turn_at", "expires_at", "embedding", "embedding_status"]))
    assert isinstance(logs, pl.DataFrame) and isinstance(content, pl.DataFrame)
    cutoff = pl.lit(as_of).cast(pl.Datetime("us", "UTC"))
    frame = (content
             .join(logs.rename({"expires_at": "turn_expires_at"}),
                   on=["tenant", "conversation_id", "turn_id", "batch_id"], how="inner")
             .filter(pl.col("role").is_in(list(DEFAULT_SEARCH_ROLES))
                     & (pl.col("embedding_status") == "done")
                     & (pl.col("expires_at") > cutoff) & (pl.col("turn_expires_at") > cutoff))
             .sort("tenant", "user_id", "conversation_id", "turn_id", "role", "seq")
             .with_row_index("rid")
             .with_columns(pl.col("rid").cast(pl.Int64),
                           pl.when(pl.col("role") == "anchor").then(pl.col("text"))
                           .otherwise(None).alias("anchors"),
                           pl.col("turn_at").alias("ts")))
    if frame.height == 0:
        raise ValueError(f"lake {root} has no searchable rows with embeddings at {as_of}")
    lists = frame["embedding"].to_arrow()
    if not pc.all(pc.equal(pc.list_value_length(lists), DIM)).as_py():
        raise ValueError(f"lake {root} holds vectors that are not {DIM}-d")
    flat = pc.cast(pc.list_flatten(lists), pa.float32())
    table = frame.select([c for c in ROW_COLUMNS if c != "embedding"]).to_arrow()
    # plain string columns: polars hands out large_string, which lancedb's BTree refuses
    table = table.cast(pa.schema([pa.field(f.name, pa.string()) if f.type == pa.large_string()
                                  else f for f in table.schema]))
    return table.append_column("embedding", pa.FixedSizeListArray.from_arrays(flat, DIM))


def save_rows(table: pa.Table, path: Path) -> None:
    """Write rows as an uncompressed Arrow file (memory-mapped by the workers)."""
    feather.write_feather(table, path, compression="uncompressed")


def load_rows(path: Path) -> pa.Table:
    """Read rows written by save_rows."""
    return feather.read_table(path, memory_map=True)


@dataclass(frozen=True)
class Query:
    """One search: who (tenant, user scope), what, and the turns that count as right."""

    tenant: str
    user_id: str
    text: str
    evidence: tuple[TurnKey, ...] = ()


@dataclass(frozen=True)
class QuerySet:
    """Queries plus their vectors (row i of ``vectors`` embeds ``queries[i].text``)."""

    queries: list[Query]
    vectors: np.ndarray

    def __post_init__(self) -> None:
        if self.vectors.shape != (len(self.queries), DIM):
            raise ValueError(f"query vectors have shape {self.vectors.shape}, "
                             f"expected ({len(self.queries)}, {DIM})")

    def save(self, folder: Path, name: str) -> None:
        """Write ``name.json`` and ``name.npy`` into folder."""
        (folder / f"{name}.json").write_text(json.dumps([asdict(q) for q in self.queries]))
        np.save(folder / f"{name}.npy", self.vectors)

    @classmethod
    def load(cls, folder: Path, name: str) -> QuerySet:
        """Read a set written by save."""
        raw = json.loads((folder / f"{name}.json").read_text())
        queries = [Query(q["tenant"], q["user_id"], q["text"],
                         tuple((c, t) for c, t in q["evidence"])) for q in raw]
        return cls(queries, np.load(folder / f"{name}.npy"))


def scale_queries(root: Path, n: int, *, seed: int = 11, vectors: str = "random") -> QuerySet:
    """bench.scale's seeded queries (names, word subsets, misspellings) with vectors drawn by
    the generator the scale lake's rows came from (bench.scale.VECTORS)."""
    from bench.scale import bench_embedder, make_queries

    triples = make_queries(LakeStore(root), n, seed=seed)
    queries = [Query(t, u, q) for t, u, q in triples]
    return QuerySet(queries, bench_embedder(vectors, 5).encode([q.text for q in queries]))


def locomo_queries() -> tuple[QuerySet, datetime]:
    """LoCoMo's scored questions (categories 1-4) with MiniLM vectors from the bench cache,
    and the end of the last session (the as_of that keeps every turn visible)."""
    from bench.cache import CachedEmbedder
    from bench.locomo import TENANT, build, load
    from lake.embedding.sentence import SentenceTransformerEmbedder

    _, questions, last = build(load(), rich=False)
    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    vectors = embedder.encode([q.text for q in questions])
    if embedder.misses:
        embedder.save()
    queries = [Query(TENANT, q.user_id, q.text, tuple(sorted(q.evidence))) for q in questions]
    return QuerySet(queries, vectors), last
