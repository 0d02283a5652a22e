"""Tests of lake.index.trigram against hand-computed pg_trgm values and a pure-Python oracle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lake.index.trigram as trigram_module
from lake.errors import IndexUnavailable, QueryError
from lake.index.trigram import (
    TrigramIndex,
    similarity,
    trigrams,
    word_similarities,
    word_similarity,
)

MODES: tuple[Literal["word", "similarity"], ...] = ("word", "similarity")
# A small alphabet so that random texts share and repeat trigrams; it mixes case, accents,
# a code point that lower-cases to two ("İ"), CJK, an emoji and separators.
ALPHABET = "abcAB  -_éİ漢字😀1"
texts_st = st.text(alphabet=ALPHABET, max_size=30)


def oracle_sequence(text: str) -> list[str]:
    """Ordered trigrams as pg_trgm builds them, written independently of the module."""
    out: list[str] = []
    word: list[str] = []
    for ch in text + ".":  # the trailing separator flushes the last word
        if ch.isalnum():
            word.append(ch.lower())
        elif word:
            padded = "  " + "".join(word) + " "
            out += [padded[i : i + 3] for i in range(len(padded) - 2)]
            word = []
    return out


def oracle_word_similarity(query: str, text: str) -> float:
    """Max over every contiguous extent E of |Q∩E| / (|Q| + |E| - |Q∩E|), by enumeration."""
    q, seq, best = set(oracle_sequence(query)), oracle_sequence(text), 0.0
    for lo in range(len(seq)):
        seen: set[str] = set()
        for tri in seq[lo:]:
            seen.add(tri)
            shared = len(seen & q)
            best = max(best, shared / (len(q) + len(seen) - shared) if q else 0.0)
    return best


def brute_force(
    texts: list[str], query: str, threshold: float, mode: str, allowed: list[int] | None
) -> list[tuple[int, float]]:
    """Score every doc in scope with the public scorers; the index must return exactly this."""
    score = word_similarity if mode == "word" else similarity
    scope = range(len(texts)) if allowed is None else allowed
    hits = [(d, score(query, texts[d])) for d in scope]
    hits = [(d, s) for d, s in hits if s >= threshold and s > 0]
    return sorted(hits, key=lambda h: (-h[1], h[0]))


@pytest.fixture(params=["default", "tiny-groups-and-probes"])
def tuning(request: pytest.FixtureRequest) -> Iterator[None]:
    """Also run with 3-position scoring groups, lookups always by binary search, and every
    narrow scope looked up in the posting lists (by default these small corpora's scopes are
    scored whole)."""
    with pytest.MonkeyPatch.context() as mp:
        if request.param != "default":
            mp.setattr(trigram_module, "_CELLS", 3)
            mp.setattr(trigram_module, "_PROBE_RATIO", 0)
            mp.setattr(trigram_module, "_TINY_SCOPE", 0)
        yield


def test_trigram_sets_match_pg_trgm_examples() -> None:
    assert trigrams("cat") == {"  c", " ca", "cat", "at "}
    assert trigrams("a") == {"  a", " a "}
    assert trigrams("Two Words!") == {
        "  t",
        " tw",
        "two",
        "wo ",
        "  w",
        " wo",
        "wor",
        "ord",
        "rds",
        "ds ",
    }
    assert trigrams("CAT") == trigrams("cat")
    assert trigrams("foo_bar") == trigrams("foo bar") == trigrams("foo, bar")
    assert trigrams("") == trigrams("!!! ... ---") == set()
    assert "x1 " in trigrams("x1")


def test_unicode_words() -> None:
    assert trigrams("漢字") == {"  漢", " 漢字", "漢字 "}
    assert trigrams("Café") == {"  c", " ca", "caf", "afé", "fé "}
    assert trigrams("a😀b") == trigrams("a b")
    assert trigrams("İx") == {"  i", " i\u0307", "i\u0307x", "\u0307x "}


def test_similarity_hand_computed() -> None:
    # word: {"  w"," wo","wor","ord","rd "}; "two words" has 10 trigrams, 4 shared -> 4/(5+10-4)
    assert similarity("word", "two words") == pytest.approx(4 / 11)
    assert similarity("cat", "CAT!") == 1.0
    assert similarity("", "cat") == similarity("cat", "...") == 0.0


def test_word_similarity_hand_computed() -> None:
    # the extent "  w"," wo","wor","ord" of "two words" holds 4 of 5 query trigrams, nothing else
    assert word_similarity("word", "two words") == pytest.approx(0.8)
    # openpxl: "  o"," op","ope","pen","enp","npx","pxl","xl " (8); the extent "  o".."enp" of
    # "openpyxl" holds 5 of them and nothing else: 5 / (8 + 5 - 5)
    assert word_similarity("openpxl", "openpyxl error") == pytest.approx(5 / 8)
    # query trigrams far apart: an extent that spans junk pays for each distinct junk trigram
    assert word_similarity("ab cd", "ab zz cd") == pytest.approx(6 / (6 + 9 - 6))
    assert word_similarity("", "abc") == word_similarity("abc", "") == 0.0


def test_word_similarity_over_many_hits(tuning: None) -> None:
    # 1600+ query-trigram hits: several scoring units; only the full extent holds all of Q
    # (17 trigrams) and it adds the 3 distinct "zz" trigrams: 17 / (17 + 20 - 17)
    text = "beta " + "alpha zz " * 400 + "gamma"
    assert word_similarity("beta alpha gamma", text) == pytest.approx(17 / 20)
    assert word_similarity("beta alpha gamma", "beta " + "alpha " * 700 + "gamma") == 1.0


@settings(max_examples=100, deadline=None)
@given(queries=st.lists(texts_st, max_size=3), texts=st.lists(texts_st, max_size=6),
       at_least=st.sampled_from([0.0, 0.5, 1.0]))
def test_word_similarities_score_each_text_as_the_oracle_does(
        queries: list[str], texts: list[str], at_least: float) -> None:
    got = word_similarities(queries, texts, at_least=at_least)
    assert got.shape == (len(queries), len(texts))
    for row, query in enumerate(queries):
        want = [oracle_word_similarity(query, t) for t in texts]
        # a score under at_least reads 0
        assert got[row].tolist() == pytest.approx(
            [w if w >= at_least - 1e-9 else 0.0 for w in want]), query


# `tuning` only patches constants; too_slow as in the suite's profile (tests/conftest.py),
# which an explicit suppress_health_check would otherwise replace
FIXTURE_OK = (HealthCheck.function_scoped_fixture, HealthCheck.too_slow)


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(query=texts_st, text=texts_st)
def test_scorers_match_oracle(tuning: None, query: str, text: str) -> None:
    assert trigrams(text) == set(oracle_sequence(text))
    assert word_similarity(query, text) == pytest.approx(oracle_word_similarity(query, text))
    a, b = set(oracle_sequence(query)), set(oracle_sequence(text))
    expected = len(a & b) / len(a | b) if a and b else 0.0
    assert similarity(query, text) == pytest.approx(expected)


@settings(max_examples=120, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    texts=st.lists(texts_st, max_size=25),
    query=texts_st,
    threshold=st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.6, 0.8, 1.0]),
    mode=st.sampled_from(MODES),
    scope=st.none() | st.sets(st.integers(0, 24)),
    limit=st.integers(1, 30),
)
def test_search_equals_brute_force(
    tuning: None,
    texts: list[str],
    query: str,
    threshold: float,
    mode: Literal["word", "similarity"],
    scope: set[int] | None,
    limit: int,
) -> None:
    index = TrigramIndex.build(texts)
    allowed = None if scope is None else sorted(d for d in scope if d < len(texts))
    got = index.search(
        query,
        allowed=None if allowed is None else np.array(allowed, np.int64),
        limit=limit,
        threshold=threshold,
        mode=mode,
    )
    assert got == brute_force(texts, query, threshold, mode, allowed)[:limit]


def corpus(n: int) -> list[str]:
    """Deterministic texts where "the" and "error" are in most docs (common trigrams)."""
    rng = np.random.default_rng(7)
    words = ["the", "error", "sheet", "openpyxl", "workbook", "cell", "value", "pandas", "zeta"]
    words += [f"w{i}x" for i in range(40)]
    p = np.array([30.0, 20.0] + [1.0] * (len(words) - 2))
    picks = rng.choice(len(words), size=(n, 9), p=p / p.sum())
    return [" ".join(words[j] for j in row) for row in picks.tolist()]


def test_large_corpus_equals_brute_force() -> None:
    # common trigrams ("the", "error" in most docs), scopes small enough to be probed or not
    texts = corpus(1200)
    index = TrigramIndex.build(texts)
    rng = np.random.default_rng(3)
    scopes = [None] + [np.sort(rng.choice(1200, k, replace=False)) for k in (12, 700)]
    for query in ["the error sheet", "openpxl eror", "w7x the"]:
        for mode in MODES:
            every = brute_force(texts, query, 0.3, mode, None)
            for scope in scopes:
                inside = every if scope is None else [h for h in every if h[0] in set(scope)]
                got = index.search(query, allowed=scope, limit=40, threshold=0.3, mode=mode)
                assert got == inside[:40]


def test_clustered_scopes_equal_brute_force() -> None:
    # a user's rows stored together: the scope spans a short stretch of doc ids, with holes
    texts = corpus(1200)
    index = TrigramIndex.build(texts)
    rng = np.random.default_rng(5)
    stretch = np.arange(300, 420)
    wide = np.arange(100, 1100)  # past the exact budget: counted once, then every floor
    scopes = [stretch, stretch[rng.random(stretch.size) < 0.7], np.arange(0, 3), np.array([1199]),
              wide[rng.random(wide.size) < 0.7]]
    for query in ["the error sheet", "openpxl eror", "w7x the", "zeta"]:
        every = brute_force(texts, query, 0.3, "word", None)
        for scope in scopes:
            inside = [h for h in every if h[0] in set(scope.tolist())]
            for limit in (3, 40):
                got = index.search(query, allowed=scope, limit=limit, threshold=0.3)
                assert got == inside[:limit]


def joint_brute_force(corpora: list[list[str]], scopes: list[np.ndarray | None], query: str,
                      threshold: float, limit: int) -> list[list[tuple[int, float]]]:
    """The best ``limit`` docs of all corpora (ties by corpus, then doc), split per corpus."""
    every = [(-s, i, d) for i, (texts, scope) in enumerate(zip(corpora, scopes, strict=True))
             for d, s in brute_force(texts, query, threshold, "word",
                                     None if scope is None else scope.tolist())]
    out: list[list[tuple[int, float]]] = [[] for _ in corpora]
    for negative, i, d in sorted(every)[:limit]:
        out[i].append((d, -negative))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    corpora=st.lists(st.lists(texts_st, max_size=12), min_size=1, max_size=4),
    query=texts_st,
    threshold=st.sampled_from([0.0, 0.3, 0.5, 0.8]),
    picks=st.lists(st.none() | st.sets(st.integers(0, 11)), min_size=4, max_size=4),
    limit=st.integers(1, 10),
)
def test_search_scoped_is_one_search_over_all_indexes(
    tuning: None, corpora: list[list[str]], query: str, threshold: float,
    picks: list[set[int] | None], limit: int,
) -> None:
    indexes = [TrigramIndex.build(texts) for texts in corpora]
    scopes = [None if pick is None else np.array(sorted(d for d in pick if d < len(texts)),
                                                  np.int64)
              for texts, pick in zip(corpora, picks, strict=False)]
    got = trigram_module.search_scoped(list(zip(indexes, scopes, strict=True)), query,
                                       limit=limit, threshold=threshold)
    assert got == joint_brute_force(corpora, scopes, query, threshold, limit)
    if len(indexes) == 1:
        assert got[0] == indexes[0].search(query, allowed=scopes[0], limit=limit,
                                           threshold=threshold)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    texts=st.lists(texts_st, min_size=1, max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=3),
    query=texts_st,
    limit=st.integers(1, 12),
    data=st.data(),
)
def test_split_indexes_ranked_as_one_give_the_whole_index_answer(
    tuning: None, texts: list[str], cuts: list[int], query: str, limit: int,
    data: st.DataObject,
) -> None:
    # segments of one partition: rows dealt out to several indexes, ranked by their row number
    owner = np.array(data.draw(st.lists(st.integers(0, len(cuts)), min_size=len(texts),
                                        max_size=len(texts))), np.int64)
    pieces = [np.flatnonzero(owner == s) for s in range(len(cuts) + 1)]
    whole = TrigramIndex.build(texts)
    got = trigram_module.search_scoped(
        [(TrigramIndex.build([texts[r] for r in rows.tolist()]), None) for rows in pieces],
        query, limit=limit, threshold=0.3, order=[(0, rows) for rows in pieces])
    merged = sorted(((int(pieces[i][d]), s) for i, hits in enumerate(got) for d, s in hits),
                    key=lambda h: (-h[1], h[0]))
    assert merged == whole.search(query, limit=limit, threshold=0.3)


def test_search_scoped_mixes_narrow_and_wide_scopes(monkeypatch: pytest.MonkeyPatch) -> None:
    # past the exact budget an index goes through the floors; narrow ones are scored whole
    # and seed the top the wide ones must beat: the answer is still the joint top
    monkeypatch.setattr(trigram_module, "EXACT_BUDGET", 50)
    texts = corpus(400)
    a, b = TrigramIndex.build(texts), TrigramIndex.build(texts[::-1])
    narrow, wide = np.arange(10, 40), np.arange(0, 400, 2)
    scopes: list[np.ndarray | None] = [narrow, wide, None]
    for query, limit in [("the error sheet", 15), ("openpxl zeta", 40)]:
        got = trigram_module.search_scoped([(a, narrow), (b, wide), (a, None)], query,
                                           limit=limit, threshold=0.3)
        assert got == joint_brute_force([texts, texts[::-1], texts], scopes, query, 0.3, limit)
        assert sum(map(len, got)) == limit
    with pytest.raises(QueryError, match="limit"):
        trigram_module.search_scoped([(a, narrow)], "the", limit=0)
    with pytest.raises(QueryError, match="order"):
        trigram_module.search_scoped([(a, narrow)], "the", order=[])


def test_exact_scoring_budget_keeps_scores_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # past the budget the list may miss docs, but what it returns is scored and ordered exactly
    monkeypatch.setattr(trigram_module, "EXACT_BUDGET", 5)
    texts = corpus(300)
    index = TrigramIndex.build(texts)
    got = index.search("openpxl the zeta", limit=1, threshold=0.1)
    assert len(got) == 1
    full = brute_force(texts, "openpxl the zeta", 0.1, "word", None)
    assert set(got) <= set(full)
    many = index.search("the zeta", limit=40, threshold=0.1)
    assert many == sorted(many, key=lambda h: (-h[1], h[0]))
    assert all(word_similarity("the zeta", texts[d]) == s for d, s in many)


def test_misspelled_query_finds_doc() -> None:
    index = TrigramIndex.build(["how do I install pandas", "openpyxl error on save", "lunch menu"])
    hits = index.search("openpxl")
    assert [d for d, _ in hits] == [1]
    assert hits[0][1] == pytest.approx(5 / 8)
    assert index.search("openpxl", threshold=0.7) == []


def test_allowed_filter_threshold_and_ties() -> None:
    texts = ["cat sat", "the cat", "cat", "dog", "cat"]
    index = TrigramIndex.build(texts)
    assert index.search("cat", limit=10) == [(0, 1.0), (1, 1.0), (2, 1.0), (4, 1.0)]
    assert index.search("cat", limit=2) == [(0, 1.0), (1, 1.0)]
    assert index.search("cat", allowed=np.array([1, 3, 4])) == [(1, 1.0), (4, 1.0)]
    assert index.search("cat", allowed=np.array([4, 1, 4])) == [(1, 1.0), (4, 1.0)]
    assert index.search("cat", allowed=np.array([], np.int64)) == []
    sims = index.search("cat", mode="similarity", limit=10)
    assert sims[:2] == [(2, 1.0), (4, 1.0)]
    assert all(s >= 0.3 for _, s in sims) and 3 not in {d for d, _ in sims}
    assert index.search("cat", mode="similarity", threshold=0.9) == [(2, 1.0), (4, 1.0)]


def test_save_load_round_trip(tmp_path: Path) -> None:
    texts = ["openpyxl error", "漢字のテスト", "café crème", "", "emoji 😀 here", "x" * 3000]
    index = TrigramIndex.build(texts)
    index.save(tmp_path / "idx")
    for mmap in (True, False):
        loaded = TrigramIndex.load(tmp_path / "idx", mmap=mmap)
        assert len(loaded) == len(texts)
        for query in ["openpyxl", "漢字", "creme", "emoji", "xxxx"]:
            for mode in MODES:
                assert loaded.search(query, mode=mode) == index.search(query, mode=mode)
    assert TrigramIndex.load(tmp_path / "idx").search("漢字")[0][0] == 1


@pytest.mark.parametrize(("whole_list", "margin"), [(4096, 1024), (0, 1), (0, 40)])
def test_opened_postings_are_read_not_mapped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, whole_list: int, margin: int
) -> None:
    # a posting list is read with pread when a search needs it: the file is never mapped, so
    # what searches read is page cache, not the process's RSS; a re-save writes it whole.
    # A clustered scope reads only a window of a long list around its span: guessed, then
    # widened (a one-entry margin makes most guesses fall short)
    monkeypatch.setattr(trigram_module, "_WHOLE_LIST", whole_list)
    monkeypatch.setattr(trigram_module, "_SPAN_MARGIN", margin)
    rng = np.random.default_rng(5)
    words = ["alpha", "beta", "gamma", "delta", "number", "row", "about"]
    texts = [" ".join(rng.choice(words, 4).tolist()) + f" {i * 7}" for i in range(400)]
    index = TrigramIndex.build(texts)
    index.save(tmp_path / "idx")
    loaded = TrigramIndex.load(tmp_path / "idx")
    scopes = [np.arange(0, 400, 2, dtype=np.int64), np.arange(0, 30, dtype=np.int64),
              np.arange(180, 260, dtype=np.int64), np.arange(370, 400, dtype=np.int64)]
    for query in ["alpha", "beta number 7", "row 39", "gamma delta", "nothing like it"]:
        for mode in MODES:
            assert loaded.search(query, mode=mode) == index.search(query, mode=mode)
            for scope in scopes:
                assert loaded.search(query, mode=mode, allowed=scope) == \
                    index.search(query, mode=mode, allowed=scope)
    mapped = Path("/proc/self/maps").read_text()
    assert str(tmp_path / "idx" / "postings.npy") not in mapped
    assert str(tmp_path / "idx" / "keys.npy") in mapped  # the small arrays stay mapped
    loaded.save(tmp_path / "again")
    assert (tmp_path / "again" / "postings.npy").read_bytes() == \
        (tmp_path / "idx" / "postings.npy").read_bytes()


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(IndexUnavailable, match="unreadable"):
        TrigramIndex.load(tmp_path / "missing")
    TrigramIndex.build(["a b", "c"]).save(tmp_path / "idx")
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    (tmp_path / "idx" / "meta.json").write_text(json.dumps({**meta, "docs": 5}))
    with pytest.raises(IndexUnavailable, match="inconsistent"):
        TrigramIndex.load(tmp_path / "idx")
    (tmp_path / "idx" / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(IndexUnavailable, match="unknown format"):
        TrigramIndex.load(tmp_path / "idx")


def test_empty_odd_and_huge_queries() -> None:
    index = TrigramIndex.build(["alpha beta", "漢字 text", "emoji 😀 party", ""])
    assert index.search("") == index.search("  !!! ... 😀 ") == []
    assert [d for d, _ in index.search("漢字")] == [1]
    assert TrigramIndex.build([]).search("alpha") == []
    # ~100 KB; its speed is timed by bench.huge_queries (no wall-clock asserts in unit tests)
    assert [d for d, _ in index.search("alpha beta gamma " * 6000)] == [0]


def test_bad_input_raises() -> None:
    index = TrigramIndex.build(["a", "b"])
    with pytest.raises(QueryError, match="limit"):
        index.search("a", limit=0)
    with pytest.raises(QueryError, match="threshold"):
        index.search("a", threshold=1.5)
    with pytest.raises(QueryError, match="mode"):
        index.search("a", mode="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="outside"):
        index.search("a", allowed=np.array([0, 2]))
    with pytest.raises(QueryError, match="1-D ints"):
        index.search("a", allowed=np.array([0.5]))
    with pytest.raises(QueryError, match="query"):
        index.search(None)  # type: ignore[arg-type]
    with pytest.raises(IndexUnavailable, match=r"texts\[1\]"):
        TrigramIndex.build(["ok", 3])  # type: ignore[list-item]


# -- bounded exact scoring and the ASCII tokenizer ------------------------------------------

ASCII_ALPHABET = "abcAB  -_.,01\x00\t"
CUTOFFS = [0.0, 0.1, 0.25, 0.3, 0.5, 0.6, 0.8, 1.0]


@settings(max_examples=200, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    texts=st.lists(st.text(alphabet=ALPHABET, max_size=40), min_size=1, max_size=8),
    query=st.text(alphabet=ALPHABET, min_size=1, max_size=12),
    cutoff=st.sampled_from(CUTOFFS) | st.floats(0.0, 1.0),
)
def test_bounded_scorer_is_exact_at_or_above_the_cut(
    tuning: None, texts: list[str], query: str, cutoff: float
) -> None:
    # texts scoring >= cutoff get their exact word similarity, all others NaN
    qk = np.array(sorted(set(trigram_module._sequences([query])[0].tolist())), np.int64)
    got = trigram_module._extent_scores(*trigram_module._sequences(texts), qk, cutoff)
    for text, score in zip(texts, got.tolist(), strict=True):
        expected = oracle_word_similarity(query, text)
        if expected >= cutoff:
            assert score == pytest.approx(expected)
            assert score == word_similarity(query, text)  # bit for bit
        else:
            assert np.isnan(score)


def test_bounded_scorer_on_long_texts_with_many_runs(tuning: None) -> None:
    # hundreds of runs of hits, repeated junk between them: pruned pairs must still find the
    # best extent; "beta .. gamma" spans everything: 17 / (17 + 3)
    texts = ["beta " + "alpha zz " * 300 + "gamma", "alpha " * 50, "zz beta gamma zz alpha"]
    qk = np.array(sorted(set(trigram_module._sequences(["beta alpha gamma"])[0].tolist())))
    exact = [word_similarity("beta alpha gamma", t) for t in texts]
    assert exact[0] == pytest.approx(17 / 20)
    for cutoff in [0.0, 0.3, 0.5, 0.85, 0.86, 1.0]:
        got = trigram_module._extent_scores(*trigram_module._sequences(texts), qk, cutoff)
        assert [s if s >= cutoff else None for s in exact] == [
            None if np.isnan(s) else s for s in got.tolist()
        ]


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(
    texts=st.lists(st.text(alphabet=ASCII_ALPHABET, max_size=40), max_size=20),
    query=st.text(alphabet=ASCII_ALPHABET + "é", max_size=12),
    threshold=st.sampled_from([0.0, 0.3, 0.5, 0.8]),
    limit=st.integers(1, 25),
)
def test_ascii_corpus_search_equals_brute_force(
    tuning: None, texts: list[str], query: str, threshold: float, limit: int
) -> None:
    # ASCII-only batches are tokenized from the stored bytes; they must agree with the
    # Unicode tokenizer the public scorers use (NUL, tabs, digits, case, punctuation)
    index = TrigramIndex.build(texts)
    got = index.search(query, limit=limit, threshold=threshold)
    assert got == brute_force(texts, query, threshold, "word", None)[:limit]


@settings(max_examples=150, deadline=None)
@given(query=st.text(alphabet=ASCII_ALPHABET + "é漢", max_size=40))
def test_query_keys_take_the_first_distinct_trigrams_in_order(query: str) -> None:
    seq = trigram_module._sequences([query])[0].tolist()
    expected = sorted(dict.fromkeys(seq))
    assert trigram_module._query_keys(query).tolist() == expected


def test_query_keys_of_a_long_query_keep_the_first_256() -> None:
    query = " ".join(f"w{i}x{i * 7}" for i in range(400))
    seq = trigram_module._sequences([query])[0].tolist()
    expected = sorted(list(dict.fromkeys(seq))[:trigram_module.MAX_QUERY_TRIGRAMS])
    assert trigram_module._query_keys(query).tolist() == expected


def test_mixed_ascii_and_unicode_batches() -> None:
    # one non-ASCII text in a batch sends it through the Unicode tokenizer; results agree
    texts = [f"alpha beta {i} gamma" for i in range(150)] + ["alpha café beta"] * 3
    texts += ["ALPHA\x00beta\tgamma", "alphabet gamma"]
    index = TrigramIndex.build(texts)
    for query in ["alpha beta", "alpha café", "gamma", "alpahbet"]:
        for limit in (5, 200):
            got = index.search(query, limit=limit, threshold=0.3)
            assert got == brute_force(texts, query, 0.3, "word", None)[:limit]


def test_budget_with_a_rising_cut_keeps_the_reference_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # with a small budget the answer depends on which docs get scored: the first `budget`
    # candidates by shared trigrams (then doc id), exactly; a doc skipped because it could not
    # reach the cut must not change that
    monkeypatch.setattr(trigram_module, "EXACT_BUDGET", 8)
    texts = corpus(400)
    index = TrigramIndex.build(texts)
    for query, limit in [("the error sheet", 3), ("openpxl the zeta", 2), ("w7x the", 1)]:
        qk = np.array(sorted(set(trigram_module._sequences([query])[0].tolist())), np.int64)
        shared = np.array([len(set(oracle_sequence(t)) & set(oracle_sequence(query)))
                           for t in texts])
        q = qk.size
        floors = [f for f in trigram_module.RAISED_FLOORS if f > 0.1] + [0.1]
        expected: list[tuple[int, float]] = []
        for floor in floors:  # the documented algorithm, scoring every budgeted doc
            need = trigram_module._min_shared(floor, q)
            cands = np.flatnonzero(shared >= need)
            budget = max(trigram_module.EXACT_BUDGET, 4 * limit)
            order = cands[np.argsort(-shared[cands], kind="stable")][:budget]
            scored = [(d, word_similarity(query, texts[d])) for d in order.tolist()]
            expected = sorted([h for h in scored if h[1] >= 0.1],
                              key=lambda h: (-h[1], h[0]))[:limit]
            if cands.size > budget or (
                len(expected) >= limit and expected[-1][1] > (need - 1) / q
            ):
                break
        assert index.search(query, limit=limit, threshold=0.1) == expected


def test_ties_at_the_cut_still_enter_by_doc_id() -> None:
    # 120 docs share all of "alpha beta" far apart (bound 1, score 6/11: "alpha" alone), then 30
    # lower-id docs hold only "alpha" (bound 6/11, score 6/11): scored in a later batch, when
    # the top is full at exactly their score, they must still win the tie by doc id
    far = "alpha qwertyuiopasdfgh beta"
    texts = ["alpha"] * 30 + [f"x{i}" for i in range(50)] + [far] * 120
    index = TrigramIndex.build(texts)
    assert word_similarity("alpha beta", far) == word_similarity("alpha beta", "alpha") == 6 / 11
    assert index.search("alpha beta", limit=2, threshold=0.3) == [(0, 6 / 11), (1, 6 / 11)]
    assert index.search("alpha beta", limit=40, threshold=0.3) == brute_force(
        texts, "alpha beta", 0.3, "word", None)[:40]


def test_similarity_floors_count_each_narrowed_scope() -> None:
    # similarity mode narrows the scope by trigram count at each floor: counts made for one
    # floor's scope must not answer the next (doc 2 alone at 0.8, doc 3 only at 0.1)
    index = TrigramIndex.build(["", "", "A", "1_A"])
    assert index.search("1", limit=1, threshold=0.1, mode="similarity") == [(3, 0.5)]


def test_a_huge_text_is_scored_by_its_opening_and_never_cut_inside_a_character(
        tmp_path: Path) -> None:
    cut = trigram_module.MAX_SCORED_BYTES
    # "é" (2 bytes) straddles the cut: decoding a view cut there would fail.
    opening = "café deployment " + "a" * (cut - 18) + "é"
    assert len(opening.encode()) == cut + 1
    huge = opening + " filler" * 200_000 + " zanzibarite"
    index = TrigramIndex.build([huge, "a short deploymint note", "zanzibarit rock"])
    found = dict(index.search("deploymint", threshold=0.3))
    assert set(found) == {0, 1}  # the huge text's word near its opening is scored
    assert found[1] == pytest.approx(1.0)
    # A word only past the cut is not rescored in the huge text: the short row that holds
    # it ranks, and the lexical arm (not this one) finds it in the huge one.
    assert dict(index.search("zanzibarit", threshold=0.9)) == {2: pytest.approx(1.0)}
    # It is indexed by that opening alone (cut before the "é"): the same files as an index
    # of the opening, so building and storing it cost what a short text does.
    index.save(tmp_path / "huge")
    TrigramIndex.build([opening[:-1], "a short deploymint note", "zanzibarit rock"]).save(
        tmp_path / "opening")
    for name in ("keys", "offsets", "postings", "doc_ntrgm", "text_offsets", "text_bytes"):
        assert (tmp_path / "huge" / f"{name}.npy").read_bytes() \
            == (tmp_path / "opening" / f"{name}.npy").read_bytes(), name
