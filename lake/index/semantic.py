"""Semantic (vector) index of one partition: exact below a size threshold, IVF above it.

Doc ids are row positions ``0..n-1`` of the partition. Only rows with an embedding are stored:
the caller names their doc ids (``doc_ids``), or passes every row and lets all-zero (or
non-finite) vectors mark the rows without one; either way those rows take no space, never enter
the FAISS index and are never returned. The float rows are always saved as ``.npy`` and read
row by row on demand, so a search scoped to a small set of doc ids (one user's rows) is
answered exactly from just those rows, whatever the index kind; only wide or unscoped searches
on a large partition go through the approximate index.

The approximate index of a large partition is an inverted file (FAISS
``IndexIVFScalarQuantizer``; ``IndexIVFFlat`` in format 1), about sqrt(rows) lists, k-means
trained on a sample: its lists probed per query (``nprobe``) are calibrated at build time to
:data:`TARGET_RECALL`, and data on which that needs a large share of the lists (random vectors)
stays exact.  It replaced HNSW as the default because it builds in a second or two where the
graph took a minute for 160,000 rows (the 1M bench lake: 213 s of 253 s of the whole build), at
the same calibrated recall, and a filtered search needs no wider beam: the lists nearest the
query hold its in-scope neighbours too.  HNSW indexes saved before load and search as before,
and ``build(..., approximate="hnsw")`` still makes one.

Wide exact searches (a quarter or more of a partition's rows, at least :data:`SKETCH_MIN_ROWS`,
answered exactly: a flat partition, or a scope the approximate index cannot serve) go through
an 8-bit copy of the rows (a "sketch", 1/4 of the bytes): the sketch ranks every row
approximately, every row whose approximate score is within twice the sketch's largest error of
the ``limit``-th is re-scored from the float rows, and the top of those is the answer.  No
row of the exact top can fall outside that set, so the answer is the exact one (scores equal up
to float32 rounding).

Compact codes (format 2).  The float rows are kept once, in ``vectors.npy``, read with
``pread`` only for the rows a search scores exactly (a scope's rows, or a few candidates per
answer; the memory map serves a full scan, which the codes make rare).  What a wide search
scans is 8-bit codes (one value range per dimension, covering every row), memory-mapped from
the index files (FAISS ``IO_FLAG_MMAP``), so an opened index costs page cache for what searches
touch, not heap.  A flat index saves its sketch (``codes.faiss``, FAISS
``IndexScalarQuantizer``); an inverted file holds codes, not floats: its probed lists give
``RESCORE_FACTOR`` times the candidates asked for, re-scored exactly from the floats (the
calibration measures recall after that re-scoring), and searched over every list, with the
codes' largest error as margin, it is its own sketch.  Indexes of format 1 (float inverted
files, a sketch built in memory from the :data:`SKETCH_AFTER`-th wide search on) still open and
search as before; ``turnlake index build --full`` rebuilds them in format 3.

Half-precision rows (format 3).  ``vectors.npy`` holds float16 rows (half the bytes of format
2's float32; lake.embedding.precision): ``build`` rounds every unit row to float16 first, and
codes, calibration and code errors are all taken from those rounded rows, so every exact score
is exactly the cosine of the stored row, and the sketch's bound holds for the rows as stored.
Indexes of formats 1 and 2 (float32 rows) open and search as before.

On-disk layout of a saved index directory::

    semantic.json   kind, sizes and search parameters (written last: its presence = complete)
    vectors.npy     float16 (stored, dim), unit rows of the embedded docs only (float32
                    in formats 1 and 2)
    valid.npy       bool (stored,), all true (kept for the format)
    docs.npy        int64 (stored,), ascending doc id of each stored row (absent: 0..stored-1)
    hnsw.faiss      the FAISS index over the valid rows only: IndexIVFScalarQuantizer (kind
                    "ivf"; IndexIVFFlat in format 1) or IndexHNSWFlat (kind "hnsw")
    codes.faiss     kind "flat" (format 2): the 8-bit sketch of the valid rows
"""

from __future__ import annotations

import json
import math
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from lake.errors import IndexUnavailable, QueryError

EXACT_MAX_ROWS: int = 50_000  # above this many valid rows an approximate index is chosen
FORMAT_VERSION: int = 3
# format 1: float inverted files, sketches never saved; 2: float32 rows, 3: float16 rows
_READABLE_FORMATS = (1, 2, 3)
_STORED_DTYPE = np.float16  # of the rows saved; formats 1 and 2 saved float32
_ROW_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
HNSW_M: int = 32
HNSW_EF_CONSTRUCTION: int = 80
# efSearch is calibrated per index at build time: the smallest rung of _EF_LADDER whose recall@10
# on sample rows reaches TARGET_RECALL. The beam needed depends on the data far more than on
# its size: random 384-d unit vectors (no cluster structure) need ~1024 at 50k rows, while
# clustered text embeddings get there with a small fraction of that.
TARGET_RECALL: float = 0.95
DEFAULT_EF_SEARCH: int = 128  # used only when an index was saved without a calibrated value
_EF_LADDER: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048, 4096)
APPROXIMATE_KIND: str = "ivf"  # what build() makes above exact_max_rows
# nprobe is calibrated like ef: the smallest rung reaching TARGET_RECALL, and an inverted file
# that must probe more than 1/IVF_MAX_PROBED_SHARE of its lists is no cheaper than the exact
# 8-bit scan (a quarter of the float32 bytes) and is not kept.
_NPROBE_LADDER: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
IVF_MAX_PROBED_SHARE: int = 4
IVF_TRAIN_PER_LIST: int = 64  # k-means sample: rows per list (FAISS wants at least 39)
_CALIBRATION_QUERIES: int = 200
_CALIBRATION_K: int = 10
_SCORE_BLOCK_ROWS: int = 65_536
# A scope this small is scored exactly from the raw vectors: cheaper than steering the graph
# around millions of excluded nodes, and exact.
SMALL_SCOPE_ROWS: int = 20_000
SMALL_SCOPE_FRACTION: float = 0.05
# Filtered graph search widens its beam by 1/selectivity; this bounds the cost before we fall
# back to exact scoring of the scope.
_MAX_FILTERED_EF: int = 4096
# Exact searches over at least this many rows go through the sketch, once this index has had
# SKETCH_AFTER of them (building it costs a few dozen full scans; a one-off search never does).
SKETCH_MIN_ROWS: int = 20_000
SKETCH_AFTER: int = 3
_SKETCH_FIRST_K: int = 2048  # sketch candidates fetched first (more only when needed)
# Margin for float32 rounding in the sketch's and the exact inner products (each below 1e-4 for
# unit vectors of any dimension used here): a wider candidate set, never a wrong answer.
_SKETCH_SLACK: float = 1e-3
_SKETCH_CHUNK_ROWS: int = 32_768
# An inverted file of codes returns this many times the rows asked for (at least
# _RESCORE_MIN), which are then scored exactly from the float rows: the codes' rounding moves
# scores by up to ~1e-2, enough to reorder near neighbours, never by a factor-4 depth.
RESCORE_FACTOR: int = 4
_RESCORE_MIN: int = 40

_META = "semantic.json"
_VECTORS = "vectors.npy"
_VALID = "valid.npy"
_GRAPH = "hnsw.faiss"
_DOCS = "docs.npy"
_CODES = "codes.faiss"
# Far above the rounding error of a float32 dot product of unit vectors (~1e-6 at 1024-d).
_RESCORE_SLACK = 1e-4
_KINDS = ("flat", "hnsw", "ivf")


class SemanticIndex:
    """Inner-product search over unit vectors with optional doc-id scoping.

    Create one with :meth:`build` or :meth:`load`; ``kind`` is ``"flat"`` (exact, numpy over the
    raw vectors), ``"ivf"`` (FAISS ``IndexIVFFlat`` over the valid rows) or ``"hnsw"`` (FAISS
    ``IndexHNSWFlat``).
    """

    def __init__(
        self,
        *,
        kind: str,
        vectors: np.ndarray,
        valid: np.ndarray,
        graph: faiss.Index | None,
        ef_search: int = DEFAULT_EF_SEARCH,
        calibrated_recall: float | None = None,
        note: str | None = None,
        doc_ids: np.ndarray | None = None,
        rows: int | None = None,
        nprobe: int = 1,
        codes: faiss.Index | None = None,
        code_error: float | None = None,
        row_file: _RowFile | None = None,
    ) -> None:
        if kind not in _KINDS:
            raise IndexUnavailable(
                f"unknown semantic index kind {kind!r}; expected one of {_KINDS}")
        if (kind != "flat") != (graph is not None):
            raise IndexUnavailable(
                f"a {kind!r} semantic index {'needs' if graph is None else 'has no'} FAISS index")
        self.kind: str = kind
        self._vectors = vectors
        # a saved index reads the rows it scores with pread, not through the memory map: a
        # mapped file's pages count in the process's RSS, and the kernel maps 64 KB around
        # each page a gather faults in (~6 MB of floats a user-scope query at 1M rows)
        self._row_file = row_file
        self._valid = valid
        # Graph label i is doc id _valid_ids[i]: invalid rows never enter the graph.
        self._valid_ids = np.flatnonzero(valid).astype(np.int64)
        self._graph = graph
        # Stored row i is doc _docs[i] (ascending), of _rows docs in all; internally every
        # method works on stored rows, and search() translates at its edges.
        self._docs = (np.arange(vectors.shape[0], dtype=np.int64) if doc_ids is None
                      else np.asarray(doc_ids, dtype=np.int64))
        self._rows = int(vectors.shape[0] if rows is None else rows)
        self._stored = int(vectors.shape[0])
        self._identity = doc_ids is None or self._stored == self._rows
        self.ef_search = ef_search
        self.nprobe = _positive_int(nprobe, "nprobe", IndexUnavailable)
        self.calibrated_recall = calibrated_recall
        self.note = note  # why a large partition ended up exact, for the manifest
        # Scopes up to this many rows (or under SMALL_SCOPE_FRACTION) are scored exactly.
        self.small_scope_rows: int = SMALL_SCOPE_ROWS
        self._wide_searches = 0
        self._sketch: _Sketch | None = None
        # an inverted file of 8-bit codes: its scores are re-scored from the float rows
        self._coded = graph is not None and isinstance(graph, faiss.IndexIVFScalarQuantizer)
        if code_error is not None:
            sketch = graph if self._coded else codes
            if sketch is not None:
                self._sketch = _Sketch(sketch, float(code_error), saved=True)

    @property
    def dim(self) -> int:
        """Vector width."""
        return int(self._vectors.shape[1])

    @property
    def valid_rows(self) -> int:
        """Number of rows that have an embedding (the only rows search can return)."""
        return int(self._valid_ids.size)

    @property
    def ef_search(self) -> int:
        """HNSW beam width used for unscoped or wide searches (ignored by ``flat``)."""
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._ef_search = _positive_int(value, "ef_search", QueryError)

    def __len__(self) -> int:
        """Number of rows (doc ids), with an embedding or not."""
        return self._rows

    def describe(self) -> dict[str, Any]:
        """Parameters worth recording in a partition manifest."""
        info: dict[str, Any] = {
            "kind": self.kind, "metric": "inner_product", "dim": self.dim,
            "rows": len(self), "stored_rows": self._stored, "valid_rows": self.valid_rows,
        }
        if self.kind == "hnsw":
            info.update(hnsw_m=HNSW_M, ef_construction=HNSW_EF_CONSTRUCTION,
                        ef_search=self.ef_search, calibrated_recall=self.calibrated_recall)
        if self.kind == "ivf":
            assert self._graph is not None
            info.update(nlist=int(getattr(self._graph, "nlist")), nprobe=self.nprobe,  # noqa: B009
                        calibrated_recall=self.calibrated_recall)
        if self._sketch is not None and (self._sketch.saved or self._coded):
            info.update(codes="sq8", code_error=self._sketch.error)
        if self.note:
            info["note"] = self.note
        return info

    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        *,
        exact_max_rows: int = EXACT_MAX_ROWS,
        ef_search: int | None = None,
        threads: int | None = None,
        doc_ids: np.ndarray | None = None,
        rows: int | None = None,
        approximate: str = APPROXIMATE_KIND,
    ) -> SemanticIndex:
        """Index ``vectors`` (shape ``(n, dim)``); row ``i`` becomes doc id ``i``, or
        ``doc_ids[i]`` (ascending) of ``rows`` docs in all when given: then ``vectors`` need
        hold only the embedded docs' vectors.

        Rows that are all-zero or contain NaN/inf are marked invalid; other rows are
        re-normalized to unit length. More than ``exact_max_rows`` valid rows selects the
        ``approximate`` kind: ``"ivf"`` (the default), whose ``nprobe`` is calibrated to
        :data:`TARGET_RECALL`, or ``"hnsw"`` (also chosen by giving ``ef_search``), whose
        ``ef_search`` is calibrated unless given; if calibration shows the index cannot reach
        that recall while reading clearly fewer rows than an exact scan (unstructured data such
        as random high-dim vectors), the index falls back to ``flat`` and says so in
        :meth:`describe`.
        ``threads`` caps FAISS's OpenMP threads during the build (default: the CPUs this process
        may use); the previous setting is restored afterwards.
        """
        _positive_int(exact_max_rows, "exact_max_rows", IndexUnavailable, minimum=0)
        if ef_search is not None:
            _positive_int(ef_search, "ef_search", IndexUnavailable)
        matrix, valid = _clean_vectors(vectors)
        docs = (np.arange(matrix.shape[0], dtype=np.int64) if doc_ids is None
                else np.asarray(doc_ids, dtype=np.int64))
        if docs.shape != (matrix.shape[0],) or (docs.size > 1 and bool((docs[1:] <= docs[:-1])
                                                                     .any())):
            raise IndexUnavailable("doc_ids must be ascending, one per vector")
        total = matrix.shape[0] if rows is None else rows
        if docs.size and (int(docs[0]) < 0 or int(docs[-1]) >= total):
            raise IndexUnavailable(f"doc_ids must lie in 0..{total - 1}")
        if not valid.all():  # a zero or broken vector is a row without an embedding
            matrix, docs = np.ascontiguousarray(matrix[valid]), docs[valid]
            valid = np.ones(matrix.shape[0], dtype=np.bool_)
        matrix = stored_rows(matrix)
        if int(valid.sum()) <= exact_max_rows:
            return cls._flat(matrix, docs, total)
        if approximate not in ("ivf", "hnsw"):
            raise IndexUnavailable(f"approximate must be 'ivf' or 'hnsw', not {approximate!r}")
        if approximate == "ivf" and ef_search is None:
            return cls._build_ivf(matrix, valid, docs, total, threads)
        graph = faiss.IndexHNSWFlat(matrix.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        recall: float | None = None
        with _omp_threads(threads):
            graph.add(matrix)
            if ef_search is None:
                ef_search, recall = _calibrate_ef(graph, matrix)
                # A search touches roughly ef * 2M vectors at random addresses; when that is
                # not well below one sequential pass over all rows, exact is as fast and exact.
                if recall < TARGET_RECALL or ef_search * 2 * HNSW_M >= matrix.shape[0]:
                    return cls._rejected(matrix, docs, total, f"hnsw rejected: ef_search "
                                         f"{ef_search} reached recall@10 {recall:.3f}")
        return cls(kind="hnsw", vectors=matrix, valid=valid, graph=graph, ef_search=ef_search,
                   calibrated_recall=recall, doc_ids=docs, rows=total)

    @classmethod
    def _build_ivf(cls, matrix: np.ndarray, valid: np.ndarray, docs: np.ndarray, total: int,
                   threads: int | None) -> SemanticIndex:
        """An inverted file of 8-bit codes over ``matrix`` (unit rows, all valid), or flat when
        calibration finds it no cheaper than an exact scan."""
        count, dim = matrix.shape
        nlist = max(1, round(math.sqrt(count)))
        quantizer = faiss.IndexFlatIP(dim)
        # codes of the rows themselves, not of their residuals to the list centroid: a code's
        # error is then bounded by its value ranges alone, which cover every row (below)
        graph = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist,
                                              faiss.ScalarQuantizer.QT_8bit,
                                              faiss.METRIC_INNER_PRODUCT, False)
        graph.referenced_objects = [quantizer]  # type: ignore[attr-defined]  # FAISS keep-alive
        sample = np.random.default_rng(0).choice(count, size=min(count, IVF_TRAIN_PER_LIST * nlist),
                                                 replace=False)
        with _omp_threads(threads):
            graph.train(np.ascontiguousarray(matrix[np.sort(sample)]))
            # the sample's value ranges would clip the rows outside them (a residual code
            # trained on the sample had errors up to 0.11 where the rest have 0.01)
            faiss.copy_array_to_vector(_trained_ranges(_blocks(matrix)), graph.sq.trained)
            graph.add(matrix)
            # rungs past the kept share are not tried: such an index would not be kept anyway
            ladder = tuple(r for r in _NPROBE_LADDER if r * IVF_MAX_PROBED_SHARE <= nlist)
            nprobe, recall = _calibrate(graph, matrix, ladder or (1,), _ivf_params,
                                        rescore=True)
        if recall < TARGET_RECALL or nprobe * IVF_MAX_PROBED_SHARE > nlist:
            return cls._rejected(matrix, docs, total, f"ivf rejected: nprobe {nprobe} of "
                                 f"{nlist} lists reached recall@10 {recall:.3f}")
        return cls(kind="ivf", vectors=matrix, valid=valid, graph=graph, nprobe=nprobe,
                   calibrated_recall=recall, doc_ids=docs, rows=total,
                   code_error=_ivf_code_error(graph, matrix))

    @classmethod
    def _flat(cls, matrix: np.ndarray, docs: np.ndarray, total: int,
              note: str | None = None) -> SemanticIndex:
        """An exact index over ``matrix`` (unit rows, all valid), with its 8-bit sketch."""
        index = cls(kind="flat", vectors=matrix, valid=np.ones(matrix.shape[0], dtype=np.bool_),
                    graph=None, note=note, doc_ids=docs, rows=total)
        index.build_sketch()
        if index._sketch is not None:
            index._sketch.saved = True  # part of the index from now on: save() writes it
        return index

    @classmethod
    def _rejected(cls, matrix: np.ndarray, docs: np.ndarray, total: int, why: str
                  ) -> SemanticIndex:
        """The exact index a large partition keeps when its approximate index would not pay."""
        return cls._flat(matrix, docs, total, f"{why}, no cheaper than an exact scan")

    def save(self, directory: Path) -> None:
        """Write the index into ``directory`` (created if needed), replacing any previous one."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # The metadata file marks a complete index; drop it first so a crash mid-save leaves an
        # index that load() refuses rather than one with mismatched parts.
        (directory / _META).unlink(missing_ok=True)
        _atomic_write(directory / _VECTORS,
                      lambda p: np.save(p, np.asarray(self._vectors, dtype=_STORED_DTYPE)))
        _atomic_write(directory / _VALID, lambda p: np.save(p, self._valid))
        _atomic_write(directory / _DOCS, lambda p: np.save(p, self._docs))
        graph = self._graph
        if graph is not None:
            _atomic_write(directory / _GRAPH, lambda p: faiss.write_index(graph, str(p)))
        else:
            (directory / _GRAPH).unlink(missing_ok=True)
        sketch = self._sketch
        if graph is None and sketch is not None and sketch.saved:
            _atomic_write(directory / _CODES, lambda p: faiss.write_index(sketch.index, str(p)))
        else:
            (directory / _CODES).unlink(missing_ok=True)
        # an index of float rows only (an old one, saved again) is of the old format
        fmt = FORMAT_VERSION if "codes" in self.describe() or self.kind == "hnsw" or \
            not self.valid_rows else 1
        meta = {"format": fmt, **self.describe()}
        _atomic_write(directory / _META, lambda p: p.write_text(json.dumps(meta, indent=2)))

    @classmethod
    def load(cls, directory: Path) -> SemanticIndex:
        """Open an index written by :meth:`save`; the raw vectors are memory-mapped."""
        directory = Path(directory)
        meta_path = directory / _META
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError as exc:
            raise IndexUnavailable(f"no semantic index at {directory} (missing {_META})") from exc
        except (OSError, ValueError) as exc:
            raise IndexUnavailable(
                f"unreadable semantic index metadata {meta_path}: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("format") not in _READABLE_FORMATS:
            raise IndexUnavailable(f"semantic index at {directory} has unsupported format "
                                   f"{meta.get('format') if isinstance(meta, dict) else meta!r}")
        kind = meta.get("kind")
        try:
            # a plain ndarray over the map: np.memmap's indexing hooks cost more than a
            # scoped search's arithmetic
            vectors = np.asarray(np.load(directory / _VECTORS, mmap_mode="r"))
            valid = np.load(directory / _VALID)
            docs = np.load(directory / _DOCS) if (directory / _DOCS).exists() else None
            # inverted lists and flat codes are mapped, not read into the heap
            graph = (faiss.read_index(str(directory / _GRAPH),
                                      faiss.IO_FLAG_MMAP if kind == "ivf" else 0)
                     if kind in ("hnsw", "ivf") else None)
            codes = (faiss.read_index(str(directory / _CODES), faiss.IO_FLAG_MMAP_IFC)
                     if kind == "flat" and "codes" in meta else None)
        except (OSError, ValueError, RuntimeError) as exc:
            raise IndexUnavailable(f"semantic index at {directory} is damaged: {exc}") from exc
        row_file = _RowFile.of(vectors, directory / _VECTORS)
        ok = (vectors.ndim == 2 and vectors.dtype in _ROW_DTYPES and valid.dtype == np.bool_
              and valid.shape == (vectors.shape[0],)
              and meta.get("stored_rows", meta.get("rows")) == vectors.shape[0]
              and (docs is None or docs.shape == (vectors.shape[0],))
              and meta.get("dim") == vectors.shape[1])
        if ok and graph is not None:
            ok = graph.ntotal == int(valid.sum()) and graph.d == vectors.shape[1]
        if ok and "codes" in meta:
            sketch = graph if kind == "ivf" else codes
            ok = sketch is not None and sketch.ntotal == int(valid.sum()) and \
                isinstance(meta.get("code_error"), float)
        if not ok:
            raise IndexUnavailable(f"semantic index at {directory} has inconsistent parts")
        recall = meta.get("calibrated_recall")
        return cls(kind=str(kind), vectors=vectors, valid=valid, graph=graph,
                   ef_search=int(meta.get("ef_search", DEFAULT_EF_SEARCH)),
                   calibrated_recall=None if recall is None else float(recall),
                   note=meta.get("note"), doc_ids=docs, rows=int(meta["rows"]),
                   nprobe=int(meta.get("nprobe", 1)), codes=codes,
                   code_error=meta.get("code_error"), row_file=row_file)

    def search(
        self, query: np.ndarray, *, allowed: np.ndarray | None = None, limit: int = 50
    ) -> list[tuple[int, float]]:
        """Return up to ``limit`` ``(doc_id, score)`` pairs, best first (ties: lower id first).

        ``allowed`` restricts results to those doc ids (an int array, ideally sorted and
        unique). The score is the inner product with the normalized query, i.e. cosine.
        """
        q = unit_query(query, self.dim)
        _positive_int(limit, "limit", QueryError)
        scope = None if allowed is None else _check_allowed(allowed, len(self))
        if scope is not None and not self._identity:
            # doc ids -> stored rows; docs without a vector drop out here
            at = np.minimum(np.searchsorted(self._docs, scope), max(self._stored - 1, 0))
            scope = at[self._docs[at] == scope] if self._stored else at[:0]
        if scope is not None:
            scope = scope[self._valid[scope]]
        if self._graph is None or (scope is not None and self._is_small_scope(scope.size)):
            found = self._exact(q, scope, limit)
        else:
            found = self._approximate(q, scope, limit)
        if self._identity:
            return found
        return [(int(self._docs[i]), score) for i, score in found]

    def vectors(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored unit vectors of ``docs`` (sorted, unique doc ids): ``(found, vectors)``,
        ``found`` the ascending docs among them that have a vector, ``vectors[i]`` that of
        ``found[i]``."""
        docs = _check_allowed(np.asarray(docs, np.int64), len(self))
        if not self._stored or docs.size == 0:
            return docs[:0], np.zeros((0, self.dim), np.float32)
        if self._identity:  # doc i is stored row i
            kept = self._valid[docs]
            return docs[kept], self._rows_of(docs[kept])
        at = np.minimum(np.searchsorted(self._docs, docs), self._stored - 1)
        hit = self._docs[at] == docs
        at = at[hit]
        kept = self._valid[at]
        return docs[hit][kept], self._rows_of(at[kept])

    def _rows_of(self, rows: np.ndarray) -> np.ndarray:
        """The float rows ``rows`` (stored row numbers), read from the file when saved."""
        if self._row_file is not None:
            return self._row_file.read(rows)
        return np.asarray(self._vectors[rows], dtype=np.float32)

    def scores_exactly(self, size: int) -> bool:
        """Whether :meth:`search` over ``size`` allowed rows scores every one of them exactly
        (:func:`exact_cosines`): a flat index always does, a graph index for a small scope."""
        return self._graph is None or self._is_small_scope(size)

    def _is_small_scope(self, size: int) -> bool:
        return size <= self.small_scope_rows or size < SMALL_SCOPE_FRACTION * self._stored

    def _exact(
        self, q: np.ndarray, scope: np.ndarray | None, limit: int
    ) -> list[tuple[int, float]]:
        ids = self._valid_ids if scope is None else scope
        if ids.size == 0:
            return []
        if ids.size * 4 < self._stored:
            rows = self._rows_of(ids)
            return _rescored_top(ids, np.asarray(rows @ q, dtype=np.float32),
                                 lambda keep: rows[keep], q, limit)
        # A wide search reads every row: through the sketch once that pays (a quarter of the
        # bytes), else in one sequential pass, which beats gathering most rows from a memory map.
        if ids.size >= SKETCH_MIN_ROWS:
            if self._sketch is None:  # an index of format 1: sketched once that pays
                self._wide_searches += 1
                if self._wide_searches >= SKETCH_AFTER:
                    self.build_sketch()
            if self._sketch is not None:
                found = self._sketched(q, ids, limit)
                if found is not None:
                    return found
        scores = np.concatenate([block @ q for block in _blocks(self._vectors)]
                                ).astype(np.float32)[ids]
        return _rescored_top(ids, scores, lambda keep: self._rows_of(ids[keep]), q, limit)

    def build_sketch(self) -> None:
        """Build the in-memory 8-bit copy that wide exact searches use (see the module notes).

        Called by the :data:`SKETCH_AFTER`-th wide exact search; call it up front to keep that
        cost (a few dozen full scans) out of a search."""
        if self._sketch is None and self.valid_rows:
            if self._coded:  # the inverted file's own codes, every list searched
                assert self._graph is not None
                self._sketch = _Sketch(self._graph, _ivf_code_error(self._graph, self._vectors))
            else:
                self._sketch = _Sketch.build(self._vectors, self._valid_ids)

    def _sketched(
        self, q: np.ndarray, ids: np.ndarray, limit: int
    ) -> list[tuple[int, float]] | None:
        """The exact top ``limit`` of ``ids`` (sorted valid doc ids) through the sketch, or None
        when too many rows lie near the cut for that to pay."""
        sketch = self._sketch
        assert sketch is not None
        selector = None  # kept alive through the search calls below
        if ids.size < self.valid_rows:
            # sketch row i is stored row _valid_ids[i], as in the approximate indexes
            selector = self._selector(ids)
        params = sketch.params(selector)
        k = min(limit, int(ids.size))
        margin = 2.0 * (sketch.error + _SKETCH_SLACK)
        wanted = max(_SKETCH_FIRST_K, 4 * k)
        while True:
            # one thread: a single query's scan is short, and OpenMP workers contending for
            # busy cores made it 2-3x slower than one thread on the 2-core bench machine
            with _omp_threads(1):
                approx, labels = sketch.index.search(q[None, :], min(wanted, int(ids.size)),
                                                     params=params)
            found = labels[0] >= 0
            approx, rows = approx[0][found], labels[0][found]
            if rows.size < k:
                return None
            # k rows score at least approx[k-1] - error exactly, so a row whose sketch score
            # is under approx[k-1] - 2 * error scores under the k-th exactly
            floor = float(approx[k - 1]) - margin
            if rows.size < wanted or float(approx[-1]) < floor:
                break
            wanted *= 4
            if wanted * 8 > ids.size:
                return None  # most rows are near the cut: one exact pass is cheaper
        cands = np.sort(self._valid_ids[rows[approx >= floor]])
        # float64, then rounded: equal rows get equal float32 scores wherever they sit, so exact
        # ties stay ties and break by doc id (a float32 BLAS call may round its tail rows
        # differently); other scores equal the float32 ones up to their last bit.  einsum, not
        # BLAS: a BLAS call leaves its worker threads spinning on the cores the scan needs.
        return _top(cands, exact_cosines(self._rows_of(cands), q), limit)

    def _approximate(
        self, q: np.ndarray, scope: np.ndarray | None, limit: int
    ) -> list[tuple[int, float]]:
        assert self._graph is not None
        wanted = min(limit, self.valid_rows if scope is None else int(scope.size))
        if wanted == 0:
            return []
        if self.kind == "ivf":
            return self._probed(q, scope, limit, wanted)
        ef = max(self.ef_search, wanted)
        if scope is None or scope.size == self.valid_rows:  # (scope: unique valid rows)
            params = _hnsw_params(ef)
        else:
            # The beam only collects in-scope nodes, so widen it as the scope narrows.
            ef = max(ef, math.ceil(ef * self.valid_rows / max(scope.size, 1)))
            if ef > _MAX_FILTERED_EF:
                return self._exact(q, scope, limit)
            selector = self._selector(scope)  # kept alive through the search below
            params = _hnsw_params(ef, selector)
        scores, labels = self._graph.search(q[None, :], wanted, params=params)
        found = labels[0] >= 0
        if scope is not None and int(found.sum()) < wanted:
            # The graph could not reach enough in-scope rows; answer exactly instead.
            return self._exact(q, scope, limit)
        return _top(self._valid_ids[labels[0][found]], scores[0][found], limit)

    def _probed(self, q: np.ndarray, scope: np.ndarray | None, limit: int, wanted: int
                ) -> list[tuple[int, float]]:
        """The inverted file's answer: the nearest in-scope rows of the probed lists."""
        assert self._graph is not None
        nprobe = self._nprobe_for(wanted)
        if nprobe * IVF_MAX_PROBED_SHARE > int(getattr(self._graph, "nlist")):  # noqa: B009
            # a top this deep reads a large share of the rows: the exact scan is cheaper
            return self._exact(q, scope, limit)
        selector = None  # kept alive through the search below
        if scope is not None and scope.size < self.valid_rows:  # (scope: unique valid rows)
            selector = self._selector(scope)
        fetched = self._candidates(wanted, self.valid_rows if scope is None else int(scope.size))
        with _omp_threads(1):  # one query: OpenMP workers only contend for the cores
            scores, labels = self._graph.search(q[None, :], fetched,
                                                params=_ivf_params(nprobe, selector))
        found = labels[0] >= 0
        if int(found.sum()) < wanted:
            # the probed lists hold too few (in-scope) rows: answer exactly instead
            return self._exact(q, scope, limit)
        rows = self._valid_ids[labels[0][found]]
        if not self._coded:
            return _top(rows, scores[0][found], limit)
        order = np.argsort(rows)  # ascending rows: a sequential read of the memory map
        rows = rows[order]
        return _top(rows, exact_cosines(self._rows_of(rows), q), limit)

    def _candidates(self, wanted: int, available: int) -> int:
        """Rows to fetch from the approximate index for a top ``wanted``: more when its scores
        are codes', re-scored exactly afterwards."""
        if not self._coded:
            return wanted
        return min(available, max(wanted * RESCORE_FACTOR, _RESCORE_MIN))

    def _selector(self, scope: np.ndarray) -> Any:
        """A FAISS filter admitting the stored rows ``scope`` (unique, valid); it holds the
        bitmap it reads, so keeping the filter alive through a search keeps both."""
        member = np.zeros(self.valid_rows, dtype=np.bool_)
        # index label i is stored row _valid_ids[i]: the row itself when every row is valid
        every = self.valid_rows == self._stored
        member[scope if every else np.searchsorted(self._valid_ids, scope)] = True
        bitmap = np.packbits(member, bitorder="little")
        selector = faiss.IDSelectorBitmap(self.valid_rows, faiss.swig_ptr(bitmap))
        selector.referenced_objects = [bitmap]  # type: ignore[attr-defined]  # FAISS keep-alive
        return selector

    def _nprobe_for(self, wanted: int) -> int:
        """Lists to probe for a top ``wanted``: calibrated at 10 neighbours, a deeper top needs
        more. On MiniLM vectors (35,000 rows, 186 lists) recall@10 was .956 at 16 lists and
        recall@100 .889 there, .948 at 32: twice the lists per tenfold depth."""
        tenfold = max(0, math.ceil(math.log10(max(wanted, 1) / _CALIBRATION_K)))
        return min(int(getattr(self._graph, "nlist")), self.nprobe << tenfold)  # noqa: B009

    def top_ids(self, queries: np.ndarray, k: int) -> list[np.ndarray]:
        """Unscoped top-``k`` doc ids for each row of ``queries`` (batched; for evaluation)."""
        if not isinstance(queries, np.ndarray) or queries.ndim != 2 \
                or queries.shape[1] != self.dim:
            raise QueryError(f"queries must be a (n, {self.dim}) array")
        _positive_int(k, "k", QueryError)
        qs = np.stack([unit_query(row, self.dim) for row in queries]) if len(queries) else \
            np.zeros((0, self.dim), dtype=np.float32)
        wanted = min(k, self.valid_rows)
        if wanted == 0:
            return [np.zeros(0, dtype=np.int64) for _ in range(len(qs))]
        if self._graph is not None:
            params = (_hnsw_params(max(self.ef_search, wanted)) if self.kind == "hnsw" else
                      _ivf_params(self._nprobe_for(wanted)))
            _, labels = self._graph.search(qs, self._candidates(wanted, self.valid_rows),
                                           params=params)
            if self._coded:
                return [self._docs[np.array([d for d, _ in _top(
                    np.sort(self._valid_ids[row[row >= 0]]),
                    exact_cosines(self._rows_of(np.sort(self._valid_ids[row[row >= 0]])), q),
                    wanted)], dtype=np.int64)] for row, q in zip(labels, qs, strict=True)]
            return [self._docs[self._valid_ids[row[row >= 0]]] for row in labels]
        return [self._docs[np.array([d for d, _ in self._exact(q, None, wanted)],
                                    dtype=np.int64)] for q in qs]


class _RowFile:
    """The float rows of a saved ``vectors.npy``, read with ``preadv`` into fresh arrays:
    each run of consecutive rows asked for is one call."""

    def __init__(self, path: Path, offset: int, rows: int, dim: int,
                 dtype: np.dtype[Any] | None = None) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self._fd)  # also at exit, while os is still there
        self._offset, self._rows, self._dim = offset, rows, dim
        self._dtype = np.dtype(np.float32) if dtype is None else dtype
        self._row_bytes = dim * self._dtype.itemsize

    @classmethod
    def of(cls, mapped: np.ndarray, path: Path) -> _RowFile | None:
        """The reader of the file ``mapped`` (its memory map) lies in, or None when it is not
        a plain float16 or float32 row-major map of it."""
        base = mapped.base if isinstance(mapped.base, np.memmap) else mapped
        if not isinstance(base, np.memmap) or mapped.dtype not in _ROW_DTYPES \
                or mapped.ndim != 2 or not mapped.flags.c_contiguous:
            return None
        return cls(path, int(base.offset), int(mapped.shape[0]), int(mapped.shape[1]),
                   mapped.dtype)

    def read(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (any order, in range) as a ``(len(rows), dim)`` float32 array."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((rows.size, self._dim), dtype=self._dtype)
        if rows.size == 0:
            return out.astype(np.float32)
        order = None
        if rows.size > 1 and bool((rows[1:] < rows[:-1]).any()):
            order = np.argsort(rows, kind="stable")
            rows = rows[order]
        raw = out.view(np.uint8).reshape(rows.size, self._row_bytes)
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = [0, *breaks.tolist()]
        ends = [*breaks.tolist(), int(rows.size)]
        for start, end in zip(starts, ends, strict=True):
            at = self._offset + int(rows[start]) * self._row_bytes
            wanted = (end - start) * self._row_bytes
            got = os.preadv(self._fd, [raw[start:end].data], at)
            if got != wanted:
                raise IndexUnavailable(f"vector file ended early: {got} of {wanted} bytes at {at}")
        floats = out.astype(np.float32, copy=False)
        if order is not None:
            unsorted = np.empty_like(floats)
            unsorted[order] = floats
            return unsorted
        return floats


class _Sketch:
    """8-bit copy of an index's valid rows (FAISS scalar quantizer, one range for all values;
    or an inverted file of codes, searched over every list) and ``error``: the largest
    distance between a row and its copy, so for a unit query the sketch's inner product is
    within ``error`` of the exact one (Cauchy-Schwarz). ``saved``: part of the saved index."""

    def __init__(self, index: faiss.Index, error: float, *, saved: bool = False) -> None:
        self.index = index
        self.error = error
        self.saved = saved
        self._lists = int(getattr(index, "nlist", 0))

    def params(self, selector: Any) -> Any:
        """Search parameters reading every code (admitting ``selector``'s rows when given)."""
        if self._lists:
            return _ivf_params(self._lists, selector)
        factory: Any = getattr(faiss, "SearchParameters")  # noqa: B009 (stubs)
        return factory() if selector is None else factory(sel=selector)

    @classmethod
    def build(cls, vectors: np.ndarray, valid_ids: np.ndarray) -> _Sketch:
        """Quantize ``vectors[valid_ids]`` in chunks (the vectors may be a memory map)."""
        dim = int(vectors.shape[1])

        def chunks() -> Iterator[np.ndarray]:
            return _blocks(vectors, valid_ids)

        index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit,
                                           faiss.METRIC_INNER_PRODUCT)
        faiss.copy_array_to_vector(_trained_ranges(chunks()), index.sq.trained)
        index.is_trained = True
        error = 0.0
        for block in chunks():
            index.add(block)
            decoded = index.sa_decode(index.sa_encode(block))
            error = max(error, float(np.linalg.norm(block.astype(np.float64) - decoded,
                                                    axis=1).max()))
        return cls(index, error)


def _blocks(vectors: np.ndarray, valid_ids: np.ndarray | None = None) -> Iterator[np.ndarray]:
    """``vectors[valid_ids]`` (default: every row) in contiguous float32 blocks (the vectors
    may be a memory map)."""
    count = int(vectors.shape[0] if valid_ids is None else valid_ids.size)
    every = valid_ids is None or count == vectors.shape[0]
    for start in range(0, count, _SKETCH_CHUNK_ROWS):
        if every:
            block = vectors[start : start + _SKETCH_CHUNK_ROWS]
        else:
            assert valid_ids is not None
            block = vectors[valid_ids[start : start + _SKETCH_CHUNK_ROWS]]
        yield np.ascontiguousarray(block, dtype=np.float32)


def as_stored(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as an index built from them stores and scores them (float32 arrays): each
    row re-normalized to unit length, then rounded to float16; a zero or non-finite row is
    all zeros (such rows are not stored)."""
    matrix, _ = _clean_vectors(vectors)
    return stored_rows(matrix)


def stored_rows(unit_rows: np.ndarray) -> np.ndarray:
    """``unit_rows`` as a saved index stores them (float16), in float32: what every score of
    an index built from them is computed from."""
    return np.asarray(unit_rows, dtype=_STORED_DTYPE).astype(np.float32)


def _trained_ranges(blocks: Iterator[np.ndarray]) -> np.ndarray:
    """The trained state of an 8-bit scalar quantizer (one range per dimension) whose ranges
    are each dimension's least and greatest value over ``blocks``: no row is clipped, so a
    row's code is within half a step of it in every dimension."""
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    for block in blocks:
        if block.shape[0]:
            low = block.min(axis=0) if low is None else np.minimum(low, block.min(axis=0))
            high = block.max(axis=0) if high is None else np.maximum(high, block.max(axis=0))
    assert low is not None and high is not None
    quantizer = faiss.ScalarQuantizer(int(low.size), faiss.ScalarQuantizer.QT_8bit)
    quantizer.train(np.ascontiguousarray(np.stack([low, high]), dtype=np.float32))
    trained: np.ndarray = faiss.vector_to_array(quantizer.trained)  # a copy, while it lives
    return trained


def recall_at_k(approx: SemanticIndex, exact: SemanticIndex, queries: np.ndarray, k: int) -> float:
    """Mean fraction of ``exact``'s top-``k`` ids that ``approx`` also returns, over ``queries``."""
    if len(approx) != len(exact) or approx.dim != exact.dim:
        raise QueryError("recall_at_k needs two indexes over the same rows")
    if not isinstance(queries, np.ndarray) or queries.ndim != 2 or len(queries) == 0:
        raise QueryError("recall_at_k needs a non-empty (n, dim) query array")
    got = approx.top_ids(queries, k)
    truth = exact.top_ids(queries, k)
    hits = [np.intersect1d(g, t).size / t.size for g, t in zip(got, truth, strict=True) if t.size]
    return float(np.mean(hits)) if hits else 1.0


def _rescored_top(ids: np.ndarray, rough: np.ndarray, rows: Callable[[np.ndarray], np.ndarray],
                  q: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """The top ``limit`` of ``ids`` by exact score, given BLAS scores ``rough``.

    A float32 BLAS product rounds a row's score differently depending on where the row sits in
    the matrix (tail rows take another kernel), so the same rows in a segment and in a full
    build could swap places. Rows within _RESCORE_SLACK of the cut are scored again in
    float64 and rounded: a row's score then depends on its vector alone."""
    if ids.size > limit:
        kth = np.partition(rough, ids.size - limit)[ids.size - limit]
        keep = np.flatnonzero(rough >= kth - _RESCORE_SLACK)
    else:
        keep = np.arange(ids.size)
    return _top(ids[keep], exact_cosines(rows(keep), q), limit)


def exact_cosines(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The cosines of ``vectors`` (rows of unit vectors) with ``query`` (a unit vector, as
    :func:`unit_query` gives it) as every exact search scores them: each row's product taken in
    float64 and rounded to float32, so a row's score depends on its vector alone (a float32
    BLAS product rounds a row differently by where it sits in the matrix)."""
    exact: np.ndarray = np.einsum("ij,j->i", np.asarray(vectors).astype(np.float64),
                                  np.asarray(query).astype(np.float64)).astype(np.float32)
    return exact


def _top(ids: np.ndarray, scores: np.ndarray, limit: int) -> list[tuple[int, float]]:
    if ids.size > limit:
        # Keep every row tied with the limit-th score so the id tie-break below is honoured.
        cutoff = np.partition(scores, ids.size - limit)[ids.size - limit]
        keep = np.flatnonzero(scores >= cutoff)
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:limit]
    return list(zip(ids[order].tolist(), scores[order].astype(np.float64).tolist(), strict=True))


def _calibrate_ef(graph: faiss.Index, rows: np.ndarray) -> tuple[int, float]:
    """Smallest ladder ef whose recall@k on sample rows (self excluded) reaches the target."""
    return _calibrate(graph, rows, _EF_LADDER,
                      lambda ef: _hnsw_params(max(ef, _CALIBRATION_K + 1)))


def _calibrate(graph: faiss.Index, rows: np.ndarray, ladder: tuple[int, ...],
               params: Callable[[int], Any], *, rescore: bool = False) -> tuple[int, float]:
    """Smallest rung of ``ladder`` whose search ``params`` reach the target recall@k on
    sample rows (self excluded), and that recall; the last rung when none does.

    A hit is any returned row scoring at least the k-th exact score, so duplicate rows (common
    in chat logs) tie instead of counting as misses. ``rescore``: the index's scores are
    codes', so it is asked for as many candidates as a search asks it and they are scored
    exactly, as a search does.
    """
    count = rows.shape[0]
    k = min(_CALIBRATION_K, count - 1)
    if k < 1:
        return ladder[0], 1.0
    picks = np.random.default_rng(0).choice(count, size=min(_CALIBRATION_QUERIES, count),
                                            replace=False)
    queries = np.ascontiguousarray(rows[picks])
    kth = _kth_best_excluding_self(rows, queries, picks, k)
    recall = 0.0
    fetch = min(count, max((k + 1) * RESCORE_FACTOR, _RESCORE_MIN)) if rescore else k + 1
    for rung in ladder:
        scores, labels = graph.search(queries, fetch, params=params(rung))
        if rescore:
            scores = np.where(labels >= 0, np.einsum(
                "qkd,qd->qk", rows[np.maximum(labels, 0)], queries), -np.inf)
        others = np.where(labels == picks[:, None], -np.inf, scores)
        best = -np.sort(-others, axis=1)[:, :k]
        recall = float(np.mean(best >= kth[:, None] - 1e-5))
        if recall >= TARGET_RECALL:
            return rung, recall
    return ladder[-1], recall


def _kth_best_excluding_self(
    rows: np.ndarray, queries: np.ndarray, picks: np.ndarray, k: int
) -> np.ndarray:
    best = np.full((len(queries), k), -np.inf, dtype=np.float32)
    for start in range(0, rows.shape[0], _SCORE_BLOCK_ROWS):
        block = queries @ rows[start : start + _SCORE_BLOCK_ROWS].T
        own = (picks >= start) & (picks < start + block.shape[1])
        block[own, picks[own] - start] = -np.inf
        merged = np.concatenate([best, block], axis=1)
        best = -np.partition(-merged, k - 1, axis=1)[:, :k]
    return np.asarray(best.min(axis=1))


def _ivf_code_error(graph: Any, rows: np.ndarray) -> float:
    """The largest distance between a row of ``rows`` (the inverted file's rows, in the order
    added) and its 8-bit code as ``graph`` decodes it (its list's centroid plus the residual)."""
    graph.make_direct_map()
    error = 0.0
    try:
        for start in range(0, rows.shape[0], _SKETCH_CHUNK_ROWS):
            block = np.asarray(rows[start : start + _SKETCH_CHUNK_ROWS], dtype=np.float64)
            decoded = graph.reconstruct_n(start, block.shape[0])
            error = max(error, float(np.linalg.norm(block - decoded, axis=1).max()))
    finally:
        no_map: Any = getattr(faiss, "DirectMap").NoMap  # noqa: B009 (stubs)
        graph.set_direct_map_type(no_map)  # 8 bytes a row, needed no more
    return error


def _hnsw_params(ef: int, selector: Any = None) -> Any:
    # Missing from faiss's bundled type stubs, hence the dynamic lookup.
    factory: Any = getattr(faiss, "SearchParametersHNSW")  # noqa: B009
    return factory(efSearch=ef) if selector is None else factory(sel=selector, efSearch=ef)


def _ivf_params(nprobe: int, selector: Any = None) -> Any:
    factory: Any = getattr(faiss, "SearchParametersIVF")  # noqa: B009 (stubs)
    return factory(nprobe=nprobe) if selector is None else factory(sel=selector, nprobe=nprobe)


def _clean_vectors(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(vectors, np.ndarray) or vectors.ndim != 2 or vectors.shape[1] < 1:
        shape = getattr(vectors, "shape", type(vectors).__name__)
        raise IndexUnavailable(
            f"vectors must be a 2-D (rows, dim) array with dim >= 1, got {shape}")
    if not (np.issubdtype(vectors.dtype, np.floating) or np.issubdtype(vectors.dtype, np.integer)):
        raise IndexUnavailable(f"vectors must be numeric, got dtype {vectors.dtype}")
    matrix = np.array(vectors, dtype=np.float32, order="C", copy=True)
    finite = np.isfinite(matrix).all(axis=1)
    matrix[~finite] = 0.0
    norms = np.linalg.norm(matrix, axis=1)
    valid = finite & (norms > 0.0)
    np.divide(matrix, norms[:, None], out=matrix, where=valid[:, None])  # in place: rows can be GBs
    return matrix, valid


def _positive_int(
    value: object, what: str, error: type[Exception], *, minimum: int = 1
) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise error(f"{what} must be an int >= {minimum}, got {value!r}")
    return value


def unit_query(query: np.ndarray, dim: int) -> np.ndarray:
    """``query`` (shape ``(dim,)`` or ``(1, dim)``) as the float32 unit vector every search
    scores with; QueryError for another shape, a zero or a non-finite vector."""
    if not isinstance(query, np.ndarray):
        raise QueryError(f"query must be a numpy array, got {type(query).__name__}")
    q = query.reshape(-1) if query.ndim == 2 and query.shape[0] == 1 else query
    if q.shape != (dim,):
        raise QueryError(f"query must have shape ({dim},), got {query.shape}")
    q = q.astype(np.float32)
    norm = float(np.linalg.norm(q))
    if not math.isfinite(norm) or norm == 0.0:
        raise QueryError("query vector is zero or not finite")
    return q / norm


def _check_allowed(allowed: np.ndarray, rows: int) -> np.ndarray:
    if not isinstance(allowed, np.ndarray) or allowed.ndim != 1:
        raise QueryError("allowed must be a 1-D numpy array of doc ids")
    if allowed.size and not np.issubdtype(allowed.dtype, np.integer):
        raise QueryError(f"allowed must hold integer doc ids, got dtype {allowed.dtype}")
    ids = allowed.astype(np.int64, copy=False)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= rows):
        raise QueryError(f"allowed holds doc ids outside 0..{rows - 1}")
    if ids.size > 1 and not bool((ids[1:] > ids[:-1]).all()):
        ids = np.unique(ids)
    return ids


def _atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(f"{path.stem}.tmp{path.suffix}")  # keeps .npy: np.save would add it
    write(tmp)
    os.replace(tmp, path)


@contextmanager
def _omp_threads(threads: int | None) -> Iterator[None]:
    wanted = len(os.sched_getaffinity(0)) if threads is None else \
        _positive_int(threads, "threads", IndexUnavailable)
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(wanted)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)
