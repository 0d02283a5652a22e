"""Passage vectors of a segment's long rows: each long row's best passage for a query (MaxP).

A row whose text is longer than the model reads carries one vector, pooled from its passages
(lake.embedding.passages), and the passages' own vectors beside it (``passage_embeddings``).
The pooled vector is what the semantic index holds and what a turn's exchange sums; this index
holds the passages, so that a long row matching a query in one of its passages is scored by
that passage's cosine, not by a sum that the row's other passages pull away from the query.

The passages are themselves a :class:`~lake.index.semantic.SemanticIndex` (passage ``i`` is
its doc ``i``): a user's passages are scored whole, exactly, and a wide scope over many goes
through the same calibrated inverted file as rows do, asked for as many nearest passages as
the search asks rows of the semantic index. A partition without long rows has no passage index
and costs nothing.

On-disk layout of a saved index directory: the semantic index's files (see
lake.index.semantic) over the passages, and::

    rows.npy        int64 (passages,), the doc id of each passage's row, ascending
    passages.json   format and sizes (written last: its presence = complete)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lake.errors import IndexUnavailable
from lake.index.semantic import SemanticIndex
from lake.location import atomic_write

FORMAT_VERSION = 1
_META, _ROWS = "passages.json", "rows.npy"
# A scope of up to this many passages (a user's, in any partition seen so far) is scored
# whole, a gather and one product: cheaper than a top-k search's bookkeeping, and exact.
WHOLE_SCOPE_PASSAGES = 4096


class RowPassages(NamedTuple):
    """The passages of some rows, in row order: each one's row (doc id), its place among its
    row's passages (0 first), how many its row has, and its vector."""

    rows: np.ndarray
    places: np.ndarray
    counts: np.ndarray
    vectors: np.ndarray


class PassageIndex:
    """The passage vectors of the long rows of one segment, by doc id."""

    def __init__(self, index: SemanticIndex, rows: np.ndarray) -> None:
        rows = np.asarray(rows, np.int64)
        if rows.shape != (len(index),):
            raise IndexUnavailable(f"passage index needs one doc id per passage, not {rows.shape} "
                                   f"for {len(index)}")
        if rows.size > 1 and bool((rows[1:] < rows[:-1]).any()):
            raise IndexUnavailable("passage doc ids must be ascending")
        self._index = index
        self._rows = rows

    @classmethod
    def build(cls, vectors: np.ndarray, rows: np.ndarray, *,
              exact_max_rows: int | None = None) -> PassageIndex:
        """Index passage ``vectors`` (``(passages, dim)``, unit rows), passage ``i`` of the
        row with doc id ``rows[i]`` (ascending); ``exact_max_rows`` as for
        :meth:`SemanticIndex.build`."""
        rows = np.asarray(rows, np.int64)
        if rows.shape != (np.asarray(vectors).shape[0],):
            raise IndexUnavailable(f"passage index needs one doc id per passage, not {rows.shape} "
                                   f"for {np.asarray(vectors).shape[0]}")
        index = (SemanticIndex.build(vectors) if exact_max_rows is None
                 else SemanticIndex.build(vectors, exact_max_rows=exact_max_rows))
        return cls(index, rows)

    @property
    def dim(self) -> int:
        """Vector width."""
        return self._index.dim

    @property
    def kind(self) -> str:
        """The passages' semantic index kind (``flat``, ``ivf``, ``hnsw``)."""
        return self._index.kind

    def __len__(self) -> int:
        """Number of passages."""
        return int(self._rows.size)

    def save(self, directory: Path) -> None:
        """Write the index into ``directory`` (created if needed)."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _META).unlink(missing_ok=True)  # a crash mid-save leaves no index
        with open(directory / _ROWS, "wb") as out:
            np.save(out, self._rows)
        self._index.save(directory)
        meta = {"format": FORMAT_VERSION, "passages": len(self),
                "rows": int(np.unique(self._rows).size)}
        atomic_write(directory / _META, json.dumps(meta, indent=2).encode(), durable=False)

    @classmethod
    def load(cls, directory: Path) -> PassageIndex:
        """Open an index written by :meth:`save` (the vectors memory-mapped)."""
        try:
            meta = json.loads((directory / _META).read_text())
            rows = np.load(directory / _ROWS)
        except (OSError, ValueError) as exc:
            raise IndexUnavailable(f"passage index at {directory} is missing or damaged: "
                                   f"{exc}") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION \
                or meta.get("passages") != rows.size:
            raise IndexUnavailable(f"passage index at {directory} has inconsistent parts")
        return cls(SemanticIndex.load(directory), rows)

    def best(self, query: np.ndarray, allowed: np.ndarray | None = None, *, limit: int = 50
             ) -> tuple[np.ndarray, np.ndarray]:
        """``(docs, cosines)``: up to ``limit`` rows (among ``allowed``, sorted doc ids, when
        given) by the cosine of ``query`` (a unit vector) with their best passage, ascending
        by doc. Exact when the scope holds at most :data:`WHOLE_SCOPE_PASSAGES` passages;
        else the rows of the ``limit`` nearest passages, each with its best among them, as
        the semantic index finds them."""
        scope = None if allowed is None else self._passages_of(np.asarray(allowed, np.int64))
        if scope is not None and scope.size <= WHOLE_SCOPE_PASSAGES:
            numbers, vectors = self._index.vectors(scope)
            cosines = np.einsum("ij,j->i", vectors,
                                np.asarray(query, vectors.dtype)).astype(np.float64)
            docs, cosines = _best_per_doc(self._rows[numbers], cosines)
            if docs.size > limit:
                keep = np.sort(np.argsort(-cosines, kind="stable")[:limit])
                docs, cosines = docs[keep], cosines[keep]
            return docs, cosines
        found = self._index.search(query, allowed=scope, limit=limit)
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        pairs = np.array(found, np.float64)
        docs = self._rows[pairs[:, 0].astype(np.int64)]
        order = np.argsort(docs, kind="stable")
        return _best_per_doc(docs[order], pairs[order, 1])

    def of_rows(self, docs: np.ndarray) -> RowPassages:
        """The passages of the rows ``docs`` (sorted doc ids) that have them."""
        numbers, vectors = self._index.vectors(self._passages_of(np.asarray(docs, np.int64)))
        rows = self._rows[numbers]
        first = np.searchsorted(self._rows, rows, side="left")
        return RowPassages(rows, numbers - first,
                           np.searchsorted(self._rows, rows, side="right") - first, vectors)

    def _passages_of(self, allowed: np.ndarray) -> np.ndarray:
        """The sorted passage numbers of the rows ``allowed``: whichever of the two lists is
        shorter is looked up in the other."""
        rows = self._rows
        if allowed.size < rows.size:
            lo = np.searchsorted(rows, allowed, side="left")
            counts = np.searchsorted(rows, allowed, side="right") - lo
            keep = counts > 0
            lo, counts = lo[keep], counts[keep]
            starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
            spans: np.ndarray = np.arange(int(counts.sum()), dtype=np.int64) + starts
            return spans
        if not allowed.size:
            return np.zeros(0, np.int64)
        seen = np.minimum(np.searchsorted(allowed, rows), allowed.size - 1)
        out: np.ndarray = np.flatnonzero(allowed[seen] == rows).astype(np.int64)
        return out


def _best_per_doc(docs: np.ndarray, cosines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each doc of ``docs`` (ascending, repeated) once, with its largest cosine."""
    if not docs.size:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    starts = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
    return docs[starts], np.maximum.reduceat(cosines, starts)


def raised_by_passages(found: list[tuple[int, float]], docs: np.ndarray, cosines: np.ndarray,
                       limit: int) -> list[tuple[int, float]]:
    """The top ``limit`` ``(doc, score)`` of a semantic search's ``found`` rows (its top
    ``limit`` by the rows' own vectors, best first) and the rows :meth:`PassageIndex.best`
    gave over the same scope (``docs``, with their best passage's ``cosines``), each scoring
    the larger of its two cosines, best first, ties by doc. A row found only by a passage
    enters."""
    if not docs.size:
        return found
    every = np.concatenate([np.array([d for d, _ in found], np.int64), docs])
    scores = np.concatenate([np.array([s for _, s in found], np.float64), cosines])
    by_doc = np.argsort(every, kind="stable")
    every, best = _best_per_doc(every[by_doc], scores[by_doc])
    top = np.lexsort((every, -best))[:limit]
    return list(zip(every[top].tolist(), best[top].tolist(), strict=True))
