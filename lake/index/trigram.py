"""Inverted trigram index with PostgreSQL ``pg_trgm`` semantics, one per partition.

Words are maximal runs of ``str.isalnum`` characters (letters and digits of any script, CJK too;
``_``, punctuation and emoji separate words), lower-cased per code point, padded "  word " and cut
into ``len + 1`` trigrams ("cat" -> ``"  c", " ca", "cat", "at "``); a text's set is the union.
``similarity = |A ∩ B| / |A ∪ B|``.  ``word_similarity(q, t)`` is the greatest
``|Q ∩ E| / (|Q| + |E| - |Q ∩ E|)`` over contiguous extents ``E`` of t's ordered trigrams (pg's
``CALCSML``; a bare ``|Q ∩ E| / |Q|`` would always pick the whole text), computed exactly; pg's
one-pass loop can return less when a text repeats trigrams far apart.  Also unlike pg: no 3-byte
hashing of multi-byte trigrams (no collisions) and Unicode lower-casing instead of the DB locale.

Files: ``keys.npy`` (sorted int64 keys, three 21-bit code points), ``offsets.npy`` (int64 CSR),
``postings.npy`` (int32 doc ids, ascending per key), ``doc_ntrgm.npy`` (int32 distinct trigrams
per doc), ``text_offsets.npy`` + ``text_bytes.npy`` (UTF-8 texts, read back only to score word
similarity exactly) and ``meta.json``. A text longer than :data:`MAX_SCORED_BYTES` of UTF-8 is
indexed, stored and scored by that prefix, cut before a character.

Search: ``Q`` = first ``MAX_QUERY_TRIGRAMS`` distinct trigrams of the first ``MAX_QUERY_CHARS``
characters.  Both scores are at most ``shared / |Q|``, so passing ``floor`` needs ``need =
ceil(floor * |Q|)`` shared trigrams.  Common-trigram rule (lossless): only the ``|Q| - need + 1``
rarest lists are counted (every qualifying doc is in one); the ``need - 1`` most frequent are only
binary-searched for surviving candidates, dropping docs that can no longer reach ``need``, unless
candidates are too many, then all lists are counted once.  Top-k: ``floor`` starts at
``RAISED_FLOORS`` above ``threshold`` and drops only while a doc below it could still enter the
top ``limit``.  Similarity follows from counts (only ``floor*|Q| <= |D| <= |Q|/floor`` can pass);
word mode scores texts best bound first until no bound can enter the top ``limit`` or
``max(EXACT_BUDGET, 4 * limit)`` texts were scored.  Docs with score 0 are never returned.
A word-mode search over several indexes (a tenant's partitions and their segments,
:func:`search_scoped`) runs this once for all of them: one top, one budget, the answer of
one index over their rows.  Per index, a tenant-scope search at 1M rows scored four times
the texts (2,048 against 512) and took twice as long (23.5 against 11.2 ms p50).

Exact word similarity is the costly step (texts are read back and cut into trigrams).  A batch
is only scored as far as the current cut needs (``threshold``, or the last score of a full top):
texts whose shared count cannot reach it are not read, ASCII-only batches are cut into trigrams
straight from the stored bytes, and per text only pairs of hit runs whose upper bound reaches
the cut are scored exactly (see :func:`_extent_scores`).  The answer is the same as scoring
every budgeted text in full.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from lake.errors import IndexUnavailable, QueryError
from lake.index.array_file import ArrayFile

__all__ = [
    "EXACT_BUDGET",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TRIGRAMS",
    "RAISED_FLOORS",
    "TrigramIndex",
    "search_scoped",
    "similarity",
    "trigrams",
    "word_similarities",
    "word_similarity",
]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]
Bool = npt.NDArray[np.bool_]
Arr = npt.NDArray[Any]

MAX_QUERY_CHARS = 4096
MAX_QUERY_TRIGRAMS = 256
EXACT_BUDGET = 512
# A text is indexed and scored by its first this many bytes (cut before a character), so
# that a search reaching a long row costs about what one reaching a few short rows does
# (scoring costs ~0.4 ms a KiB: a 9 MB answer's first 256 KiB took ~108 ms a search), and
# indexing one costs what a short row does (a 9 MB answer took seconds, all of its trigrams
# beyond the prefix leading only to exact scores of the prefix). The lexical arm finds any
# word of the whole text.
MAX_SCORED_BYTES = 1 << 14
RAISED_FLOORS = (0.8, 0.6, 0.45)
_PROBE_RATIO = 16  # binary-search a list for candidates when that is this much cheaper per item
_TINY_SCOPE = 16  # docs: a scope this small is scored without looking it up first
_SPAN_RATIO = 4  # a scope is clustered when its doc ids span under this many times its size
# A saved list longer than this is read only around a clustered scope's span (its position
# guessed from the doc ids' spread, widened until it covers the span); shorter ones whole.
_WHOLE_LIST = 4096
_SPAN_MARGIN = 1024  # entries read beyond a guessed span's ends
_SPACE = 0x20
_MASK21 = (1 << 21) - 1
_CHUNK_CHARS = 1 << 22  # characters per build chunk: bounds build memory
_CELLS = 1 << 20  # positions per scoring group: bounds word-similarity memory
_FORMAT = ("turnlake-trigram", 1)  # meta.json format name and version
_FILES = (
    ("keys", np.int64), ("offsets", np.int64), ("postings", np.int32),
    ("doc_ntrgm", np.int32), ("text_offsets", np.int64), ("text_bytes", np.uint8),
)  # fmt: skip


def _distinct(a: Arr) -> Arr:
    """Sorted distinct values (np.unique is hash based and very slow in numpy 2.4)."""
    s = pl.Series(a).sort().to_numpy() if a.size > 1 << 20 else np.sort(a, kind="stable")
    return s[_run_starts(s)]


def _run_starts(s: Arr) -> Bool:
    mask = np.ones(s.size, np.bool_)
    np.not_equal(s[1:], s[:-1], out=mask[1:])
    return mask


def _member(haystack: Arr, needles: Arr) -> Bool:
    """Which needles occur in the sorted haystack (binary search; the haystack is not copied)."""
    if haystack.size == 0:
        return np.zeros(needles.size, np.bool_)
    pos = np.searchsorted(haystack, needles.astype(haystack.dtype, copy=False))
    found: Bool = haystack[np.minimum(pos, haystack.size - 1)] == needles
    return found


def _count(flat: I32, n: int) -> tuple[I64, I64]:
    """Distinct doc ids in ``flat`` (ascending) with their number of occurrences."""
    if flat.size * 8 > n:
        counts = np.bincount(flat, minlength=n)
        docs = np.flatnonzero(counts)
        return docs, counts[docs]
    flat = np.sort(flat)
    starts = np.flatnonzero(_run_starts(flat))
    return flat[starts].astype(np.int64), np.diff(np.append(starts, flat.size))


def _min_shared(floor: float, q: int) -> int:
    """Fewest shared trigrams with which ``shared / q`` (a bound on both scores) can pass."""
    need = max(1, int(floor * q))
    while need < q and need / q < floor:
        need += 1
    while need > 1 and (need - 1) / q >= floor:
        need -= 1
    return need


def _fold(texts: Sequence[str]) -> tuple[I32, Bool, I64, I64]:
    """(lower-cased code points of the NUL-joined texts as indexes into ``alphabet``,
    word-character flags, start of each text, alphabet)."""
    lens = np.fromiter(map(len, texts), np.int64, len(texts))
    cp = np.frombuffer("\x00".join(texts).encode("utf-32-le", "surrogatepass"), np.uint32)
    starts = np.cumsum(lens + 1) - (lens + 1)
    seen = np.bincount(cp) if cp.size else np.zeros(1, np.int64)
    present = np.flatnonzero(seen).tolist()
    is_word = np.array([chr(c).isalnum() for c in present], np.bool_)
    lowered = [chr(c).lower() if w else " " for c, w in zip(present, is_word, strict=True)]
    alphabet = np.array(sorted({ord(x) for s in lowered for x in s} | {_SPACE}), np.int64)
    width = max(map(len, lowered), default=1)
    padded_ords = [[ord(x) for x in s.ljust(width)] for s in lowered] or np.zeros((0, 1))
    table = np.searchsorted(alphabet, padded_ords).astype(np.int32)
    lookup = np.zeros(seen.size, np.int32)
    lookup[present] = np.arange(len(present), dtype=np.int32)
    pidx = lookup[cp]
    if width == 1:
        return table[pidx, 0], is_word[pidx], starts, alphabet
    # a few code points lower to several ("İ" -> "i̇"); all of them stay inside the word
    reps = np.array([len(s) for s in lowered], np.int64)[pidx]
    ends = np.cumsum(reps)
    src = np.repeat(pidx, reps)
    within = np.arange(int(ends[-1])) - np.repeat(ends - reps, reps)
    return table[src, within], is_word[src], np.append(ends - reps, ends[-1])[starts], alphabet


def _padded(texts: Sequence[str]) -> tuple[I32, I64, I64, I64]:
    """All words padded "  word ": (codes, trigram start positions, doc of each, alphabet)."""
    codes, word, starts, alphabet = _fold(texts)
    edges = np.zeros(word.size + 2, np.int8)
    edges[1:-1] = word
    ws = np.flatnonzero(np.diff(edges) == 1)
    wlen = np.flatnonzero(np.diff(edges) == -1) - ws
    poff = np.cumsum(wlen + 3) - (wlen + 3)
    padded = np.full(int((wlen + 3).sum()), np.searchsorted(alphabet, _SPACE), np.int32)
    padded[np.flatnonzero(word) + np.repeat(poff + 2 - ws, wlen)] = codes[word]
    keep = np.ones(padded.size, np.bool_)
    keep[poff + wlen + 1] = keep[poff + wlen + 2] = False
    tdoc = np.repeat(np.searchsorted(starts, ws, "right") - 1, wlen + 1)
    return padded, np.flatnonzero(keep), tdoc, alphabet


def _sequences(texts: Sequence[str]) -> tuple[I64, I64, I64]:
    """Ordered trigram keys of all texts, concatenated, each text's offsets into them, and
    small ids (equal exactly when the keys are) for fast sorting."""
    padded, tpos, tdoc, alphabet = _padded(texts)
    keys = (alphabet[padded[tpos]] << 42) | (alphabet[padded[tpos + 1]] << 21)
    keys |= alphabet[padded[tpos + 2]]
    size = alphabet.size
    ids = (padded[tpos].astype(np.int64) * size + padded[tpos + 1]) * size + padded[tpos + 2]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.bincount(tdoc, minlength=len(texts)), out=offsets[1:])
    return keys, offsets, ids


# ASCII byte -> lower-cased code point inside words, space outside (str methods decide)
_ASCII_WORD = np.array([chr(c).isalnum() for c in range(0x80)], np.bool_)
_ASCII_CODES = np.array(
    [ord(chr(c).lower()) if chr(c).isalnum() else _SPACE for c in range(0x80)], np.int64
)


def _ascii_sequences(buf: npt.NDArray[np.uint8], starts: I64) -> tuple[I64, I64, I64]:
    """:func:`_sequences` of ASCII texts laid out as ``buf`` = NUL text0 NUL text1 ... NUL, text
    d starting at ``starts[d]``, without decoding them.

    A trigram ends at each word character and at the separator after each word: with
    separators read as spaces that is (two back, one back, here), where "two back" is a space
    when "one back" starts the word.
    """
    word, codes = _ASCII_WORD[buf], _ASCII_CODES[buf]
    at = np.flatnonzero(word[1:] | word[:-1]) + 1  # buf[0] is a separator
    last, mid = codes[at], codes[at - 1]
    first = np.where(word[at - 1], codes[at - 2], _SPACE)
    keys = (first << 42) | (mid << 21) | last
    ids = (first << 14) | (mid << 7) | last
    # text d's trigrams end in [starts[d], starts[d + 1]): its last one on its closing NUL
    offsets = np.append(np.searchsorted(at, starts), at.size).astype(np.int64)
    return keys, offsets, ids


def _stable_order(ids: I64) -> I64:
    """Stable argsort of non-negative ids: two 16-bit radix passes when they fit in 32 bits."""
    if ids.size == 0 or int(ids.max()) >= 1 << 32:
        return np.argsort(ids, kind="stable")
    order = np.argsort((ids & 0xFFFF).astype(np.uint16), kind="stable")
    return order[np.argsort((ids[order] >> 16).astype(np.uint16), kind="stable")]


@functools.lru_cache(maxsize=64)
def _cached_query_keys(query: str) -> bytes:
    head = query[:MAX_QUERY_CHARS]
    # ASCII text is cut straight from its bytes, several times faster than the general path
    seq = (_text_sequences([head.encode("ascii")]) if head.isascii()
           else _sequences([head]))[0].tolist()
    return np.array(sorted(list(dict.fromkeys(seq))[:MAX_QUERY_TRIGRAMS]), np.int64).tobytes()


def _query_keys(query: str) -> I64:
    """Sorted distinct keys of the query's first trigrams; cached, since one search asks every
    partition with the same query."""
    return np.frombuffer(_cached_query_keys(query), np.int64)


def _text_sequences(texts: Sequence[bytes | memoryview]) -> tuple[I64, I64, I64]:
    """:func:`_sequences` of UTF-8 encoded texts; ASCII-only batches are cut without decoding."""
    buf = np.frombuffer(b"\x00".join([b"", *texts, b""]), np.uint8)
    if buf.size and int(buf.max()) >= 0x80:
        return _sequences([str(t, "utf-8", "surrogatepass") for t in texts])
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    return _ascii_sequences(buf, np.cumsum(lengths + 1) - lengths)


def _check_arguments(query: object, limit: object, threshold: object, mode: object) -> None:
    if not isinstance(query, str):
        raise QueryError(f"trigram search: query must be str, not {type(query).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise QueryError(f"trigram search: limit must be a positive int, got {limit!r}")
    if not (isinstance(threshold, int | float) and 0.0 <= threshold <= 1.0):
        raise QueryError(f"trigram search: threshold must be in [0, 1], got {threshold!r}")
    if mode not in ("word", "similarity"):
        raise QueryError(f"trigram search: mode must be 'word' or 'similarity', got {mode!r}")


def search_scoped(
    scoped: Sequence[tuple[TrigramIndex, npt.NDArray[np.int64] | None]], query: str, *,
    limit: int = 50, threshold: float = 0.3,
    order: Sequence[tuple[int, npt.NDArray[np.int64] | None]] | None = None,
) -> list[list[tuple[int, float]]]:
    """Word-mode search over several indexes as if they were one, each limited to sorted doc
    ids (None: all): the best ``limit`` docs of them all, returned as one list per index (its
    docs among them, best first).

    On equal scores a doc of index ``i`` ranks by ``order[i] = (group, numbers)`` as
    ``(group, numbers[doc])`` (``doc`` itself when ``numbers`` is None); the default is
    ``(i, doc)``.  These ranks must differ between any two docs (segments of one partition
    share its group and number its rows).  The exact-scoring budget is one per search, spent
    on the best bounds of all indexes, so the answer does not depend on how rows are split.

    Scopes within :data:`EXACT_BUDGET` (one user's rows of a partition) are scored together in
    one exact pass; their scores then seed the top that wider scopes must beat.
    """
    _check_arguments(query, limit, threshold, "word")
    if order is not None and len(order) != len(scoped):
        raise QueryError(f"trigram search: {len(order)} order entries for {len(scoped)} indexes")
    qk = _query_keys(query)
    if qk.size == 0:
        return [[] for _ in scoped]
    narrow: list[_Piece] = []
    wide: list[_Piece] = []
    for i, (index, allowed) in enumerate(scoped):
        scope = index._scope(allowed)
        if len(index) == 0 or (scope is not None and scope.size == 0):
            continue
        group, numbers = (i, None) if order is None else order[i]
        piece = _Piece(i, index, scope, group << 32, numbers)
        (narrow if scope is not None and scope.size <= EXACT_BUDGET else wide).append(piece)
    ranking = _JointRanking(qk, float(threshold), limit)
    ranking.score_all(narrow)
    ranking.descend(wide)
    return ranking.per_index(len(scoped))


class _Piece(NamedTuple):
    """One index of a joint search, with its scope and how its docs rank on equal scores."""

    position: int  # in the caller's list
    source: TrigramIndex
    scope: I64 | None
    base: int  # group << 32
    numbers: I64 | None

    def keys(self, docs: I64) -> I64:
        """Each doc's rank among equal scores (distinct across a search's pieces)."""
        return self.base + (docs if self.numbers is None else self.numbers[docs])


class _JointRanking:
    """The top ``limit`` docs of several indexes by exact word similarity, built floor by floor
    as :meth:`TrigramIndex.search` documents, with one exact-scoring budget for all of them.

    Docs are named by their rank key (:meth:`_Piece.keys`); ``cache`` keeps exact scores,
    ``below`` the cut each other scored doc was found under, ``where`` each scored key's
    (position, doc)."""

    def __init__(self, qk: I64, threshold: float, limit: int) -> None:
        self.qk, self.threshold, self.limit = qk, threshold, limit
        self.top: list[tuple[float, int]] = []  # (-score, key): ascending is best first
        self.cache: dict[int, float] = {}
        self.below: dict[int, float] = {}
        self.where: dict[int, tuple[int, int]] = {}

    def score_all(self, pieces: list[_Piece]) -> None:
        """Score every candidate of narrow scopes exactly, in one pass; they seed the top."""
        need = _min_shared(self.threshold, self.qk.size)
        # A tiny scope (a live append's segment) is scored whole: looking its few docs up in
        # the posting lists costs more than scoring them (a partition of 100 one-turn
        # segments: ~75 us a segment); its score says which of them pass.
        found = [(p, p.scope if p.scope is not None and p.scope.size <= _TINY_SCOPE
                  else p.source._candidates(self.qk, need, p.scope, {})[0]) for p in pieces]
        slot = np.repeat(np.arange(len(pieces)), [docs.size for _, docs in found])
        if slot.size == 0:
            return
        docs = np.concatenate([docs for _, docs in found])
        keys = np.concatenate([p.keys(d) for p, d in found])
        scores = self._exact(pieces, slot, docs, self.threshold)
        for s, doc, key, score in zip(slot.tolist(), docs.tolist(), keys.tolist(), scores,
                                      strict=True):
            if score == score and score > 0:  # NaN: under the threshold
                self._scored(key, score, pieces[s].position, doc)
                self.top.append((-score, key))
        self.top = sorted(self.top)[: self.limit]

    def descend(self, pieces: list[_Piece]) -> None:
        """Wide scopes: candidates sharing ``floor * |Q|`` trigrams, for falling floors, until
        the top is settled or the budget ran out."""
        if not pieces:
            return
        q, memos, seed = self.qk.size, [dict[str, Any]() for _ in pieces], list(self.top)
        for floor in [f for f in RAISED_FLOORS if f > self.threshold] + [self.threshold]:
            need = _min_shared(floor, q)
            found = [p.source._candidates(self.qk, need, p.scope, memo)
                     for p, memo in zip(pieces, memos, strict=True)]
            slot = np.repeat(np.arange(len(pieces)), [d.size for d, _ in found])
            docs = np.concatenate([d for d, _ in found])
            shared = np.concatenate([s for _, s in found])
            keys = np.concatenate([p.keys(d) for p, (d, _) in zip(pieces, found, strict=True)])
            final = self._rank(pieces, seed, slot, docs, shared, keys)
            # below the floor every doc scores under (need - 1) / q; budget spent: lower floors
            # only add candidates that would be ranked after the ones already scored
            top, limit = self.top, self.limit
            if not final or (len(top) >= limit and top[limit - 1] < (-(need - 1) / q, -1)):
                break

    def _rank(self, pieces: list[_Piece], seed: list[tuple[float, int]], slot: I64, docs: I64,
              shared: I64, keys: I64) -> bool:
        """Exact word similarity, best bound first (ties by key), until no bound can enter
        the top; sets ``top`` and returns whether it is final for these candidates (False when
        the budget ran out first)."""
        q, limit, threshold = self.qk.size, self.limit, self.threshold
        budget = max(EXACT_BUDGET, 4 * limit)
        level = np.cumsum(np.bincount(shared, minlength=q + 1)[::-1])
        fewest = q - int(np.searchsorted(level, budget))  # fewest shared we may need
        pick = np.flatnonzero(shared >= fewest)
        pick = pick[np.lexsort((keys[pick], -shared[pick]))[:budget]]
        slot, docs = slot[pick], docs[pick]
        ids, bound = keys[pick].tolist(), (shared[pick] / q).tolist()
        cache, below = self.cache, self.below
        self.top = top = list(seed)
        start, batch = 0, max(64, limit)
        while start < len(ids):
            # a doc under the cut at the start of this batch cannot enter the top in it
            cut = threshold if len(top) < limit else max(threshold, -top[limit - 1][0])
            todo = [j for j in range(start, min(start + batch, len(ids)))
                    if bound[j] >= cut and ids[j] not in cache and below.get(ids[j], 2.0) > cut]
            if todo:
                at = np.array(todo, np.int64)
                scores = self._exact(pieces, slot[at], docs[at], cut)
                for j, score in zip(todo, scores, strict=True):
                    if score == score:
                        self._scored(ids[j], score, pieces[int(slot[j])].position, int(docs[j]))
                    else:  # NaN: scores under the cut
                        below[ids[j]] = cut
            for key, most in zip(ids[start:], bound[start : start + batch], strict=False):
                if len(top) >= limit and top[limit - 1] < (-most, key):
                    return True
                if cache.get(key, -1.0) >= threshold:
                    bisect.insort(top, (-cache[key], key))
                    del top[limit:]
            start, batch = start + batch, batch * 3 // 2
        return shared.size <= budget

    def _exact(self, pieces: list[_Piece], slot: I64, docs: I64, cut: float) -> list[float]:
        """Exact scores (NaN under ``cut``) of docs from several indexes, in one pass."""
        by_piece = np.argsort(slot, kind="stable")
        slot, docs = slot[by_piece], docs[by_piece]
        texts: list[memoryview] = []
        for s in _distinct(slot).tolist():
            texts += pieces[s].source._doc_texts(docs[slot == s].tolist())
        scores = np.empty(docs.size)
        scores[by_piece] = _extent_scores(*_text_sequences(texts), self.qk, cut)
        return scores.tolist()

    def _scored(self, key: int, score: float, position: int, doc: int) -> None:
        self.cache[key] = score
        self.where[key] = (position, doc)

    def per_index(self, n: int) -> list[list[tuple[int, float]]]:
        """The top as one list per index position, best first."""
        out: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for negative, key in self.top:
            position, doc = self.where[key]
            out[position].append((doc, -negative))
        return out


def _char_start(raw: memoryview, at: int) -> int:
    """``at``, moved back to the first byte of the UTF-8 character it falls in."""
    while raw[at] & 0xC0 == 0x80:  # a continuation byte
        at -= 1
    return at


def _scored_part(text: str) -> str:
    """What of ``text`` the index holds and scores: its first :data:`MAX_SCORED_BYTES` of
    UTF-8, cut before a character (all of a shorter text)."""
    if len(text) * 4 <= MAX_SCORED_BYTES:  # no character takes more than 4 bytes
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_SCORED_BYTES:
        return text
    return raw[:_char_start(memoryview(raw), MAX_SCORED_BYTES)].decode("utf-8", "surrogatepass")


def _key_set(text: str) -> I64:
    return _distinct(_sequences([text])[0])


def _groups(lengths: I64) -> list[int]:
    """Bounds of consecutive runs of items whose ``lengths`` add up to about ``_CELLS`` each."""
    if lengths.size == 0:
        return []
    group = (np.cumsum(lengths) - lengths) // _CELLS
    return sorted(set(np.searchsorted(group, np.arange(int(group[-1]) + 2)).tolist()))


def _spans(starts: I64, lengths: I64) -> tuple[I64, I64]:
    """Each span's items (``starts[i] .. starts[i] + lengths[i] - 1``, concatenated) and the
    offset of each span in that concatenation."""
    seg = np.cumsum(lengths) - lengths
    return np.repeat(starts - seg, lengths) + np.arange(int(lengths.sum())), seg


def _extent_scores(seq: I64, offs: I64, ids: I64, qk: I64, cutoff: float = 0.0) -> F64:
    """Exact word similarity of sorted distinct query keys ``qk`` to each text of a batch that
    scores at least ``cutoff``; NaN for the texts that score less.

    Text d is ``seq[offs[d]:offs[d+1]]`` (``ids`` as in :func:`_sequences`).  Growing an extent by
    a query trigram ("hit") never lowers its score, so a best extent starts where a run of
    consecutive hits starts and ends where one ends.  If every trigram of the first run recurs
    before the end, dropping that run (then the non-query trigrams up to the next run) loses
    nothing: from run ``a`` only ends before ``lim(a)`` are needed.  Each such pair of runs gets
    a cheap upper bound from prefix sums: at most ``min(q, hits)`` shared trigrams and at least as
    many other distinct trigrams as non-query trigrams seen there for the first time.  Only pairs
    whose bound reaches ``cutoff`` are scored exactly: in [l, u] the distinct trigrams are the
    positions whose previous occurrence lies before ``l``, a cumulative sum along each stretch.
    """
    n_docs, q = offs.size - 1, qk.size
    best = np.zeros(n_docs)
    isq = _member(qk, seq)
    hits = np.flatnonzero(isq)
    if q == 0 or hits.size == 0:
        return best if cutoff <= 0 else np.full(n_docs, np.nan)
    doc = np.repeat(np.arange(n_docs), np.diff(offs))
    ends = np.flatnonzero(np.diff(np.append(doc[hits], n_docs)))  # last hit of each text
    edge = np.zeros(seq.size + 1, np.int64)
    edge[hits[np.append(0, ends[:-1] + 1)]] += 1
    edge[hits[ends] + 1] -= 1
    keep = np.flatnonzero(np.cumsum(edge[:-1]))  # only between each text's first and last hit
    ids, doc, isq = ids[keep], doc[keep], isq[keep]
    size = ids.size
    order = _stable_order(ids)
    by_id, by_doc = ids[order], doc[order]
    same = np.flatnonzero((by_id[1:] == by_id[:-1]) & (by_doc[1:] == by_doc[:-1]))
    earlier, later = order[same], order[same + 1]
    prv = np.full(size, -1, np.int64)
    nxt = np.full(size + 1, size, np.int64)  # one spare slot for reduceat below
    prv[later], nxt[earlier] = earlier, later
    # runs of hits: a text's kept stretch starts and ends with one
    new_doc = np.ones(size + 1, np.bool_)  # [i]: position i starts a text, i - 1 ends one
    np.not_equal(doc[1:], doc[:-1], out=new_doc[1:-1])
    run_start = np.flatnonzero(isq & (new_doc[:-1] | ~np.append(False, isq[:-1])))
    run_end = np.flatnonzero(isq & (new_doc[1:] | ~np.append(isq[1:], False)))
    run_doc = doc[run_start]
    bounds = np.empty(2 * run_start.size, np.int64)
    bounds[0::2], bounds[1::2] = run_start, run_end + 1
    lim = np.maximum.reduceat(nxt, bounds)[0::2]
    last = np.minimum(np.searchsorted(run_end, lim) - 1,
                      np.searchsorted(run_doc, run_doc, "right") - 1)
    pairs = last - np.arange(run_start.size) + 1  # end runs per start run
    hit_sum = np.append(0, np.cumsum(isq))
    fresh_sum = np.append(0, np.cumsum(~isq & (prv < 0)))  # non-query, first in the stretch
    reach = np.full(run_start.size, -1, np.int64)  # last position any surviving pair needs
    for g0, g1 in itertools.pairwise(_groups(pairs)):
        end_run, _ = _spans(np.arange(g0, g1), pairs[g0:g1])
        start_run = np.repeat(np.arange(g0, g1), pairs[g0:g1])
        lo, hi = run_start[start_run], run_end[end_run] + 1
        shared = np.minimum(hit_sum[hi] - hit_sum[lo], q)
        bound = shared / (q + fresh_sum[hi] - fresh_sum[lo])
        alive = np.flatnonzero(bound >= cutoff)
        np.maximum.at(reach, start_run[alive], hi[alive] - 1)
    todo = np.flatnonzero(reach >= 0)
    low, length = run_start[todo], reach[todo] - run_start[todo] + 1
    for g0, g1 in itertools.pairwise(_groups(length)):
        pos, seg = _spans(low[g0:g1], length[g0:g1])
        new = prv[pos] < np.repeat(low[g0:g1], length[g0:g1])
        inq = isq[pos]
        new_q = new & inq
        distinct, common = np.cumsum(new, dtype=np.int64), np.cumsum(new_q, dtype=np.int64)
        # restart the sums at each stretch
        distinct -= np.repeat(distinct[seg] - new[seg], length[g0:g1])
        common -= np.repeat(common[seg] - new_q[seg], length[g0:g1])
        score = np.where(inq, common / (q + distinct - common), 0.0)
        np.maximum.at(best, doc[low[g0:g1]], np.maximum.reduceat(score, seg))
    return np.where(best >= cutoff, best, np.nan)


def trigrams(text: str) -> set[str]:
    """The pg_trgm trigram set of ``text`` (``trigrams("cat") == {"  c", " ca", "cat", "at "}``)."""
    return {
        chr(k >> 42) + chr(k >> 21 & _MASK21) + chr(k & _MASK21) for k in _key_set(text).tolist()
    }


def similarity(a: str, b: str) -> float:
    """pg_trgm ``similarity``: shared trigrams over the union of both trigram sets."""
    ka, kb = _key_set(a), _key_set(b)
    shared = int(_member(kb, ka).sum())
    return shared / (ka.size + kb.size - shared) if shared else 0.0


def word_similarity(query: str, text: str) -> float:
    """pg_trgm ``word_similarity``: best similarity of the query to any extent of ``text``."""
    return float(_extent_scores(*_sequences([text]), _key_set(query))[0])


def word_similarities(queries: Sequence[str], texts: Sequence[str], *,
                      at_least: float = 0.0) -> F64:
    """The word similarity of each query (row) to each text (column), as the index's search
    scores it (the query's first trigrams, see :data:`MAX_QUERY_TRIGRAMS`); the texts are cut
    into trigrams once for all queries. A score under ``at_least`` is 0 (such texts are not
    scored exactly, which is what makes a high ``at_least`` cheap)."""
    out = np.zeros((len(queries), len(texts)))
    if not queries or not texts:
        return out
    sequences = _sequences(list(texts))
    for row, query in enumerate(queries):
        keys = _query_keys(query)
        if keys.size:
            out[row] = np.nan_to_num(_extent_scores(*sequences, keys, at_least), nan=0.0)
    return out


_Chunk = tuple[I64, I64, I32, I64]  # keys, docs per key, docs, distinct trigrams per doc


def _chunk_postings(texts: Sequence[str], first_doc: int) -> list[_Chunk]:
    """Distinct (trigram, doc) pairs of a run of texts, grouped by trigram key."""
    n = len(texts)
    padded, tpos, tdoc, alphabet = _padded(texts)
    size = alphabet.size
    if n > 1 and size**3 * n >= 1 << 62:  # the composite sort key would overflow int64
        return _chunk_postings(texts[: n // 2], first_doc) + _chunk_postings(
            texts[n // 2 :], first_doc + n // 2
        )
    dense = (padded[tpos].astype(np.int64) * size + padded[tpos + 1]) * size + padded[tpos + 2]
    pairs = _distinct(dense * n + tdoc)
    tri = pairs // n
    group = np.flatnonzero(_run_starts(tri))
    top, rest = np.divmod(tri[group], size * size)
    mid, low = np.divmod(rest, size)
    keys = (alphabet[top] << 42) | (alphabet[mid] << 21) | alphabet[low]
    docs = pairs - tri * n
    counts = np.diff(np.append(group, tri.size))
    return [(keys, counts, (docs + first_doc).astype(np.int32), np.bincount(docs, minlength=n))]


class TrigramIndex:
    """Postings per trigram (CSR) over one partition's texts; doc ids are positions ``0..n-1``."""

    def __init__(self, arrays: dict[str, Arr], postings_file: ArrayFile | None = None) -> None:
        self._a = arrays
        self._keys: I64 = arrays["keys"]
        self._offsets: I64 = arrays["offsets"]
        # saved postings are read a list at a time with pread (postings_file), not mapped:
        # a mapped page a search touches stays in the process's RSS (~230 MB at 1M rows)
        self._postings: I32 | None = arrays.get("postings")
        self._postings_file = postings_file
        self._ntrgm: I32 = arrays["doc_ntrgm"]
        self._by_length: tuple[I32, I32] | None = None  # docs by trigram count, and counts

    @classmethod
    def build(cls, texts: Sequence[str]) -> TrigramIndex:
        """Index ``texts``; the doc id of ``texts[i]`` is ``i``."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise IndexUnavailable(f"trigram index: texts[{i}] is {type(t).__name__}, not str")
        n = len(texts)
        if n >= 1 << 31:
            raise IndexUnavailable(f"trigram index: {n} texts exceed the int32 doc id range")
        texts = [_scored_part(t) for t in texts]
        ends = np.cumsum(np.fromiter(map(len, texts), np.int64, n) + 1)
        cuts = np.searchsorted(
            ends, np.arange(_CHUNK_CHARS, int(ends[-1]) if n else 0, _CHUNK_CHARS)
        )
        bounds = sorted({0, n, *(cuts + 1).tolist()})
        chunks: list[_Chunk] = []
        for lo, hi in itertools.pairwise(bounds):
            chunks += _chunk_postings(texts[lo:hi], lo)
        keys = _distinct(np.concatenate([np.zeros(0, np.int64)] + [c[0] for c in chunks]))
        where = [np.searchsorted(keys, c[0]) for c in chunks]
        offsets = np.zeros(keys.size + 1, np.int64)
        for w, (_, counts, _, _) in zip(where, chunks, strict=True):
            offsets[w + 1] += counts
        np.cumsum(offsets, out=offsets)
        postings = np.empty(int(offsets[-1]), np.int32)
        fill = offsets[:-1].copy()
        for w, (_, counts, docs, _) in zip(where, chunks, strict=True):  # ascending chunks
            run_start = np.cumsum(counts) - counts
            postings[np.repeat(fill[w] - run_start, counts) + np.arange(docs.size)] = docs
            fill[w] += counts
        encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
        text_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, n), out=text_offsets[1:])
        ntrgm = np.concatenate([np.zeros(0, np.int64)] + [c[3] for c in chunks]).astype(np.int32)
        text_bytes = np.frombuffer(b"".join(encoded), np.uint8)
        arrays: tuple[np.ndarray, ...] = (keys, offsets, postings, ntrgm, text_offsets,
                                          text_bytes)
        return cls({name: a for (name, _), a in zip(_FILES, arrays, strict=True)})

    def save(self, directory: Path) -> None:
        """Write the index as plain ``.npy`` arrays plus ``meta.json`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, _ in _FILES:
            array = (self._postings_file.whole() if name == "postings" and self._postings is None
                     and self._postings_file is not None else self._a[name])
            np.save(directory / f"{name}.npy", np.ascontiguousarray(array))
        meta = {"format": _FORMAT[0], "version": _FORMAT[1], "docs": len(self)}
        (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, *, mmap: bool = True) -> TrigramIndex:
        """Open an index written by :meth:`save`; arrays are memory-mapped unless ``mmap=False``,
        but the postings, read a list at a time with ``pread``."""
        directory = Path(directory)
        postings: ArrayFile | None = None
        try:
            meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
            a = {
                # a plain ndarray over the map: slicing a np.memmap costs ~5 µs per slice
                name: np.asarray(np.load(directory / f"{name}.npy",
                                         mmap_mode="r" if mmap else None))
                for name, _ in _FILES if name != "postings" or not mmap
            }
            if mmap:
                postings = ArrayFile(directory / "postings.npy")
        except (OSError, ValueError) as exc:
            raise IndexUnavailable(f"trigram index at {directory} is unreadable: {exc}") from exc
        if not isinstance(meta, dict) or (meta.get("format"), meta.get("version")) != _FORMAT:
            raise IndexUnavailable(f"trigram index at {directory} has an unknown format: {meta!r}")
        bad = [k for k, dt in _FILES if k in a and (a[k].dtype != dt or a[k].ndim != 1)]
        if postings is not None and postings.dtype != np.int32:
            bad.append("postings")
        n = a["doc_ntrgm"].size
        if (
            bad
            or n != meta.get("docs")
            or a["offsets"].size != a["keys"].size + 1
            or int(a["offsets"][-1]) != (a["postings"].size if postings is None
                                         else postings.size)
            or a["text_offsets"].size != n + 1
            or int(a["text_offsets"][-1]) != a["text_bytes"].size
        ):
            raise IndexUnavailable(
                f"trigram index at {directory} is inconsistent (check {bad or 'sizes'})"
            )
        return cls(a, postings)

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
        _check_arguments(query, limit, threshold, mode)
        if mode == "word":
            return search_scoped([(self, allowed)], query, limit=limit, threshold=threshold)[0]
        scope = self._scope(allowed)
        qk = _query_keys(query)
        if qk.size == 0 or len(self) == 0 or (scope is not None and scope.size == 0):
            return []
        q, memo = qk.size, dict[str, Any]()
        top: list[tuple[float, int]] = []  # (-score, doc): ascending is best first
        for floor in [f for f in RAISED_FLOORS if f > threshold] + [float(threshold)]:
            need = _min_shared(floor, q)
            narrow = self._length_scope(q, floor, scope)
            docs, shared = self._candidates(qk, need, narrow, memo)
            scores = shared / (q + self._ntrgm[docs].astype(np.int64) - shared)
            keep = np.flatnonzero(scores >= threshold)
            keep = keep[np.argsort(-scores[keep], kind="stable")[:limit]]  # docs ascend
            top = list(zip((-scores[keep]).tolist(), docs[keep].tolist(), strict=True))
            # below the floor every doc scores under (need - 1) / q
            if len(top) >= limit and top[limit - 1] < (-(need - 1) / q, -1):
                break
        return [(d, -s) for s, d in top]

    def _scope(self, allowed: npt.NDArray[np.int64] | None) -> I64 | None:
        if allowed is None:
            return None
        a = np.asarray(allowed)
        if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
            raise QueryError(f"trigram search: allowed must be 1-D ints, got {a.dtype} {a.shape}")
        if a.size and (int(a.min()) < 0 or int(a.max()) >= len(self)):
            raise QueryError(f"trigram search: allowed has doc ids outside 0..{len(self) - 1}")
        a = a.astype(np.int64)
        return a if bool(np.all(a[1:] > a[:-1])) else _distinct(a)

    def _length_scope(self, q: int, floor: float, scope: I64 | None) -> I64 | None:
        """Narrow the scope to docs whose trigram count lets similarity reach ``floor``."""
        if floor <= 0:
            return scope
        if self._by_length is None:
            order = np.argsort(self._ntrgm, kind="stable").astype(np.int32)
            self._by_length = order, self._ntrgm[order]
        order, lengths = self._by_length
        # similarity <= min(q, |D|) / max(q, |D|); the slack guards float rounding
        lo, hi = np.searchsorted(lengths, [floor * q * (1 - 1e-9), q / floor * (1 + 1e-9)])
        if hi - lo > len(self) // 2:
            return scope
        docs = np.sort(order[lo:hi]).astype(np.int64)
        return docs if scope is None else docs[_member(scope, docs)]

    def _candidates(
        self, qk: I64, need: int, scope: I64 | None, memo: dict[str, Any]
    ) -> tuple[I64, I64]:
        """Docs (ascending) sharing at least ``need`` query trigrams, with their exact counts.

        ``memo`` carries the posting lists (rarest first) and any full count across floors."""
        n = len(self)
        if "spans" not in memo:  # each list's place in the postings, rarest first
            slot = np.searchsorted(self._keys, qk)[_member(self._keys, qk)]
            lo, hi = self._offsets[slot], self._offsets[slot + 1]
            memo["spans"] = [(int(lo[t]), int(hi[t])) for t in np.argsort(hi - lo)]
        spans: list[tuple[int, int]] = memo["spans"]
        m = len(spans)
        if m < need or (scope is not None and scope.size == 0):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if scope is not None and int(scope[-1]) - int(scope[0]) < _SPAN_RATIO * scope.size:
            # A clustered scope (one user's rows, stored together): each list's entries inside
            # the scope's span are two binary searches away, so nothing is probed doc by doc.
            # Counted once per search and scope (word mode keeps its scope across floors,
            # similarity mode narrows it per floor): lower floors keep more of the same counts.
            held = memo.get("in_span")
            if held is None or held[0] is not scope:
                held = memo["in_span"] = (scope, *self._count_in_span(spans, scope))
            _, docs, shared = held
            keep = shared >= need
            return docs[keep], shared[keep]
        if "lists" not in memo:
            memo["lists"] = [self._posting_list(lo, hi) for lo, hi in spans]
        lists: list[I32] = memo["lists"]
        counted = m - need + 1  # every doc with `need` of the m lists is in one of these
        head = sum(p.size for p in lists[:counted])
        if scope is not None and scope.size * _PROBE_RATIO < head:
            docs, shared, counted = scope, np.zeros(scope.size, np.int64), 0
        elif "full" in memo or min(head, n) * _PROBE_RATIO > sum(p.size for p in lists[counted:]):
            # too many candidates to look up one by one: count every list once, reuse below
            if "full" not in memo:
                memo["full"] = np.bincount(np.concatenate(lists), minlength=n)
            full: I64 = memo["full"]
            docs = np.flatnonzero(full >= need) if scope is None else scope[full[scope] >= need]
            return docs, full[docs]
        else:
            docs, shared = _count(np.concatenate(lists[:counted]), n)
            if scope is not None:
                if "in_scope" not in memo:  # a flag per doc: wide scopes make lookups costly
                    memo["in_scope"] = np.zeros(n, np.bool_)
                    memo["in_scope"][scope] = True
                inside = memo["in_scope"][docs]
                docs, shared = docs[inside], shared[inside]
        for i in range(counted, m):  # the frequent lists, rarest first, only for candidates
            keep = shared + (m - i) >= need
            docs, shared = docs[keep], shared[keep]
            if docs.size == 0:
                break
            if docs.size * _PROBE_RATIO < lists[i].size + n // 16:
                shared = shared + _member(lists[i], docs)
            else:
                mark = np.zeros(n, np.bool_)
                mark[lists[i]] = True
                shared = shared + mark[docs]
        keep = shared >= need
        return docs[keep], shared[keep]

    def _posting_list(self, lo: int, hi: int) -> I32:
        """Postings ``lo:hi`` (one trigram's docs, ascending)."""
        if self._postings is not None:
            return self._postings[lo:hi]
        assert self._postings_file is not None
        return self._postings_file.read(lo, hi)

    def _in_span(self, lo: int, hi: int, first: int, end: int) -> I32:
        """The docs of postings ``lo:hi`` (one list) in ``first..end-1``. A long saved list is
        read only around where those docs should lie (doc ids spread evenly: the guess), the
        window widened until its ends fall outside the span: the same docs, a few kB read."""
        if self._postings is not None or hi - lo <= _WHOLE_LIST:
            whole = self._posting_list(lo, hi)
            a, b = whole.searchsorted(np.array([first, end], np.int32)).tolist()
            return whole[a:b]
        assert self._postings_file is not None
        n, size = max(len(self), 1), hi - lo
        start = max(lo, lo + size * first // n - _SPAN_MARGIN)
        stop = min(hi, lo + -(-size * end // n) + _SPAN_MARGIN)
        while True:
            window = self._postings_file.read(start, stop)
            left = start == lo or (window.size > 0 and int(window[0]) < first)
            right = stop == hi or (window.size > 0 and int(window[-1]) >= end)
            if left and right:
                a, b = window.searchsorted(np.array([first, end], np.int32)).tolist()
                return window[a:b]
            wider = 2 * (stop - start) + _SPAN_MARGIN
            start = start if left else max(lo, start - wider)
            stop = stop if right else min(hi, stop + wider)

    def _count_in_span(self, spans: list[tuple[int, int]], scope: I64) -> tuple[I64, I64]:
        """Docs of a clustered ``scope`` (ascending) found in the lists at ``spans``, with
        their counts."""
        lo, hi = int(scope[0]), int(scope[-1]) + 1
        pieces = [p for a, b in spans for p in [self._in_span(a, b, lo, hi)] if p.size]
        if not pieces:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        flat = np.concatenate(pieces)
        if flat.size * 8 > scope.size:
            # many entries: count over the span and read the scope's own counts (the scope
            # fills at least 1/_SPAN_RATIO of its span, so this reads few docs it need not)
            counts = np.bincount(flat - lo, minlength=hi - lo)[scope - lo]
            found = np.flatnonzero(counts)
            return scope[found], counts[found]
        docs, shared = _count(flat, len(self))
        keep = _member(scope, docs)
        return docs[keep], shared[keep]

    def _doc_texts(self, docs: list[int]) -> list[memoryview]:
        """The stored UTF-8 bytes of each doc (views, not copies), at most
        :data:`MAX_SCORED_BYTES` of each, cut before a character."""
        offsets, at = self._a["text_offsets"], np.array(docs, np.int64)
        raw = self._a["text_bytes"].data  # a memoryview: slicing an array per doc is 10x slower
        return [raw[a:b if b - a <= MAX_SCORED_BYTES else _char_start(raw, a + MAX_SCORED_BYTES)]
                for a, b in zip(offsets[at].tolist(), offsets[at + 1].tolist(), strict=True)]
