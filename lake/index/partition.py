"""Build and open one partition's index set (semantic, lexical, trigram) over its live rows.

``build_partition`` is a pure function of (partition, content_rows version, turn_logs version):
it reads only those snapshots, so it can run anywhere (a process, a Ray task) and give the same
artifacts. Rows are sorted by (user, conversation, turn, role, seq): a turn's rows are contiguous,
and so are a user's, so a user-scoped search reads one stretch of every index (tantivy skips
whole posting blocks, vector gathers are sequential, trigram probes are narrow slices).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.feather as feather

from lake.errors import IndexError_
from lake.index.lexical import LexicalDoc, LexicalIndex
from lake.index.manifest import MANIFEST_FILE, PartitionManifest, partition_dir, publish
from lake.index.semantic import SemanticIndex
from lake.index.trigram import TrigramIndex
from lake.store import LakeStore
from lake.tables import ROLES, Table

ROWS_FILE = "rows.arrow"
ROLE_ORDER = {role: i for i, role in enumerate(ROLES)}
_ROW_COLUMNS = ["row_id", "user_id", "conversation_id", "turn_id", "role", "seq", "event_type",
                "ts", "turn_at", "expires_at", "text"]


def _folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def live_rows(store: LakeStore, tenant: str, month: str, content_version: int,
              logs_version: int, model: str | None) -> tuple[pl.DataFrame, np.ndarray, int]:
    """The partition's committed rows (joined to their TurnLog), sorted, with their vectors.

    Returns (rows, vectors, dim). A row's ``expires_at`` is the earlier of its own and its
    turn's. Rows without an embedding from ``model`` get a zero vector (never returned).
    """
    part = (ds.field("tenant") == tenant) & (ds.field("month") == month)
    logs = pl.from_arrow(store.read(
        Table.TURN_LOGS, version=logs_version, filter=part,
        columns=["conversation_id", "turn_id", "batch_id", "expires_at"]))
    assert isinstance(logs, pl.DataFrame)
    content = store.read(Table.CONTENT_ROWS, version=content_version, filter=part,
                         columns=[*_ROW_COLUMNS, "batch_id", "embedding", "embedding_model",
                                  "embedding_status"])
    frame = pl.from_arrow(content)
    assert isinstance(frame, pl.DataFrame)
    frame = (frame.join(logs.rename({"expires_at": "turn_expires_at"}),
                        on=["conversation_id", "turn_id", "batch_id"], how="inner")
             .with_columns(pl.min_horizontal("expires_at", "turn_expires_at").alias("expires_at"),
                           pl.col("role").replace_strict(ROLE_ORDER, default=99)
                           .alias("_role_order"))
             .sort(["user_id", "conversation_id", "turn_id", "_role_order", "seq"]))
    usable = (frame["embedding_status"] == "done") & (frame["embedding_model"] == model) \
        if model is not None else pl.Series([False] * frame.height)
    dim = 0
    if model is not None and usable.any():
        first = frame.filter(usable)["embedding"][0]
        dim = len(first)
    vectors = np.zeros((frame.height, dim), dtype=np.float32)
    if dim:
        idx = np.flatnonzero(usable.to_numpy())
        emb = frame["embedding"].gather(idx.tolist())
        vectors[idx] = np.asarray(emb.explode().to_numpy(), dtype=np.float32).reshape(-1, dim)
    rows = frame.select(_ROW_COLUMNS).with_columns(
        pl.Series("embedded", usable.to_numpy() if dim else np.zeros(frame.height, bool)))
    return rows, vectors, dim


def turn_contexts(rows: pl.DataFrame) -> list[str]:
    """For each row, its turn's exchange: the user and assistant texts of the same turn.

    Summaries, anchors, notes and attachments stay out, so a role filter still decides whether
    those texts can match."""
    exchange = (rows.filter(pl.col("role").is_in(["user", "assistant"]))
                .group_by(["conversation_id", "turn_id"], maintain_order=True)
                .agg(pl.col("text").str.join("\n").alias("context")))
    joined = rows.select("conversation_id", "turn_id").join(
        exchange, on=["conversation_id", "turn_id"], how="left", maintain_order="left")
    return joined["context"].fill_null("").to_list()


def build_partition(store: LakeStore, tenant: str, month: str, *, content_version: int,
                    logs_version: int, model: str | None,
                    exact_max_rows: int | None = None) -> PartitionManifest:
    """Build and publish the index set of one partition at the given table versions."""
    started = time.perf_counter()
    rows, vectors, dim = live_rows(store, tenant, month, content_version, logs_version, model)
    build_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    folder = partition_dir(store.root, tenant, month) / build_id
    folder.mkdir(parents=True, exist_ok=True)
    feather.write_feather(rows.to_arrow(), folder / ROWS_FILE, compression="uncompressed")
    texts = rows["text"].to_list()
    semantic = (SemanticIndex.build(vectors) if exact_max_rows is None
                else SemanticIndex.build(vectors, exact_max_rows=exact_max_rows)) if dim else None
    if semantic is not None:
        semantic.save(folder / "semantic")
    contexts = turn_contexts(rows)
    LexicalIndex.build(folder / "lexical", (
        LexicalDoc(doc=i, text=t, role=r, user_id=u, conversation_id=c, context=x)
        for i, (t, r, u, c, x) in enumerate(zip(texts, rows["role"].to_list(),
                                                rows["user_id"].to_list(),
                                                rows["conversation_id"].to_list(), contexts,
                                                strict=True))))
    TrigramIndex.build(texts).save(folder / "trigram")
    fingerprints = store.partition_fingerprints(Table.CONTENT_ROWS, content_version)
    log_prints = store.partition_fingerprints(Table.TURN_LOGS, logs_version)
    manifest = PartitionManifest(
        tenant=tenant, month=month, build_id=build_id, content_version=content_version,
        logs_version=logs_version,
        content_fingerprint=fingerprints.get((tenant, month), ""),
        logs_fingerprint=log_prints.get((tenant, month), ""),
        row_count=rows.height,
        turn_count=rows.select("conversation_id", "turn_id").n_unique() if rows.height else 0,
        embedded_rows=int(rows["embedded"].sum()), model=model if dim else None, dim=dim,
        semantic_kind=semantic.kind if semantic is not None else "none",
        built_at=datetime.now(UTC).isoformat(), build_seconds=time.perf_counter() - started,
        bytes={name: _folder_bytes(folder / name)
               for name in (ROWS_FILE, "semantic", "lexical", "trigram")
               if (folder / name).exists()},
    )
    (folder / MANIFEST_FILE).write_text(manifest.to_json())
    publish(store.root, manifest)
    return manifest


@dataclass
class PartitionIndex:
    """A live, opened partition index; artifacts are loaded lazily and shared read-only."""

    folder: Path
    manifest: PartitionManifest

    @cached_property
    def name(self) -> str:
        """``tenant/month``."""
        return f"{self.manifest.tenant}/{self.manifest.month}"

    @cached_property
    def rows(self) -> pa.Table:
        """The partition's rows (memory-mapped Arrow)."""
        try:
            return feather.read_table(self.folder / ROWS_FILE, memory_map=True)
        except OSError as exc:  # a newer build replaced this one while it was being opened
            raise IndexError_(f"index rows at {self.folder} are unreadable: {exc}; "
                              "search again") from exc

    @cached_property
    def columns(self) -> RowColumns:
        """Numpy views of the row columns used to compute scopes quickly."""
        return RowColumns.from_rows(self.rows)

    @cached_property
    def semantic(self) -> SemanticIndex | None:
        """The FAISS index, or None when no row of the partition is embedded."""
        path = self.folder / "semantic"
        return SemanticIndex.load(path) if path.exists() else None

    @cached_property
    def lexical(self) -> LexicalIndex:
        """The BM25 index."""
        return LexicalIndex.open(self.folder / "lexical")

    @cached_property
    def trigram(self) -> TrigramIndex:
        """The trigram index."""
        return TrigramIndex.load(self.folder / "trigram")


@dataclass(frozen=True)
class RowColumns:
    """Row attributes as numpy arrays (dictionary-coded strings, int64 microsecond times).

    ``user_docs[user_bounds[c]:user_bounds[c + 1]]`` are the doc ids (ascending) of the user
    whose code is ``c``: a user-scoped search touches only those rows, not the partition.
    ``turn_numbers[d]`` numbers the turn of doc ``d`` within the partition, and
    ``turn_first_docs[n]`` is the first doc of turn ``n``: fusion works on these numbers."""

    user_codes: np.ndarray
    users: list[str]
    conversation_codes: np.ndarray
    conversations: list[str]
    role_codes: np.ndarray
    roles: list[str]
    turn_at_us: np.ndarray
    expires_us: np.ndarray
    turn_ids: list[str]
    user_docs: np.ndarray
    user_bounds: np.ndarray
    user_index: dict[str, int]
    conversation_index: dict[str, int]
    turn_numbers: np.ndarray
    turn_first_docs: np.ndarray

    @classmethod
    def from_rows(cls, rows: pa.Table) -> RowColumns:
        """Decode the columns of a rows table once."""
        def coded(name: str) -> tuple[np.ndarray, list[str]]:
            encoded = rows.column(name).combine_chunks().dictionary_encode()
            return (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32),
                    encoded.dictionary.to_pylist())

        users, user_list = coded("user_id")
        convs, conv_list = coded("conversation_id")
        roles, role_list = coded("role")

        def micros(name: str) -> np.ndarray:
            values: np.ndarray = rows.column(name).cast(pa.int64()).to_numpy(
                zero_copy_only=False)
            return values

        user_docs = np.argsort(users, kind="stable").astype(np.int64)
        user_bounds = np.zeros(len(user_list) + 1, np.int64)
        np.cumsum(np.bincount(users, minlength=len(user_list)), out=user_bounds[1:])
        turn_codes, turn_list = coded("turn_id")
        # a turn is a (conversation, turn id) pair; its rows need not be adjacent
        pairs = convs.astype(np.int64) * max(len(turn_list), 1) + turn_codes
        _, first_docs, turn_numbers = np.unique(pairs, return_index=True, return_inverse=True)
        return cls(users, user_list, convs, conv_list, roles, role_list,
                   micros("turn_at"), micros("expires_at"),
                   [turn_list[c] for c in turn_codes.tolist()], user_docs, user_bounds,
                   {u: i for i, u in enumerate(user_list)},
                   {c: i for i, c in enumerate(conv_list)},
                   turn_numbers.astype(np.int64).ravel(), first_docs.astype(np.int64))

    def docs_of_user(self, user_id: str) -> np.ndarray:
        """Ascending doc ids of one user's rows (empty when the user has none here)."""
        code = self.user_index.get(user_id)
        if code is None:
            return np.empty(0, dtype=np.int64)
        docs: np.ndarray = self.user_docs[self.user_bounds[code]:self.user_bounds[code + 1]]
        return docs

    def role_mask(self, roles: Collection[str]) -> np.ndarray | None:
        """Per role code, whether it is one of ``roles``; None when every role here is."""
        wanted = [r in roles for r in self.roles]
        return None if all(wanted) else np.array(wanted, dtype=np.bool_)
