"""Inverted trigram index with PostgreSQL ``pg_trgm`` semantics, one per partition.

Trigrams (as pg_trgm): words are maximal runs of alphanumeric characters (``str.isalnum``, so
letters and digits of every script, CJK included; ``_``, punctuation and emoji separate words).
Each word is lower-cased one code point at a time (a code point may lower to several), padded
with two spaces in front and one behind, and cut into its ``len + 1`` trigrams ("cat" ->
``"  c", " ca", "cat", "at "``).  A text's trigram set is the union over its words.

* ``similarity(a, b) = |A ∩ B| / |A ∪ B|`` (0 when either side has no trigram).
* ``word_similarity(q, t)`` is pg_trgm's measure: the greatest ``|Q ∩ E| / (|Q| + |E| - |Q ∩ E|)``
  over every contiguous extent ``E`` of ``t``'s ordered trigram sequence (``|E|`` counts distinct
  trigrams).  This is what pg_trgm's C code computes (``CALCSML``); a bare ``|Q ∩ E| / |Q|``
  would always pick the whole text.  We take the exact maximum over all extents (a dominance
  count over the positions of query trigrams); pg's single-pass loop can stop below it on
  texts that repeat trigrams far apart, which is the only known difference besides these two:
  pg hashes multi-byte trigrams to 3 bytes (rare collisions; we keep exact code points) and
  lower-cases with the database locale (we use Unicode full case mapping, no final-sigma rule).

Storage (``save``): ``keys.npy`` (sorted unique int64 trigram keys, three 21-bit code points),
``offsets.npy`` (int64 CSR offsets), ``postings.npy`` (int32 doc ids, ascending per key),
``doc_ntrgm.npy`` (int32 distinct trigrams per doc), ``text_offsets.npy`` + ``text_bytes.npy``
(the UTF-8 texts, read back only to score word similarity exactly), ``meta.json``.

Search: the query's trigrams (its first ``MAX_QUERY_CHARS`` characters, then its first
``MAX_QUERY_TRIGRAMS`` distinct trigrams) are looked up; a doc can only reach ``threshold`` if it
shares ``need = ceil(threshold * |Q|)`` of them (both scores are at most ``shared / |Q|``).
Skip rule for common trigrams: up to ``need - 1`` of the most frequent query trigrams whose
document frequency exceeds ``max(COMMON_MIN_DF, COMMON_DF_FRACTION * n)`` are left out of counting,
and candidates must then hit ``need - skipped >= 1`` of the rarer ones; so every doc that can
qualify is still found (the rule never changes results, only cost), and the skipped trigrams are
then checked for the surviving candidates by binary search.  Similarity scores follow exactly from
the counts; word-mode candidates are scored exactly best-bound-first and the scan stops once no
remaining bound can enter the top ``limit`` or after ``max(EXACT_BUDGET, 4 * limit)`` texts.
Docs with score 0 (no shared trigram) are never returned.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from lake.errors import IndexError_, QueryError

__all__ = [
    "COMMON_DF_FRACTION",
    "COMMON_MIN_DF",
    "EXACT_BUDGET",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TRIGRAMS",
    "TrigramIndex",
    "similarity",
    "trigrams",
    "word_similarity",
]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Bool = npt.NDArray[np.bool_]

MAX_QUERY_CHARS = 4096
MAX_QUERY_TRIGRAMS = 256
COMMON_DF_FRACTION = 1 / 32
COMMON_MIN_DF = 1024
EXACT_BUDGET = 512
_SPACE = 0x20
_MASK21 = (1 << 21) - 1
_CHUNK_CHARS = 1 << 22
_CELLS = 1 << 22  # cells per block of the extent dominance matrix: bounds its memory
_FORMAT = "turnlake-trigram"
_VERSION = 1
_ARRAYS = ("keys", "offsets", "postings", "doc_ntrgm", "text_offsets", "text_bytes")


def _distinct(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted distinct values (np.unique is hash based and very slow in this numpy)."""
    s = pl.Series(a).sort().to_numpy() if a.size > 1 << 20 else np.sort(a)
    return s[_run_starts(s)] if s.size else s


def _run_starts(s: npt.NDArray[Any]) -> Bool:
    mask = np.empty(s.size, np.bool_)
    mask[:1] = True
    np.not_equal(s[1:], s[:-1], out=mask[1:])
    return mask


def _fold(texts: Sequence[str]) -> tuple[I32, Bool, I64, I64]:
    """Lower-cased code points of the NUL-joined texts as indexes into a sorted alphabet.

    Returns (codes, is-word-char flags, start of each text in codes, alphabet).
    """
    lens = np.fromiter(map(len, texts), np.int64, len(texts))
    raw = "\x00".join(texts).encode("utf-32-le", "surrogatepass")
    cp = np.frombuffer(raw, np.uint32)
    starts = np.cumsum(lens + 1) - (lens + 1)
    present = _distinct(cp)
    lowered = [chr(c).lower() if chr(c).isalnum() else " " for c in present.tolist()]
    is_word = np.array([chr(c).isalnum() for c in present.tolist()], np.bool_)
    alphabet = np.array(sorted({ord(x) for s in lowered for x in s} | {_SPACE}), np.int64)
    width = max((len(s) for s in lowered), default=1)
    table = np.zeros((present.size, width), np.int32)
    for i, s in enumerate(lowered):
        table[i, : len(s)] = np.searchsorted(alphabet, [ord(x) for x in s])
    lookup = np.zeros(int(present[-1]) + 1 if present.size else 1, np.int32)
    lookup[present] = np.arange(present.size, dtype=np.int32)
    pidx = lookup[cp]
    if width == 1:
        return table[pidx, 0], is_word[pidx], starts, alphabet
    # a few code points lower to several ("İ" -> "i̇"); all of them stay inside the word
    reps = np.array([len(s) for s in lowered], np.int64)[pidx]
    ends = np.cumsum(reps)
    src = np.repeat(pidx, reps)
    within = np.arange(int(ends[-1])) - np.repeat(ends - reps, reps)
    new_pos = np.append(ends - reps, ends[-1])
    return table[src, within], is_word[src], new_pos[starts], alphabet


def _trigram_positions(texts: Sequence[str]) -> tuple[I32, I64, I64, I64]:
    """Padded words of all texts: (padded codes, trigram start positions, doc of each, alphabet)."""
    codes, word, starts, alphabet = _fold(texts)
    edges = np.zeros(word.size + 2, np.int8)
    edges[1:-1] = word
    d = np.diff(edges)
    ws = np.flatnonzero(d == 1)
    wlen = np.flatnonzero(d == -1) - ws
    plen = wlen + 3
    poff = np.cumsum(plen) - plen
    space = int(np.searchsorted(alphabet, _SPACE))
    padded = np.full(int(plen.sum()), space, np.int32)
    padded[np.flatnonzero(word) + np.repeat(poff + 2 - ws, wlen)] = codes[word]
    keep = np.ones(padded.size, np.bool_)
    keep[poff + wlen + 1] = False
    keep[poff + wlen + 2] = False
    tdoc = np.repeat(np.searchsorted(starts, ws, "right") - 1, wlen + 1)
    return padded, np.flatnonzero(keep), tdoc, alphabet


def _sequences(texts: Sequence[str]) -> tuple[I64, I64]:
    """Ordered trigram keys of every text, concatenated, and per-text offsets into them."""
    padded, tpos, tdoc, alphabet = _trigram_positions(texts)
    keys = (alphabet[padded[tpos]] << 42) | (alphabet[padded[tpos + 1]] << 21)
    keys |= alphabet[padded[tpos + 2]]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.bincount(tdoc, minlength=len(texts)), out=offsets[1:])
    return keys, offsets


def _key_set(text: str) -> I64:
    return _distinct(_sequences([text])[0])


def _decode(key: int) -> str:
    return chr(key >> 42) + chr((key >> 21) & _MASK21) + chr(key & _MASK21)


def _extent_score(seq: I64, qk: I64) -> float:
    """Exact pg word similarity of sorted distinct query keys ``qk`` against ``seq``.

    The best extent starts and ends on query trigrams.  For hits ``P[a] <= P[b]`` the distinct
    count of ``seq[P[a]..P[b]]`` is its length minus the pairs of consecutive occurrences of one
    trigram lying inside it: a dominance count, cumulated over a histogram of those pairs.
    """
    q = qk.size
    if q == 0 or seq.size == 0:
        return 0.0
    isq = qk[np.minimum(np.searchsorted(qk, seq), q - 1)] == seq
    hits = np.flatnonzero(isq)
    m = hits.size
    if m == 0:
        return 0.0
    lo = int(hits[0])
    window = seq[lo : int(hits[-1]) + 1]
    hits = hits - lo
    order = np.argsort(window, kind="stable")
    rep = np.flatnonzero(window[order[1:]] == window[order[:-1]])
    first, second = order[rep], order[rep + 1]
    a_bin = np.searchsorted(hits, first, "right") - 1
    b_bin = np.searchsorted(hits, second, "left")
    in_q = isq[lo + second]
    suffix = np.zeros((2, m), np.int64)
    cols = np.arange(m)
    best = 0.0
    block = max(1, _CELLS // m)
    for r1 in range(m, 0, -block):  # bottom-up so pairs below a block fold into `suffix`
        r0 = max(0, r1 - block)
        rows = np.arange(r0, r1)
        sel = (a_bin >= r0) & (a_bin < r1)
        dom = np.empty((2, r1 - r0, m), np.int64)
        for k, mask in enumerate((sel, sel & in_q)):
            flat = (a_bin[mask] - r0) * m + b_bin[mask]
            hist = np.bincount(flat, minlength=(r1 - r0) * m).reshape(r1 - r0, m)
            dom[k] = hist[::-1].cumsum(0)[::-1].cumsum(1) + suffix[k]
            suffix[k] += np.bincount(b_bin[mask], minlength=m).cumsum()
        valid = cols[None, :] >= rows[:, None]
        distinct = np.where(valid, hits[None, :] - hits[rows, None] + 1 - dom[0], 0)
        shared = np.where(valid, cols[None, :] - rows[:, None] + 1 - dom[1], 0)
        best = max(best, float((shared / (q + distinct - shared)).max()))
    return best


def trigrams(text: str) -> set[str]:
    """The pg_trgm trigram set of ``text`` (``trigrams("cat") == {"  c", " ca", "cat", "at "}``)."""
    return {_decode(k) for k in _key_set(text).tolist()}


def similarity(a: str, b: str) -> float:
    """pg_trgm ``similarity``: shared trigrams over the union of both trigram sets."""
    ka, kb = _key_set(a), _key_set(b)
    if ka.size == 0 or kb.size == 0:
        return 0.0
    shared = int(np.isin(ka, kb, assume_unique=True).sum())
    return shared / (ka.size + kb.size - shared)


def word_similarity(query: str, text: str) -> float:
    """pg_trgm ``word_similarity``: best similarity of the query to any extent of ``text``."""
    return _extent_score(_sequences([text])[0], _key_set(query))


def _member(haystack: npt.NDArray[Any], needles: npt.NDArray[Any]) -> Bool:
    """Which needles occur in the sorted haystack (binary search, no copy of the haystack)."""
    if haystack.size == 0:
        return np.zeros(needles.size, np.bool_)
    pos = np.searchsorted(haystack, needles.astype(haystack.dtype, copy=False))
    return haystack[np.minimum(pos, haystack.size - 1)] == needles


def _min_shared(threshold: float, q: int) -> int:
    """Fewest shared trigrams with which ``shared / q`` (a bound on both scores) can pass."""
    need = max(1, int(threshold * q))
    while need <= q and need / q < threshold:
        need += 1
    while need > 1 and (need - 1) / q >= threshold:
        need -= 1
    return need


@dataclass
class _Chunk:
    keys: I64
    counts: I64
    docs: I32
    ntrgm: I64


def _chunk_postings(texts: Sequence[str], first_doc: int) -> list[_Chunk]:
    """Per-doc distinct (trigram, doc) pairs of a run of texts, grouped by trigram key."""
    n = len(texts)
    padded, tpos, tdoc, alphabet = _trigram_positions(texts)
    size = alphabet.size
    if n > 1 and size**3 * n >= 1 << 62:  # the composite sort key would overflow int64
        half = n // 2
        return _chunk_postings(texts[:half], first_doc) + _chunk_postings(
            texts[half:], first_doc + half
        )
    dense = (padded[tpos].astype(np.int64) * size + padded[tpos + 1]) * size + padded[tpos + 2]
    pairs = _distinct(dense * n + tdoc)
    tri = pairs // n
    doc = pairs - tri * n
    group = np.flatnonzero(_run_starts(tri))
    dense_keys = tri[group]
    keys = (alphabet[dense_keys // (size * size)] << 42) | (alphabet[dense_keys // size % size] << 21)
    keys |= alphabet[dense_keys % size]
    counts = np.diff(np.append(group, tri.size))
    ntrgm = np.bincount(doc, minlength=n)
    return [_Chunk(keys, counts, (doc + first_doc).astype(np.int32), ntrgm)]


class TrigramIndex:
    """Postings per trigram (CSR) over one partition's texts; doc ids are positions ``0..n-1``."""

    def __init__(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        self._keys: I64 = arrays["keys"]
        self._offsets: I64 = arrays["offsets"]
        self._postings: I32 = arrays["postings"]
        self._ntrgm: I32 = arrays["doc_ntrgm"]
        self._text_offsets: I64 = arrays["text_offsets"]
        self._text_bytes: npt.NDArray[np.uint8] = arrays["text_bytes"]

    @classmethod
    def build(cls, texts: Sequence[str]) -> TrigramIndex:
        """Index ``texts``; the doc id of ``texts[i]`` is ``i``."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise IndexError_(f"trigram index: texts[{i}] is {type(t).__name__}, not str")
        n = len(texts)
        if n >= 1 << 31:
            raise IndexError_(f"trigram index: {n} texts exceed the int32 doc id range")
        cum = np.cumsum(np.fromiter(map(len, texts), np.int64, n) + 1)
        cuts = np.searchsorted(cum, np.arange(_CHUNK_CHARS, int(cum[-1]) if n else 0, _CHUNK_CHARS))
        bounds = [0, *sorted(set((cuts + 1).tolist()) - {0, n}), n] if n else [0]
        chunks: list[_Chunk] = []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            chunks += _chunk_postings(texts[lo:hi], lo)
        keys = _distinct(np.concatenate([c.keys for c in chunks] or [np.zeros(0, np.int64)]))
        where = [np.searchsorted(keys, c.keys) for c in chunks]
        counts = np.zeros(keys.size, np.int64)
        for w, c in zip(where, chunks, strict=True):
            counts[w] += c.counts
        offsets = np.zeros(keys.size + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        postings = np.empty(int(offsets[-1]), np.int32)
        fill = offsets[:-1].copy()
        for w, c in zip(where, chunks, strict=True):
            group_start = np.cumsum(c.counts) - c.counts
            dest = np.repeat(fill[w] - group_start, c.counts) + np.arange(c.docs.size)
            postings[dest] = c.docs
            fill[w] += c.counts
        encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
        text_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, n), out=text_offsets[1:])
        ntrgm = np.concatenate([c.ntrgm for c in chunks] or [np.zeros(0, np.int64)])
        return cls(
            {
                "keys": keys,
                "offsets": offsets,
                "postings": postings,
                "doc_ntrgm": ntrgm.astype(np.int32),
                "text_offsets": text_offsets,
                "text_bytes": np.frombuffer(b"".join(encoded), np.uint8),
            }
        )

    def save(self, directory: Path) -> None:
        """Write the index as plain ``.npy`` arrays plus ``meta.json`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays = self._arrays()
        for name in _ARRAYS:
            np.save(directory / f"{name}.npy", np.ascontiguousarray(arrays[name]))
        meta = {"format": _FORMAT, "version": _VERSION, "docs": len(self)}
        (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, *, mmap: bool = True) -> TrigramIndex:
        """Open an index written by :meth:`save`; arrays are memory-mapped unless ``mmap=False``."""
        directory = Path(directory)
        try:
            meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
            arrays = {
                name: np.load(directory / f"{name}.npy", mmap_mode="r" if mmap else None)
                for name in _ARRAYS
            }
        except (OSError, ValueError) as exc:
            raise IndexError_(f"trigram index at {directory} is missing or unreadable: {exc}") from exc
        if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
            raise IndexError_(f"trigram index at {directory} has unknown format {meta!r}")
        expect = {
            "keys": np.int64, "offsets": np.int64, "postings": np.int32,
            "doc_ntrgm": np.int32, "text_offsets": np.int64, "text_bytes": np.uint8,
        }  # fmt: skip
        bad = [k for k, dt in expect.items() if arrays[k].dtype != dt or arrays[k].ndim != 1]
        a = arrays
        n = a["doc_ntrgm"].size
        if (
            bad
            or n != meta.get("docs")
            or a["offsets"].size != a["keys"].size + 1
            or int(a["offsets"][-1]) != a["postings"].size
            or a["text_offsets"].size != n + 1
            or int(a["text_offsets"][-1]) != a["text_bytes"].size
        ):
            raise IndexError_(f"trigram index at {directory} is inconsistent (arrays {bad or _ARRAYS})")
        return cls(arrays)

    def __len__(self) -> int:
        """Number of indexed docs."""
        return int(self._ntrgm.size)

    def search(
        self,
        query: str,
        *,
        allowed: npt.NDArray[np.int64] | None = None,
        limit: int = 50,
        threshold: float = 0.3,
        mode: Literal["word", "similarity"] = "word",
    ) -> list[tuple[int, float]]:
        """Docs scoring ``>= threshold`` against ``query``, best first, ties by doc id.

        ``mode="word"`` scores ``word_similarity(query, text)``, ``"similarity"`` scores
        ``similarity(query, text)``; ``allowed`` (sorted doc ids) limits the scope.
        """
        if not isinstance(query, str):
            raise QueryError(f"trigram search: query must be str, not {type(query).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise QueryError(f"trigram search: limit must be a positive int, got {limit!r}")
        if not (isinstance(threshold, int | float) and 0.0 <= threshold <= 1.0):
            raise QueryError(f"trigram search: threshold must be in [0, 1], got {threshold!r}")
        if mode not in ("word", "similarity"):
            raise QueryError(f"trigram search: mode must be 'word' or 'similarity', got {mode!r}")
        scope = self._scope(allowed)
        seq = _sequences([query[:MAX_QUERY_CHARS]])[0]
        qk = np.array(sorted(list(dict.fromkeys(seq.tolist()))[:MAX_QUERY_TRIGRAMS]), np.int64)
        if qk.size == 0 or len(self) == 0 or (scope is not None and scope.size == 0):
            return []
        need = _min_shared(float(threshold), qk.size)
        docs, shared = self._candidates(qk, need, scope)
        if mode == "similarity":
            scores = shared / (qk.size + self._ntrgm[docs].astype(np.int64) - shared)
            keep = scores >= threshold
            order = np.lexsort((docs[keep], -scores[keep]))[:limit]
            return list(zip(docs[keep][order].tolist(), scores[keep][order].tolist(), strict=True))
        return self._rank_exact(qk, docs, shared / qk.size, float(threshold), limit)

    def _arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {
            "keys": self._keys, "offsets": self._offsets, "postings": self._postings,
            "doc_ntrgm": self._ntrgm, "text_offsets": self._text_offsets,
            "text_bytes": self._text_bytes,
        }  # fmt: skip

    def _scope(self, allowed: npt.NDArray[np.int64] | None) -> I64 | None:
        if allowed is None:
            return None
        a = np.asarray(allowed)
        if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
            raise QueryError(f"trigram search: allowed must be a 1-D int array, got {a.dtype}{a.shape}")
        if a.size and (int(a.min()) < 0 or int(a.max()) >= len(self)):
            raise QueryError(f"trigram search: allowed holds doc ids outside 0..{len(self) - 1}")
        a = a.astype(np.int64)
        return a if bool(np.all(a[1:] > a[:-1])) else _distinct(a)

    def _candidates(self, qk: I64, need: int, scope: I64 | None) -> tuple[I64, I64]:
        """Docs (ascending) sharing at least ``need`` of the query trigrams, with exact counts."""
        slot = np.minimum(np.searchsorted(self._keys, qk), max(self._keys.size - 1, 0))
        slot = slot[self._keys[slot] == qk] if self._keys.size else slot[:0]
        empty = np.zeros(0, np.int64)
        if slot.size < need:
            return empty, empty
        lo, hi = self._offsets[slot], self._offsets[slot + 1]
        by_df = np.argsort(lo - hi, kind="stable")  # most frequent first
        common = int(np.sum(hi - lo > max(COMMON_MIN_DF, COMMON_DF_FRACTION * len(self))))
        n_skip = min(need - 1, common)
        lists = [self._postings[lo[t] : hi[t]] for t in by_df.tolist()]
        used, skipped = lists[n_skip:], lists[:n_skip]
        need_used = need - n_skip
        total = sum(p.size for p in used)
        if scope is not None and scope.size * 8 < total:
            # small scope: probing it into each posting list beats reading the lists
            counts = np.zeros(scope.size, np.int64)
            for p in used:
                counts += _member(p, scope)
            docs, shared = scope, counts
        else:
            flat = np.concatenate(used)
            if flat.size * 8 > len(self):
                counts = np.bincount(flat, minlength=len(self))
                docs = np.arange(len(self)) if scope is None else scope
                shared = counts if scope is None else counts[scope]
            else:
                flat = np.sort(flat)
                starts = np.flatnonzero(_run_starts(flat))
                docs = flat[starts].astype(np.int64)
                shared = np.diff(np.append(starts, flat.size))
                if scope is not None:
                    inside = _member(scope, docs)
                    docs, shared = docs[inside], shared[inside]
        keep = shared >= need_used
        docs, shared = docs[keep].astype(np.int64), shared[keep].astype(np.int64)
        for p in skipped:
            shared += _member(p, docs)
        keep = shared >= need
        return docs[keep], shared[keep]

    def _text(self, doc: int) -> str:
        raw = self._text_bytes[self._text_offsets[doc] : self._text_offsets[doc + 1]].tobytes()
        return raw.decode("utf-8", "surrogatepass")

    def _rank_exact(
        self, qk: I64, docs: I64, bound: npt.NDArray[np.float64], threshold: float, limit: int
    ) -> list[tuple[int, float]]:
        """Exact word similarity, best bound first, until no bound can enter the top ``limit``."""
        keep = bound >= threshold
        docs, bound = docs[keep], bound[keep]
        order = np.lexsort((docs, -bound))[: max(EXACT_BUDGET, 4 * limit)]
        docs, bound = docs[order], bound[order]
        top: list[tuple[float, int]] = []  # (-score, doc), ascending = best first
        start, batch = 0, 64
        while start < docs.size:
            stop = min(start + batch, docs.size)
            ids = docs[start:stop].tolist()
            seqs, offs = _sequences([self._text(d) for d in ids])
            for k, doc in enumerate(ids):
                if len(top) >= limit and top[limit - 1] < (-float(bound[start + k]), doc):
                    return [(d, -s) for s, d in top]
                score = _extent_score(seqs[offs[k] : offs[k + 1]], qk)
                if score >= threshold:
                    bisect.insort(top, (-score, doc))
                    del top[limit:]
            start, batch = stop, batch * 2
        return [(d, -s) for s, d in top]
