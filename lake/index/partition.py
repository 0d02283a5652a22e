"""Build and open one partition's index set (semantic, lexical, trigram) over its live rows.

``build_partition`` is a pure function of (partition, content_rows version, turn_logs version):
it reads only those snapshots, so it can run anywhere (a process, a Ray task) and give the same
artifacts. Rows are sorted by (user, conversation, turn, role, seq): a turn's rows are contiguous,
and so are a user's, so a user-scoped search reads one stretch of every index (tantivy skips
whole posting blocks, vector gathers are sequential, trigram probes are narrow slices).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather

from lake.embedding.passages import column_passages
from lake.errors import IndexUnavailable
from lake.index.lexical import LexicalDoc, LexicalIndex
from lake.index.manifest import MANIFEST_FILE, PartitionManifest, partition_dir, publish
from lake.index.once import Locked, once
from lake.index.passage_index import PassageIndex
from lake.index.segments import (
    PASSAGES_FOLDER,
    ROWS_FILE,
    SORT_KEY,
    SegmentedLexical,
    SegmentedPassages,
    SegmentedSemantic,
    Segments,
    TrigramPart,
    link_tree,
)
from lake.index.semantic import SemanticIndex
from lake.index.trigram import TrigramIndex
from lake.store import LakeStore
from lake.tables import EXCHANGE_ROLES, ROLES, Table

ROLE_ORDER = {role: i for i, role in enumerate(ROLES)}
_ROW_COLUMNS = ["row_id", "user_id", "conversation_id", "turn_id", "role", "seq", "event_type",
                "ts", "turn_at", "expires_at", "text"]
CONTENT_COLUMNS = [*_ROW_COLUMNS, "batch_id", "embedding", "embedding_model", "embedding_status",
                   "passage_embeddings"]
_LOG_COLUMNS = ["conversation_id", "turn_id", "batch_id", "expires_at"]
LOG_COLUMNS = _LOG_COLUMNS


def _segment_folders(folder: Path, manifest: PartitionManifest) -> list[Path]:
    """The folders of a build's live segments, base first (the build's own, ``folder``,
    last)."""
    return [folder.parent / name for name in manifest.live_segments[:-1]] + [folder]


def _folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class LiveRows(NamedTuple):
    """A partition's rows as an index build reads them."""

    rows: pl.DataFrame  # sorted; column ``embedded``: whether the row has a usable vector
    vectors: np.ndarray  # one per embedded row, in row order
    dim: int  # 0 when no row has a usable vector
    foreign: int  # rows embedded by another model, which the semantic index cannot use
    passages: np.ndarray  # the passage vectors of the embedded rows that have them
    passage_docs: np.ndarray  # each passage's row number, ascending


def live_rows(store: LakeStore, tenant: str, month: str, content_version: int,
              logs_version: int, model: str | None) -> LiveRows:
    """The partition's committed rows (joined to their TurnLog), sorted, with their vectors
    (:class:`LiveRows`). A row's ``expires_at`` is the earlier of its own and its turn's."""
    logs = store.read_partition(Table.TURN_LOGS, tenant, month, columns=_LOG_COLUMNS,
                                version=logs_version)
    content = store.read_partition(Table.CONTENT_ROWS, tenant, month, columns=CONTENT_COLUMNS,
                                   version=content_version)
    return joined_rows(content, logs, model)


def joined_rows(content: pa.Table, logs: pa.Table, model: str | None) -> LiveRows:
    """:func:`live_rows` of given content rows and TurnLogs (a partition, or what an
    append added to it)."""
    log_frame = pl.from_arrow(logs)
    frame = pl.from_arrow(content)
    assert isinstance(log_frame, pl.DataFrame) and isinstance(frame, pl.DataFrame)
    frame = (frame.join(log_frame.rename({"expires_at": "turn_expires_at"}),
                        on=["conversation_id", "turn_id", "batch_id"], how="inner")
             .with_columns(pl.min_horizontal("expires_at", "turn_expires_at").alias("expires_at"),
                           pl.col("role").replace_strict(ROLE_ORDER, default=99)
                           .alias("_role_order"))
             .sort(SORT_KEY, maintain_order=True))
    done = frame["embedding_status"] == "done"
    usable = (done & (frame["embedding_model"] == model)).fill_null(False) \
        if model is not None else pl.Series([False] * frame.height)
    foreign = int(done.sum()) - int(usable.sum())
    dim = 0
    if model is not None and usable.any():
        dim = len(frame.filter(usable)["embedding"][0])
    vectors = np.zeros((0, dim), dtype=np.float32)
    if dim:
        emb = frame.filter(usable)["embedding"]
        vectors = np.asarray(emb.explode().to_numpy(), dtype=np.float32).reshape(-1, dim)
    embedded = usable.to_numpy() if dim else np.zeros(frame.height, bool)
    passage_docs, passages = column_passages(frame["passage_embeddings"].to_arrow(), dim,
                                             embedded)
    rows = frame.select(_ROW_COLUMNS).with_columns(pl.Series("embedded", embedded))
    return LiveRows(rows, vectors, dim, foreign, passages, passage_docs)


def running_utf8_sizes(texts: pa.ChunkedArray) -> np.ndarray:
    """``[0, |t0|, |t0|+|t1|, ...]``: the running UTF-8 sizes of a string column (a null
    counts 0); Arrow reads each size from the column's offsets, no text is decoded."""
    if pa.types.is_string_view(texts.type):  # binary_length has no kernel for views
        texts = texts.cast(pa.large_string())
    sizes = pc.binary_length(texts).fill_null(0).to_numpy().astype(np.int64)
    out = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def turn_contexts(rows: pl.DataFrame) -> list[str]:
    """For each row, its turn's exchange: the user and assistant texts of the same turn.

    Summaries, anchors, notes and attachments stay out, so a role filter still decides whether
    those texts can match."""
    exchange = (rows.filter(pl.col("role").is_in(sorted(EXCHANGE_ROLES)))
                .group_by(["conversation_id", "turn_id"], maintain_order=True)
                .agg(pl.col("text").str.join("\n").alias("context")))
    joined = rows.select("conversation_id", "turn_id").join(
        exchange, on=["conversation_id", "turn_id"], how="left", maintain_order="left")
    return joined["context"].fill_null("").to_list()


def build_partition(store: LakeStore, tenant: str, month: str, *, content_version: int,
                    logs_version: int, model: str | None,
                    exact_max_rows: int | None = None) -> PartitionManifest:
    """Build and publish the index set of one partition at the given table versions: one
    base segment over all its live rows (the other segments it had are removed)."""
    manifest = write_partition(store, tenant, month, content_version=content_version,
                               logs_version=logs_version, model=model,
                               exact_max_rows=exact_max_rows)
    publish(store.root, manifest)
    return manifest


def write_partition(store: LakeStore, tenant: str, month: str, *, content_version: int,
                    logs_version: int, model: str | None,
                    exact_max_rows: int | None = None,
                    folder_prefix: str = "") -> PartitionManifest:
    """Write one base segment over the partition's live rows, beside the live segments, and
    return its manifest; nothing changes for readers until it is published.

    The segment's folder is its build id, after ``folder_prefix`` when one is given (a
    hidden folder, which publications leave alone: see lake.index.rebase)."""
    started = time.perf_counter()
    live = live_rows(store, tenant, month, content_version, logs_version, model)
    rows, dim, foreign = live.rows, live.dim, live.foreign
    read_seconds = time.perf_counter() - started
    build_id = new_segment_id()
    folder = partition_dir(store.root, tenant, month) / f"{folder_prefix}{build_id}"
    written = write_segment(folder, live, doc_offset=0, lexical_from=None,
                            exact_max_rows=exact_max_rows)
    semantic = written.semantic
    manifest = PartitionManifest(
        tenant=tenant, month=month, build_id=build_id, content_version=content_version,
        logs_version=logs_version,
        content_fingerprint=store.partition_fingerprints(
            Table.CONTENT_ROWS, content_version).get((tenant, month), ""),
        logs_fingerprint=store.partition_fingerprints(
            Table.TURN_LOGS, logs_version).get((tenant, month), ""),
        row_count=rows.height,
        turn_count=rows.select("conversation_id", "turn_id").n_unique() if rows.height else 0,
        embedded_rows=int(rows["embedded"].sum()), model=model if dim else None, dim=dim,
        semantic_kind=semantic.kind if semantic is not None else "none",
        built_at=datetime.now(UTC).isoformat(), build_seconds=time.perf_counter() - started,
        bytes=segment_bytes(folder), segments=[build_id], segment_rows=[rows.height],
        segment_text_bytes=[text_bytes(rows)],
        embedding_model=model, foreign_vectors=foreign,
        seconds_by_kind={"read": read_seconds, **written.seconds},
    )
    (folder / MANIFEST_FILE).write_text(manifest.to_json())
    return manifest


def new_segment_id() -> str:
    """A fresh, time-ordered segment folder name (to the microsecond: a cache keeps folders
    that sort after the newest live one, so a live writer's several segments a second must
    sort in the order they were made; names of the older to-the-second form sort first)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:8]}"


def text_bytes(rows: pl.DataFrame) -> int:
    """The UTF-8 bytes of the ``text`` column of ``rows`` (a null counts 0)."""
    if rows.height == 0:
        return 0
    return int(rows["text"].str.len_bytes().fill_null(0).sum())


def segment_bytes(folder: Path) -> dict[str, int]:
    """Bytes of each artifact of a segment folder."""
    return {name: _folder_bytes(folder / name)
            for name in (ROWS_FILE, "semantic", PASSAGES_FOLDER, "lexical", "trigram")
            if (folder / name).exists()}


class WrittenSegment(NamedTuple):
    """What :func:`write_segment` wrote: the segment's semantic index (None without vectors)
    and the seconds each artifact took (``rows``, ``semantic``, ``lexical``, ``trigram``)."""

    semantic: SemanticIndex | None
    seconds: dict[str, float]


def write_segment(folder: Path, live: LiveRows, *, doc_offset: int, lexical_from: Path | None,
                  exact_max_rows: int | None = None) -> WrittenSegment:
    """Write one segment's artifacts for ``live.rows`` (sorted) into a new ``folder``.

    The passage vectors of its long rows, when it has any, go to a passage index
    (lake.index.passage_index) beside the semantic index. The lexical index gets
    doc ids from ``doc_offset`` on, added to a hard-linked copy of ``lexical_from`` (the
    previous segment's lexical folder, which covers every earlier row) when given."""
    seconds: dict[str, float] = {}
    started = time.perf_counter()

    def took(kind: str) -> None:
        nonlocal started
        now = time.perf_counter()
        seconds[kind] = now - started
        started = now

    rows, vectors, dim = live.rows, live.vectors, live.dim
    folder.mkdir(parents=True, exist_ok=True)
    feather.write_feather(rows.to_arrow(), folder / ROWS_FILE, compression="uncompressed")
    texts = rows["text"].to_list()
    took("rows")
    semantic = None
    if dim and vectors.shape[0]:
        docs = np.flatnonzero(rows["embedded"].to_numpy()).astype(np.int64)
        semantic = (SemanticIndex.build(vectors, doc_ids=docs, rows=rows.height)
                    if exact_max_rows is None else
                    SemanticIndex.build(vectors, doc_ids=docs, rows=rows.height,
                                        exact_max_rows=exact_max_rows))
        semantic.save(folder / "semantic")
        if live.passage_docs.size:
            passages = (PassageIndex.build(live.passages, live.passage_docs)
                        if exact_max_rows is None else
                        PassageIndex.build(live.passages, live.passage_docs,
                                           exact_max_rows=exact_max_rows))
            passages.save(folder / PASSAGES_FOLDER)
        took("semantic")
    contexts = turn_contexts(rows)
    docs_in = (LexicalDoc(doc=doc_offset + i, text=t, role=r, user_id=u, conversation_id=c,
                          context=x)
               for i, (t, r, u, c, x) in enumerate(zip(texts, rows["role"].to_list(),
                                                       rows["user_id"].to_list(),
                                                       rows["conversation_id"].to_list(),
                                                       contexts, strict=True)))
    if lexical_from is None:
        LexicalIndex.build(folder / "lexical", docs_in)
    else:
        link_tree(lexical_from, folder / "lexical")
        LexicalIndex.extend(folder / "lexical", docs_in)
    took("lexical")
    TrigramIndex.build(texts).save(folder / "trigram")
    took("trigram")
    return WrittenSegment(semantic, seconds)


class PartitionIndex(Locked):
    """A live, opened partition index over its segments; artifacts are loaded on first use,
    once (under the view's lock: search threads share views), and shared read-only. Doc ids
    are row numbers in full-build order (see lake.index.segments), whatever the number of
    segments."""

    def __init__(self, folder: Path, manifest: PartitionManifest, *,
                 segments: Segments | None = None, columns: RowColumns | None = None) -> None:
        """The view of the build in ``folder``; ``segments`` and ``columns``: what
        :meth:`rebased` opened for it from the view of an earlier build."""
        super().__init__()
        self.folder = folder
        self.manifest = manifest
        self.name = f"{manifest.tenant}/{manifest.month}"  # ``tenant/month``
        # The live segments (base first), their artifacts opened on demand.
        self.segments = segments if segments is not None \
            else Segments(_segment_folders(folder, manifest), ROLE_ORDER)
        self._given_columns = columns

    def __repr__(self) -> str:
        return f"PartitionIndex({self.name}, build {self.manifest.build_id}, {self.folder})"

    def rebased(self, folder: Path, manifest: PartitionManifest) -> PartitionIndex:
        """The view of a newer build of this partition (in ``folder``), opened from what
        this view has opened: the artifacts of the segments it still holds
        (:meth:`Segments.rebased`) and, when the newer build only adds a segment and this
        view has decoded its columns, the layout and the columns extended by that segment,
        built here so the new view starts whole. The new view keeps no reference to this
        one."""
        if (manifest.tenant, manifest.month) != (self.manifest.tenant, self.manifest.month):
            raise ValueError(f"a view of {self.name} cannot be rebased on "
                             f"{manifest.tenant}/{manifest.month}")
        earlier = PartitionIndex.columns.computed(self)
        columns = None
        try:
            segments = self.segments.rebased(_segment_folders(folder, manifest))
            if earlier is not None and self.segments.folders == segments.folders[:-1]:
                layout = segments.layout
                if earlier.user_codes.size == int(layout.offsets[-2]):
                    columns = earlier.extended(segments.tables[-1], layout.globals_[-1])
        except OSError as exc:  # a newer build replaced this one while it was being opened
            raise IndexUnavailable(f"index rows at {folder} are unreadable: {exc}; "
                                   "search again") from exc
        return PartitionIndex(folder, manifest, segments=segments, columns=columns)

    @once
    def rows(self) -> pa.Table:
        """The partition's rows (memory-mapped Arrow when there is one segment)."""
        try:
            return self.segments.layout.rows
        except OSError as exc:  # a newer build replaced this one while it was being opened
            raise IndexUnavailable(f"index rows at {self.folder} are unreadable: {exc}; "
                                   "search again") from exc

    @once
    def text_bytes_before(self) -> np.ndarray:
        """Per doc ``d``, the UTF-8 bytes of the texts of docs ``0..d-1`` (one more entry
        than docs): a run of docs holds ``[end] - [start]`` bytes. Read from the text
        column's offsets, no text is decoded (~1.3 ms per 250,000 rows, once per view)."""
        return running_utf8_sizes(self.rows.column("text"))

    @once
    def columns(self) -> RowColumns:
        """Numpy views of the row columns used to compute scopes quickly: those
        :meth:`rebased` extended from the earlier view's, else decoded on first use."""
        if self._given_columns is not None:
            return self._given_columns
        rows = self.rows
        if len(self.manifest.live_segments) == 1:
            # read into memory that is freed after the decode: through the memory map, the
            # pages of these columns would stay in the process's RSS with the partition
            try:
                rows = feather.read_table(self.folder / ROWS_FILE, columns=_DECODED,
                                          memory_map=False)
            except OSError as exc:  # a newer build replaced this one while it was opened
                raise IndexUnavailable(f"index rows at {self.folder} are unreadable: {exc}; "
                                  "search again") from exc
        return RowColumns.from_rows(rows)

    @once
    def semantic(self) -> SemanticIndex | SegmentedSemantic | None:
        """The dense index, or None when no row of the partition is embedded."""
        parts = self.segments.semantic_parts
        if len(parts) == 1:
            return parts[0]
        if all(p is None for p in parts):
            return None
        return SegmentedSemantic(self.segments.layout, parts)

    @once
    def passages(self) -> PassageIndex | SegmentedPassages | None:
        """The passage vectors of the partition's long rows, or None when it has none."""
        parts = self.segments.passage_parts
        if all(p is None for p in parts):
            return None
        if len(parts) == 1:
            return parts[0]
        return SegmentedPassages(self.segments.layout, parts)

    @once
    def lexical(self) -> LexicalIndex | SegmentedLexical:
        """The BM25 index (the newest segment's holds every row)."""
        index = LexicalIndex.open(self.folder / "lexical")
        if len(self.manifest.live_segments) == 1:
            return index
        return SegmentedLexical(self.segments.layout, index)

    @once
    def trigram(self) -> TrigramIndex:
        """The base segment's trigram index (all rows when there is one segment)."""
        return self.segments.trigram_parts[0]

    def trigram_scopes(self, allowed: np.ndarray) -> list[TrigramPart]:
        """Each segment's trigram index with its part of the ``allowed`` row numbers."""
        return self.segments.trigram_scopes(allowed)


@dataclass(frozen=True)
class RowColumns:
    """Row attributes as numpy arrays (dictionary-coded strings, int64 microsecond times).

    ``user_docs[user_bounds[c]:user_bounds[c + 1]]`` are the doc ids (ascending) of the user
    whose code is ``c``: a user-scoped search touches only those rows, not the partition.
    ``turn_numbers[d]`` numbers the turn of doc ``d`` within the partition, and
    ``turn_first_docs[n]`` is the first doc of turn ``n``: fusion works on these numbers.

    Codes and turn numbers are labels, nothing more: search compares values through them and
    breaks ties by (conversation id, turn id) strings, never by a code. So a view extended by
    an append (:meth:`extended`) may number differently from a full decode of the same rows;
    every value it decodes, and which docs share a turn, are the same.

    Everything is worked out when the columns are made (:meth:`from_rows`, :meth:`extended`),
    the turns' neighbours included, so search threads share them read-only; the one thing
    that changes is the kept answers of :meth:`visible_docs`, under their own lock."""

    coded: dict[str, _Coded]  # user_id, conversation_id, role, turn_id: see the properties
    turn_at_us: np.ndarray
    expires_us: np.ndarray
    user_docs: np.ndarray
    user_bounds: np.ndarray
    turn_numbers: np.ndarray
    turn_first_docs: np.ndarray
    # The turns' (conversation code << 32 | turn code) keys, ascending, and each one's turn
    # number: how an extension finds the turn of an added row.
    turn_keys: np.ndarray
    turn_key_numbers: np.ndarray
    # Ascending first docs of each conversation's run of docs, then the doc count. Docs sort
    # by (user, conversation, turn, role, seq) in a full build and in every extension, so a
    # conversation's docs are one run and its turns are runs within it.
    conversation_starts: np.ndarray
    turn_ends: np.ndarray  # ascending docs at which a turn's run starts, then the doc count
    # Per turn number, the previous (row 0) and next (row 1) turn of its conversation by
    # turn time (equal times by turn id), -1 for none: see turn_neighbours.
    neighbour_turns: np.ndarray
    selections: _Selections  # visible_docs' kept answers for every user

    @property
    def user_codes(self) -> np.ndarray:
        """Per doc, its user's code: ``users[user_codes[doc]]``."""
        return self.coded["user_id"].codes

    @property
    def users(self) -> list[str]:
        """The users, by code."""
        return self.coded["user_id"].values

    @property
    def user_index(self) -> dict[str, int]:
        """A user's code."""
        return self.coded["user_id"].index

    @property
    def conversation_codes(self) -> np.ndarray:
        """Per doc, its conversation's code."""
        return self.coded["conversation_id"].codes

    @property
    def conversations(self) -> list[str]:
        """The conversations, by code."""
        return self.coded["conversation_id"].values

    @property
    def conversation_index(self) -> dict[str, int]:
        """A conversation's code."""
        return self.coded["conversation_id"].index

    @property
    def role_codes(self) -> np.ndarray:
        """Per doc, its role's code."""
        return self.coded["role"].codes

    @property
    def roles(self) -> list[str]:
        """The roles, by code."""
        return self.coded["role"].values

    @property
    def turn_codes(self) -> np.ndarray:
        """Per doc, its turn id's code."""
        return self.coded["turn_id"].codes

    @property
    def turn_names(self) -> list[str]:
        """The turn ids, by code: a row's turn id is ``turn_names[turn_codes[doc]]``."""
        return self.coded["turn_id"].values

    @classmethod
    def from_rows(cls, rows: pa.Table) -> RowColumns:
        """Decode the columns of a rows table once."""
        coded = {name: _Coded.of(rows.column(name)) for name in _CODED}
        keys, first_docs, numbers = np.unique(_turn_keys(coded), return_index=True,
                                              return_inverse=True)
        return cls._assemble(coded, _micros(rows.column("turn_at")),
                             _micros(rows.column("expires_at")),
                             numbers.astype(np.int64).ravel(), first_docs.astype(np.int64),
                             keys, np.arange(keys.size, dtype=np.int64), carried=None)

    def extended(self, added: pa.Table, at: np.ndarray) -> RowColumns:
        """These columns with ``added``'s rows inserted so that they become docs ``at``
        (ascending, one per row, in the merged numbering). Values new to the partition get
        the next codes and turn numbers, so the cost is array inserts and look-ups of the
        added rows, not a decode of every row again."""
        slots = at - np.arange(at.size, dtype=np.int64)  # docs they go before, here
        grown = {name: self.coded[name].extended(added.column(name).to_pylist(), slots)
                 for name in _CODED}
        added_keys = _turn_keys(grown, at)
        numbers = np.empty(at.size, np.int64)
        known = np.zeros(at.size, np.bool_)
        if self.turn_keys.size:
            place = np.minimum(np.searchsorted(self.turn_keys, added_keys),
                               self.turn_keys.size - 1)
            known = self.turn_keys[place] == added_keys
            numbers[known] = self.turn_key_numbers[place[known]]
        new_keys, new_of = np.unique(added_keys[~known], return_inverse=True)
        count = self.turn_first_docs.size
        numbers[~known] = count + new_of.ravel()
        place = np.searchsorted(self.turn_keys, new_keys)
        first_docs = np.concatenate([
            self.turn_first_docs + np.searchsorted(slots, self.turn_first_docs, side="right"),
            np.full(new_keys.size, np.iinfo(np.int64).max, np.int64)])
        np.minimum.at(first_docs, numbers, at)
        return self._assemble(
            grown,
            np.insert(self.turn_at_us, slots, _micros(added.column("turn_at"))),
            np.insert(self.expires_us, slots, _micros(added.column("expires_at"))),
            np.insert(self.turn_numbers, slots, numbers), first_docs,
            np.insert(self.turn_keys, place, new_keys),
            np.insert(self.turn_key_numbers, place,
                      np.arange(count, count + new_keys.size, dtype=np.int64)),
            carried=(self.neighbour_turns, at))

    @classmethod
    def _assemble(cls, coded: dict[str, _Coded], turn_at_us: np.ndarray,
                  expires_us: np.ndarray, turn_numbers: np.ndarray, turn_first_docs: np.ndarray,
                  turn_keys: np.ndarray, turn_key_numbers: np.ndarray, *,
                  carried: tuple[np.ndarray, np.ndarray] | None) -> RowColumns:
        """The columns with what is worked out from them. ``carried``: an extension's
        earlier neighbours and the docs it added, whose conversations alone are sorted
        again (turn numbers of existing turns are kept, so the others' neighbours hold);
        None: every turn's are worked out (one sort of the partition's turns)."""
        users, conversations = coded["user_id"], coded["conversation_id"]
        user_docs = np.argsort(users.codes, kind="stable").astype(np.int64)
        user_bounds = np.zeros(len(users.values) + 1, np.int64)
        np.cumsum(np.bincount(users.codes, minlength=len(users.values)), out=user_bounds[1:])
        changes = np.flatnonzero((users.codes[1:] != users.codes[:-1])
                                 | (conversations.codes[1:] != conversations.codes[:-1])) + 1
        starts = np.concatenate([[0], changes, [users.codes.size]]).astype(np.int64)
        turn_ends = np.append(np.flatnonzero(turn_numbers[1:] != turn_numbers[:-1]) + 1,
                              turn_numbers.size)
        neighbours = np.full((2, turn_first_docs.size), -1, np.int64)
        if carried is None:
            touched = np.arange(turn_first_docs.size, dtype=np.int64)
        else:
            earlier, at = carried
            neighbours[:, :earlier.shape[1]] = earlier
            runs = np.unique(np.searchsorted(starts, at, side="right") - 1)
            docs = np.concatenate([np.zeros(0, np.int64), *(
                np.arange(starts[r], starts[r + 1]) for r in runs.tolist())])
            touched = np.unique(turn_numbers[docs])
        _order_turns(touched, turn_first_docs, starts, turn_at_us, neighbours)
        return cls(coded, turn_at_us, expires_us, user_docs, user_bounds, turn_numbers,
                   turn_first_docs, turn_keys, turn_key_numbers, starts, turn_ends,
                   neighbours, _Selections())

    def docs_of_user(self, user_id: str) -> np.ndarray:
        """Ascending doc ids of one user's rows (empty when the user has none here)."""
        code = self.user_index.get(user_id)
        if code is None:
            return np.empty(0, dtype=np.int64)
        docs: np.ndarray = self.user_docs[self.user_bounds[code]:self.user_bounds[code + 1]]
        return docs

    def turn_docs(self, turns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per turn number in ``turns``, its docs as the half-open run ``[starts, ends)``: a
        turn's docs are one run, as docs sort by (user, conversation, turn, role, seq)."""
        starts = self.turn_first_docs[np.asarray(turns, np.int64)]
        ends = self.turn_ends[np.searchsorted(self.turn_ends, starts, side="right")]
        return starts, ends

    def turn_neighbours(self, turns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each turn number in ``turns``, the turn numbers just before and just after it
        in its conversation, ordered by turn time (equal times by turn id); -1 where there is
        none in this partition.

        Every turn's neighbours are worked out when the columns are made, one sort of the
        partition's turns (an extended view re-sorts only the conversations its append
        touched), so a search looks its few hundred turns up in two arrays. Worked out per
        conversation on demand in plain Python instead, this cost ~0.36 ms of a 5 ms
        user-scope search at 1M rows, most of it on conversations seen for the first time."""
        turns = np.asarray(turns, np.int64)
        both = self.neighbour_turns
        return both[0, turns], both[1, turns]

    def visible_docs(self, *, user_id: str | None, conversation_id: str | None,
                     roles: Collection[str], since_us: int | None, until_us: int | None,
                     as_of_us: int) -> np.ndarray:
        """Sorted docs of ``user_id`` (None: every user) in ``conversation_id`` (None: any)
        with one of ``roles``, turn time in ``[since_us, until_us)`` (None: open) and not
        expired at ``as_of_us``.

        A user's rows are a few hundred and checked on each call. Every user's (a tenant
        scope) are 0.3 ms per 160,000 rows and asked of every partition on each query, so
        the answer is kept per filter until the next of its rows expires (only a row's
        expiry changes the answer for a later ``as_of_us``)."""
        if user_id is not None:
            docs = self.docs_of_user(user_id)
            mask = self._matching(docs, conversation_id, roles, since_us, until_us)
            if mask is None:
                return np.empty(0, dtype=np.int64)
            mask &= self.expires_us[docs] > as_of_us
            mine: np.ndarray = docs[mask].astype(np.int64, copy=False)
            return mine
        key = (conversation_id, frozenset(roles), since_us, until_us)
        kept = self.selections.get(key, as_of_us)
        if kept is not None:
            return kept
        mask = self._matching(None, conversation_id, roles, since_us, until_us)
        if mask is None:
            return np.empty(0, dtype=np.int64)
        mask &= self.expires_us > as_of_us
        later = self.expires_us[mask]
        found = np.flatnonzero(mask).astype(np.int64, copy=False)
        found.flags.writeable = False  # shared by every search that asks the same
        self.selections.keep(key, as_of_us, int(later.min()) if later.size else 2**63 - 1,
                             found)
        return found

    def _matching(self, docs: np.ndarray | None, conversation_id: str | None,
                  roles: Collection[str], since_us: int | None, until_us: int | None
                  ) -> np.ndarray | None:
        """Per doc of ``docs`` (None: all), whether it passes the filters other than expiry;
        None when the conversation is not in this partition."""
        def pick(column: np.ndarray) -> np.ndarray:
            return column if docs is None else column[docs]

        mask = np.ones(self.turn_at_us.size if docs is None else docs.size, np.bool_)
        if conversation_id is not None:
            code = self.conversation_index.get(conversation_id)
            if code is None:
                return None
            mask &= pick(self.conversation_codes) == code
        wanted = self.role_mask(roles)
        if wanted is not None:
            mask &= wanted[pick(self.role_codes)]
        if since_us is not None:
            mask &= pick(self.turn_at_us) >= since_us
        if until_us is not None:
            mask &= pick(self.turn_at_us) < until_us
        return mask

    def role_mask(self, roles: Collection[str]) -> np.ndarray | None:
        """Per role code, whether it is one of ``roles``; None when every role here is."""
        wanted = [r in roles for r in self.roles]
        return None if all(wanted) else np.array(wanted, dtype=np.bool_)


def _order_turns(turns: np.ndarray, first_docs: np.ndarray, conversation_starts: np.ndarray,
                 turn_at_us: np.ndarray, out: np.ndarray) -> None:
    """Write the neighbours of ``turns`` (every turn of each conversation they touch) into
    ``out`` (RowColumns.neighbour_turns); a turn's first doc gives its time and, for equal
    times, its turn id's place."""
    first = first_docs[turns]
    runs = np.searchsorted(conversation_starts, first, side="right") - 1
    order = np.lexsort((first, turn_at_us[first], runs))
    ordered, same = turns[order], runs[order]
    linked = same[1:] == same[:-1]
    out[:, turns] = -1
    out[0, ordered[1:][linked]] = ordered[:-1][linked]
    out[1, ordered[:-1][linked]] = ordered[1:][linked]


class _Selections:
    """visible_docs' answers for every user, by filter: (as of, next expiry, docs), at most
    ``_VISIBLE_KEPT`` (filters with time bounds vary per query: the oldest goes). Search
    threads share a view, so they are read and changed under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[tuple[object, ...], tuple[int, int, np.ndarray]] = {}

    def get(self, key: tuple[object, ...], as_of_us: int) -> np.ndarray | None:
        """The docs kept for ``key`` while they hold at ``as_of_us``, else None."""
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and kept[0] <= as_of_us < kept[1]:
            return kept[2]
        return None

    def keep(self, key: tuple[object, ...], as_of_us: int, until_us: int,
             docs: np.ndarray) -> None:
        """Keep ``docs`` for ``key`` from ``as_of_us`` until ``until_us`` (the next expiry
        among them)."""
        with self._lock:
            if key not in self._kept and len(self._kept) >= _VISIBLE_KEPT:
                self._kept.pop(next(iter(self._kept)))
            self._kept[key] = (as_of_us, until_us, docs)


_CODED = ("user_id", "conversation_id", "role", "turn_id")
_DECODED = [*_CODED, "turn_at", "expires_at"]  # the columns RowColumns.from_rows reads
_VISIBLE_KEPT = 8  # tenant-scope selections kept per partition view (8 bytes a row)


def _micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    values: np.ndarray = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
    return values


def _turn_keys(coded: dict[str, _Coded], docs: np.ndarray | None = None) -> np.ndarray:
    """The turn keys of ``docs`` (default: every doc): a turn is a (conversation, turn id)
    pair, and its rows need not be adjacent."""
    conversations, turns = coded["conversation_id"].codes, coded["turn_id"].codes
    if docs is not None:
        conversations, turns = conversations[docs], turns[docs]
    return conversations.astype(np.int64) << 32 | turns.astype(np.int64)


@dataclass(frozen=True)
class _Coded:
    """A dictionary-coded string column: ``values[codes[doc]]`` is doc's value and
    ``index[value]`` its code. Views share ``values`` and ``index`` until an extension brings
    a new value, which then copies them (a kept older view must not see codes it lacks)."""

    codes: np.ndarray
    values: list[str]
    index: dict[str, int]

    @classmethod
    def of(cls, column: pa.ChunkedArray) -> _Coded:
        encoded = column.combine_chunks().dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
        values = encoded.dictionary.to_pylist()
        return cls(codes, values, {v: i for i, v in enumerate(values)})

    def extended(self, added: list[str], slots: np.ndarray) -> _Coded:
        """The column with ``added`` inserted before docs ``slots``; a value it has not seen
        gets the next code."""
        index, values = self.index, self.values
        codes = np.empty(len(added), np.int32)
        for i, value in enumerate(added):
            code = index.get(value)
            if code is None:
                if index is self.index:
                    index, values = dict(index), list(values)
                code = index[value] = len(values)
                values.append(value)
            codes[i] = code
        return _Coded(np.insert(self.codes, slots, codes), values, index)
