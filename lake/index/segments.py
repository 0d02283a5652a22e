"""Segmented partition indexes: a base segment plus small delta segments, read as one index.

A partition's live build lists its segments, base first (``PartitionManifest.segments``). Each
segment folder holds the rows it adds (``rows.arrow``, sorted like a full build), a FAISS index
of those rows' vectors and a trigram index of their texts. Its ``lexical`` folder holds a
tantivy index of *every* row up to and including that segment: a hard-linked copy of the
previous segment's lexical folder (tantivy never rewrites a segment file) plus one commit of
the new rows. Tantivy computes BM25 statistics (document count, document frequencies, average
field lengths) across its own segments, so scores equal those of an index built over the same
rows in one go, at a cost that depends on the new rows only.

Reading: the rows of all segments, concatenated base first, are numbered by their place in the
order a full build would give them (:class:`SegmentLayout`). Every segment is sorted by the same
key, so a segment's docs keep their relative order in that numbering: a scope maps to each
segment by binary search, each segment answers exactly (dense: inner products; trigram:
per-row similarities, which depend on no other row), and the merged top ``limit`` by (score,
doc) is the one index's answer, ties included.

Only appends become delta segments. A partition whose tables lost files since its build
(re-ingest, retention, erasure, table compaction) is rebuilt whole, so a replaced or removed row
is never served from an older segment; so is one whose embedding model changed.
"""

from __future__ import annotations

import bisect
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.feather as feather

from lake.index.lexical import LexicalIndex, ParsedQuery
from lake.index.once import Locked, once
from lake.index.passage_index import PassageIndex, RowPassages
from lake.index.semantic import SemanticIndex
from lake.index.trigram import TrigramIndex

PASSAGES_FOLDER = "passages"  # a segment's passage index (lake.index.passage_index), if any
ROWS_FILE = "rows.arrow"
SORT_KEY = ["user_id", "conversation_id", "turn_id", "_role_order", "seq"]
_LOCK_SUFFIX = ".lock"  # tantivy's lock files belong to one index folder, never shared


def link_tree(source: Path, target: Path) -> None:
    """Copy a folder as hard links (files are immutable once written); a plain copy where
    the file system refuses links."""
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_dir() or path.name.endswith(_LOCK_SUFFIX):
            continue
        try:
            os.link(path, target / path.name)
        except OSError:
            shutil.copy2(path, target / path.name)


@dataclass
class SegmentLayout:
    """The rows of a partition's segments in full-build order.

    ``order[g]`` is the concatenated position (base first) of the row numbered ``g``;
    ``globals_[s][i]`` is the number of segment ``s``'s row ``i`` (ascending in ``i``)."""

    rows: pa.Table
    order: np.ndarray
    inverse: np.ndarray
    offsets: np.ndarray
    globals_: list[np.ndarray]

    @classmethod
    def of(cls, tables: Sequence[pa.Table], role_order: dict[str, int]) -> SegmentLayout:
        """Number the rows of the given segment tables (base first) as a full build would."""
        sizes = np.array([t.num_rows for t in tables], np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if len(tables) == 1:
            ident = np.arange(int(sizes[0]), dtype=np.int64)
            return cls(tables[0], ident, ident, offsets, [ident])
        joined = pa.concat_tables(tables, promote_options="default")
        keys = pl.from_arrow(joined.select(["user_id", "conversation_id", "turn_id", "role",
                                            "seq"]))
        assert isinstance(keys, pl.DataFrame)
        keys = keys.with_columns(pl.col("role").replace_strict(role_order, default=99)
                                 .alias("_role_order"))
        order = keys.with_row_index("_at").sort(SORT_KEY, maintain_order=True)["_at"] \
            .to_numpy().astype(np.int64)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size, dtype=np.int64)
        return cls(joined.take(order), order, inverse, offsets,
                   [inverse[offsets[s]:offsets[s + 1]] for s in range(len(tables))])

    def extended(self, table: pa.Table, role_order: dict[str, int]) -> SegmentLayout | None:
        """This layout with one more segment's rows (sorted like a full build) added last: what
        :meth:`of` gives for the tables plus ``table``, at a cost of O(rows) array arithmetic
        instead of a sort and a take of every row. None where the incremental merge does not
        apply (a schema change, a missing key value); then :meth:`of` must be used.

        Each new row goes after every earlier row whose key is not greater (binary search
        over the sorted rows): the stable sort of :meth:`of` puts rows of equal key in
        segment order, base first, so both give the same numbering."""
        if table.schema != self.rows.schema or table.num_rows == 0:
            return None
        keys = _sort_keys(table, role_order)
        if keys is None:
            return None
        before = _SortedKeys(self.rows, role_order)
        try:
            slots = np.fromiter((bisect.bisect_right(before, key) for key in keys), np.int64,
                                len(keys))
        except _MissingKey:
            return None
        added = slots + np.arange(slots.size, dtype=np.int64)  # new rows' numbers

        def moved(numbers: np.ndarray) -> np.ndarray:
            shifted: np.ndarray = numbers + np.searchsorted(slots, numbers, side="right")
            return shifted

        total = int(self.offsets[-1]) + table.num_rows
        inverse = np.concatenate([moved(self.inverse), added])
        order = np.empty(total, np.int64)
        order[inverse] = np.arange(total, dtype=np.int64)
        pieces: list[pa.Table] = []
        start = 0
        for at, new in zip(slots.tolist(), range(table.num_rows), strict=True):
            if at > start:
                pieces.append(self.rows.slice(start, at - start))
            pieces.append(table.slice(new, 1))
            start = at
        if start < self.rows.num_rows:
            pieces.append(self.rows.slice(start))
        return SegmentLayout(pa.concat_tables(pieces), order, inverse,
                             np.append(self.offsets, total).astype(np.int64),
                             [moved(g) for g in self.globals_] + [added])

    def local(self, segment: int, allowed: np.ndarray) -> np.ndarray:
        """The segment's own doc ids among ``allowed`` (sorted row numbers), ascending."""
        return self.split(allowed)[segment]

    def split(self, allowed: np.ndarray) -> list[np.ndarray]:
        """Per segment, its own doc ids among ``allowed`` (sorted row numbers), ascending.

        One pass over ``allowed`` for every segment: a tenant-scope search allows every row,
        and looking each segment's rows up in it apart cost ~0.5 ms a segment and generator
        on a 20k-row partition."""
        segment_of, local_of = self._where
        if allowed.size == 0:
            return [np.empty(0, np.int64) for _ in self.globals_]
        segments = segment_of[allowed]
        # Stable: within a segment the local ids keep the ascending order of ``allowed``.
        by_segment = local_of[allowed][np.argsort(segments, kind="stable")]
        counts = np.bincount(segments, minlength=len(self.globals_))
        return list(np.split(by_segment, np.cumsum(counts)[:-1]))

    @cached_property
    def _where(self) -> tuple[np.ndarray, np.ndarray]:
        """For every row number, the segment holding it and its doc id there."""
        total = int(self.offsets[-1])
        segment_of = np.empty(total, np.int64)
        local_of = np.empty(total, np.int64)
        for s, numbers in enumerate(self.globals_):
            segment_of[numbers] = s
            local_of[numbers] = np.arange(numbers.size, dtype=np.int64)
        return segment_of, local_of


_KEY_COLUMNS = ("user_id", "conversation_id", "turn_id", "role", "seq")


class _MissingKey(Exception):
    """A row without one of the sort key's values (the full sort decides where it goes)."""


def _sort_keys(table: pa.Table, role_order: dict[str, int]) -> list[tuple[Any, ...]] | None:
    """The sort key of every row of a (small) table, as tuples; None if a value is missing."""
    columns = [table.column(name).to_pylist() for name in _KEY_COLUMNS]
    keys = []
    for user, conversation, turn, role, seq in zip(*columns, strict=True):
        if user is None or conversation is None or turn is None or seq is None:
            return None
        keys.append((user, conversation, turn, role_order.get(role, 99), seq))
    return keys


class _SortedKeys(Sequence[tuple[Any, ...]]):
    """The sort keys of sorted rows, read one at a time, for a binary search that reads
    ~log2(rows) of them instead of converting every row to Python."""

    def __init__(self, rows: pa.Table, role_order: dict[str, int]) -> None:
        self._columns = [rows.column(name) for name in _KEY_COLUMNS]
        self._role_order = role_order
        self._rows: int = rows.num_rows

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, i: Any) -> Any:
        user, conversation, turn, role, seq = (c[i].as_py() for c in self._columns)
        if user is None or conversation is None or turn is None or seq is None:
            raise _MissingKey
        return (user, conversation, turn, self._role_order.get(role, 99), seq)


def merge_top(found: list[tuple[np.ndarray, list[tuple[int, float]]]],
              limit: int) -> list[tuple[int, float]]:
    """Per-segment hits (segment row numbers, [(local doc, score)]) as one list of
    (row number, score), best first, ties by row number, cut to ``limit``."""
    docs: list[int] = []
    scores: list[float] = []
    for numbers, hits in found:
        if hits:
            local = np.fromiter((d for d, _ in hits), np.int64, len(hits))
            docs += numbers[local].tolist()
            scores += [s for _, s in hits]
    if not docs:
        return []
    d, s = np.array(docs, np.int64), np.array(scores, np.float64)
    order = np.lexsort((d, -s))[:limit]
    return list(zip(d[order].tolist(), s[order].tolist(), strict=True))


class SegmentedSemantic:
    """Dense search over several segments' FAISS indexes, as one index over all rows."""

    def __init__(self, layout: SegmentLayout, parts: list[SemanticIndex | None]) -> None:
        self._layout = layout
        self._parts = parts

    @property
    def valid_rows(self) -> int:
        """Rows with a vector, over all segments."""
        return sum(p.valid_rows for p in self._parts if p is not None)

    def search(self, query: np.ndarray, *, allowed: np.ndarray | None = None,
               limit: int = 50) -> list[tuple[int, float]]:
        """Up to ``limit`` (row number, cosine) pairs, best first, ties by row number."""
        found = []
        scopes = None if allowed is None else self._layout.split(allowed)
        for s, index in enumerate(self._parts):
            if index is None:
                continue
            numbers = self._layout.globals_[s]
            scope = None if scopes is None else scopes[s]
            if scope is not None and scope.size == 0:
                continue
            found.append((numbers, index.search(query, allowed=scope, limit=limit)))
        return merge_top(found, limit)

    def scores_exactly(self, size: int) -> bool:
        """Whether :meth:`search` over ``size`` allowed rows scores every one exactly: each
        segment does for its share of them (:meth:`SemanticIndex.scores_exactly`)."""
        return all(p.scores_exactly(size) for p in self._parts if p is not None)

    def vectors(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`SemanticIndex.vectors` over every segment, in row numbers."""
        found: list[np.ndarray] = []
        vectors: list[np.ndarray] = []
        for s, local in enumerate(self._layout.split(np.asarray(docs, np.int64))):
            index = self._parts[s]
            if index is None or local.size == 0:
                continue
            have, rows = index.vectors(local)
            found.append(self._layout.globals_[s][have])
            vectors.append(rows)
        if not found:
            dim = next((p.dim for p in self._parts if p is not None), 0)
            return np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
        numbers = np.concatenate(found)
        order = np.argsort(numbers, kind="stable")
        return numbers[order], np.concatenate(vectors)[order]


class SegmentedPassages:
    """The passage indexes of several segments, as one index over all rows."""

    def __init__(self, layout: SegmentLayout, parts: list[PassageIndex | None]) -> None:
        self._layout = layout
        self._parts = parts

    def best(self, query: np.ndarray, allowed: np.ndarray | None = None, *, limit: int = 50
             ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`PassageIndex.best` of every segment (its ``limit`` nearest passages), in
        row numbers."""
        scopes = None if allowed is None else self._layout.split(np.asarray(allowed, np.int64))
        docs: list[np.ndarray] = []
        cosines: list[np.ndarray] = []
        for s, index in enumerate(self._parts):
            if index is None or (scopes is not None and scopes[s].size == 0):
                continue
            local, best = index.best(query, None if scopes is None else scopes[s], limit=limit)
            docs.append(self._layout.globals_[s][local])
            cosines.append(best)
        if not docs:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        numbers = np.concatenate(docs)
        order = np.argsort(numbers, kind="stable")
        return numbers[order], np.concatenate(cosines)[order]


    def of_rows(self, docs: np.ndarray) -> RowPassages:
        """:meth:`PassageIndex.of_rows` over every segment, in row numbers."""
        found = []
        for s, local in enumerate(self._layout.split(np.asarray(docs, np.int64))):
            index = self._parts[s]
            if index is not None and local.size:
                part = index.of_rows(local)
                found.append(part._replace(rows=self._layout.globals_[s][part.rows]))
        if not found:
            dim = next((p.dim for p in self._parts if p is not None), 0)
            return RowPassages(*(np.zeros(0, np.int64),) * 3, np.zeros((0, dim), np.float32))
        joined = RowPassages(*(np.concatenate(column) for column in zip(*found, strict=True)))
        order = np.lexsort((joined.places, joined.rows))
        return RowPassages(*(column[order] for column in joined))


class SegmentedLexical:
    """The newest segment's tantivy index (it holds every row), answering in row numbers."""

    def __init__(self, layout: SegmentLayout, index: LexicalIndex) -> None:
        self._layout = layout
        self._index = index

    def __len__(self) -> int:
        """Number of indexed rows."""
        return len(self._index)

    def search(self, query: str | ParsedQuery, **options: object) -> list[tuple[int, float]]:
        """:meth:`LexicalIndex.search`, with docs as row numbers (ties by row number)."""
        hits = self._index.search(query, **options)  # type: ignore[arg-type]
        mapped = [(int(self._layout.inverse[d]), s) for d, s in hits]
        return sorted(mapped, key=lambda h: (-h[1], h[0]))

    def term_stats(self, query: str | ParsedQuery, *, user_id: str | None = None
                   ) -> tuple[int, list[int]]:
        """:meth:`LexicalIndex.term_stats` over every segment's rows."""
        return self._index.term_stats(query, user_id=user_id)


@dataclass
class TrigramPart:
    """One segment's trigram index with the scope mapped into it."""

    index: TrigramIndex
    allowed: np.ndarray
    numbers: np.ndarray | None  # segment doc -> row number (None: the same)


class Segments(Locked):
    """Opened artifacts of a partition's segment folders (base first), each loaded on first
    use, once, whichever search thread asks first.

    Segment folders never change once published, so the segments of a newer build reuse what
    these had opened (:meth:`rebased`): after an append only the new segment is loaded."""

    def __init__(self, folders: list[Path], role_order: dict[str, int], *,
                 opened: dict[tuple[str, Path], Any] | None = None,
                 layout: SegmentLayout | None = None) -> None:
        """The segments in ``folders``; ``opened`` and ``layout``: what :meth:`rebased` took
        from an earlier view's (a layout it extended; None: laid out on first use)."""
        super().__init__()
        self.folders = folders
        self._role_order = role_order
        self._opened: dict[tuple[str, Path], Any] = dict(opened or {})
        self._given_layout = layout

    def rebased(self, folders: list[Path]) -> Segments:
        """The segments of a newer build of the partition (``folders``, base first), with
        the artifacts these opened of the folders they share. When the newer build only adds
        a segment and these have laid out their rows, the new segment's rows are read and the
        layout extended by them here, so the new segments start with it (a live writer
        publishes a segment per turn, and sorting every row again grew with the partition).
        Nothing else is opened, and the new segments keep no reference to these."""
        live = set(folders)
        with self._lock:  # its threads may be loading more of it
            opened = {k: v for k, v in self._opened.items() if k[1] in live}
        earlier = Segments.layout.computed(self)
        layout = None
        if earlier is not None and self.folders == folders[:-1]:
            added = _read_rows(folders[-1])
            opened[("rows", folders[-1])] = added
            layout = earlier.extended(added, self._role_order)
        return Segments(folders, self._role_order, opened=opened, layout=layout)

    def _each(self, kind: str, load: Callable[[Path], Any]) -> list[Any]:
        out = []
        with self._lock:
            for folder in self.folders:
                key = (kind, folder)
                if key not in self._opened:
                    self._opened[key] = load(folder)
                out.append(self._opened[key])
        return out

    @once
    def tables(self) -> list[pa.Table]:
        """Each segment's rows (memory-mapped Arrow)."""
        return self._each("rows", _read_rows)

    @once
    def layout(self) -> SegmentLayout:
        """The rows in full-build order: the layout :meth:`rebased` extended from an
        earlier view's, else every segment's rows sorted."""
        if self._given_layout is not None:
            return self._given_layout
        return SegmentLayout.of(self.tables, self._role_order)

    @once
    def semantic_parts(self) -> list[SemanticIndex | None]:
        """Each segment's FAISS index (None where no row of it has a vector)."""
        return self._each("semantic", lambda f: SemanticIndex.load(f / "semantic")
                          if (f / "semantic").exists() else None)

    @once
    def passage_parts(self) -> list[PassageIndex | None]:
        """Each segment's passage index (None where no row of it has passages)."""
        return self._each("passages", lambda f: PassageIndex.load(f / PASSAGES_FOLDER)
                          if (f / PASSAGES_FOLDER).exists() else None)

    @once
    def trigram_parts(self) -> list[TrigramIndex]:
        """Each segment's trigram index."""
        return self._each("trigram", lambda f: TrigramIndex.load(f / "trigram"))

    def trigram_scopes(self, allowed: np.ndarray) -> list[TrigramPart]:
        """Per segment, its trigram index and the part of ``allowed`` it holds."""
        if len(self.folders) == 1:
            return [TrigramPart(self.trigram_parts[0], allowed, None)]
        out = []
        for s, (index, local) in enumerate(zip(self.trigram_parts, self.layout.split(allowed),
                                               strict=True)):
            if local.size:
                out.append(TrigramPart(index, local, self.layout.globals_[s]))
        return out


def _read_rows(folder: Path) -> pa.Table:
    """A segment's rows, memory-mapped."""
    return feather.read_table(folder / ROWS_FILE, memory_map=True)
