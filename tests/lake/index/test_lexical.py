"""Behaviour of the lexical (BM25) candidate generator, on real tantivy indexes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.errors import IndexUnavailable, QueryError, RecordError
from lake.index.lexical import (
    DEFAULT_ROLE_WEIGHTS,
    MAX_QUERY_TERMS,
    LexicalDoc,
    LexicalIndex,
    held_stems,
    parse_user_query,
    query_stems,
    word_stems,
    word_stems_each,
)

ROWS = [
    LexicalDoc(0, "She runs every morning before work", "user", "alice", "c1"),
    LexicalDoc(1, "ModuleNotFoundError: No module named 'openpyxl'", "assistant", "alice", "c1"),
    LexicalDoc(2, "Not one module was found, an error when loading it", "assistant", "alice", "c1"),
    LexicalDoc(3, "openpyxl spreadsheet export", "assistant", "alice", "c1"),
    LexicalDoc(4, "net::ERR_CONNECTION_RESET while uploading", "user", "bob", "c2"),
    LexicalDoc(5, "err: connection reset", "user", "bob", "c2"),
    LexicalDoc(6, "東京タワーに行きました", "user", "alice", "c3"),
    LexicalDoc(7, "Café crème, s'il vous plaît", "user", "alice", "c3"),
    LexicalDoc(8, "please upgrade to v2.3.1 today", "note", "alice", "c3"),
    LexicalDoc(9, "please upgrade to v2.3.0 today, step 1", "note", "alice", "c3"),
    LexicalDoc(10, "not found: the module for openpyxl", "summary", "bob", "c2"),
    LexicalDoc(11, "서울에 갔어요", "user", "bob", "c2"),
    LexicalDoc(12, "kubernetes", "anchor", "carol", "c4"),
    LexicalDoc(13, "kubernetes", "assistant", "carol", "c4"),
    LexicalDoc(14, "openpyxl notes", "user", "carol", "c4"),
    LexicalDoc(15, "She running every morning before work", "user", "alice", "c1"),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> LexicalIndex:
    return LexicalIndex.build(tmp_path_factory.mktemp("lex") / "ix", ROWS, heap_bytes=20_000_000)


def docs(hits: list[tuple[int, float]]) -> list[int]:
    return [doc for doc, _ in hits]


def test_len_and_results_are_sorted_best_first(index: LexicalIndex) -> None:
    assert len(index) == len(ROWS)
    hits = index.search("openpyxl module error")
    scores = [score for _, score in hits]
    assert len(hits) >= 3
    assert scores == sorted(scores, reverse=True)
    assert len(index.search("openpyxl module error", limit=2)) == 2


def test_stemming_finds_other_forms_and_exact_form_ranks_first(index: LexicalIndex) -> None:
    # Rows 0 and 15 differ only in "runs" / "running": the unstemmed match decides the order.
    assert docs(index.search("running")) == [15, 0]
    assert docs(index.search("runs")) == [0, 15]
    assert docs(index.search("ran")) == []


def test_exact_error_name_ranks_first(index: LexicalIndex) -> None:
    assert docs(index.search("ModuleNotFoundError"))[0] == 1
    assert docs(index.search("ERR_CONNECTION_RESET"))[:2] == [4, 5]
    assert docs(index.search("v2.3.1"))[0] == 8


def test_all_terms_outrank_partial_match(index: LexicalIndex) -> None:
    hits = docs(index.search("openpyxl spreadsheet export", roles=["assistant", "user"]))
    assert hits[0] == 3
    assert set(hits) >= {1, 3, 14}


def test_anchor_outranks_assistant_for_same_text(index: LexicalIndex) -> None:
    assert DEFAULT_ROLE_WEIGHTS["anchor"] > DEFAULT_ROLE_WEIGHTS["assistant"]
    hits = index.search("kubernetes")
    assert docs(hits) == [12, 13]
    assert hits[0][1] > hits[1][1]


def test_role_weights_change_order(index: LexicalIndex) -> None:
    hits = index.search("kubernetes", role_weights={"assistant": 10.0})
    assert docs(hits) == [13, 12]


@pytest.mark.parametrize("bad", [{"robot": 1.0}, {"user": 0.0}, {"user": float("nan")}])
def test_bad_role_weights_raise(index: LexicalIndex, bad: dict[str, float]) -> None:
    with pytest.raises(QueryError):
        index.search("kubernetes", role_weights=bad)


@pytest.mark.parametrize("query", ["openpyxl", "module not found error", "upgrade today", "東京"])
def test_user_filter_never_leaks(index: LexicalIndex, query: str) -> None:
    owners = {row.doc: row.user_id for row in ROWS}
    for user in ("alice", "bob", "carol", "nobody"):
        assert all(owners[d] == user for d in docs(index.search(query, user_id=user)))
    assert docs(index.search("openpyxl", user_id="bob")) == [10]


def test_conversation_and_role_filters(index: LexicalIndex) -> None:
    assert set(docs(index.search("openpyxl", conversation_id="c1"))) == {1, 3}
    assert docs(index.search("openpyxl", roles=["summary"])) == [10]
    assert docs(index.search("openpyxl", roles=[])) == []
    with pytest.raises(QueryError):
        index.search("openpyxl", roles=["robot"])
    with pytest.raises(QueryError):
        index.search("openpyxl", user_id="")
    with pytest.raises(QueryError):
        index.search("openpyxl", user_id="\ud800")


def test_quoted_phrase_is_required(index: LexicalIndex) -> None:
    # Docs 2 and 10 hold all three words, but only doc 10 has them as a phrase.
    assert docs(index.search('"not found" module')) == [10]
    assert set(docs(index.search("not found module"))) >= {2, 10}
    # A single quoted word is a required term while the free word only adds score.
    assert set(docs(index.search('"openpyxl" spreadsheet'))) == {1, 3, 10, 14}


def test_unbalanced_quote_is_plain_text(index: LexicalIndex) -> None:
    assert parse_user_query('say "hello world') == parse_user_query("say hello world")
    assert 0 in docs(index.search('"running'))


@pytest.mark.parametrize(
    "query",
    [
        "openpyxl AND (",
        "NOT openpyxl",
        "-openpyxl",
        "+openpyxl",
        "openpyxl^10",
        "openpyxl~2",
        "openpyxl*",
        "text_raw:openpyxl",
        "[openpyxl TO z]",
        "{openpyxl}",
        "\\openpyxl",
        ".*openpyxl.*",
        "openpyxl)|(a",
        "openpyxl OR",
        "'openpyxl'",
        '"openpyxl',
        "openpyxl && ||",
        "openpyxl ?$",
    ],
)
def test_syntax_characters_are_text(index: LexicalIndex, query: str) -> None:
    assert 3 in docs(index.search(query))


@pytest.mark.parametrize("query", ["", "   ", '""', "*", ":", "()", "\\", "^~", '"', "-- +"])
def test_empty_queries_return_nothing(index: LexicalIndex, query: str) -> None:
    assert index.search(query) == []


@settings(max_examples=150, deadline=None)
@given(query=st.text(max_size=300))
def test_arbitrary_text_never_raises(index: LexicalIndex, query: str) -> None:
    hits = index.search(query, limit=5, user_id="alice")
    assert len(hits) <= 5
    assert all(ROWS[doc].user_id == "alice" for doc, _ in hits)


def test_cjk_substring_and_single_character(index: LexicalIndex) -> None:
    assert docs(index.search("東京")) == [6]
    assert docs(index.search("タワー")) == [6]
    assert docs(index.search("京")) == [6]
    assert docs(index.search('"東京タワー"')) == [6]
    assert docs(index.search('"東京ビル"')) == []
    assert docs(index.search("서울")) == [11]


@pytest.mark.parametrize("query", ["café", "cafe", "CAFÉ", "Cafe\u0301", "crème"])
def test_accented_words_are_found(index: LexicalIndex, query: str) -> None:
    assert docs(index.search(query)) == [7]


def test_long_query_is_capped(index: LexicalIndex) -> None:
    # its speed is timed by bench.huge_queries, not here: a busy machine fails wall-clock asserts
    words = [f"filler{i}" for i in range(20_000)]
    hits = index.search("openpyxl " + " ".join(words))
    assert 3 in docs(hits)
    parsed = parse_user_query(" ".join(words) + ' "a b"' * 100)
    assert len(parsed.terms) == MAX_QUERY_TERMS
    assert parsed.phrases == []  # phrases after the character cap are not read


def test_parse_user_query() -> None:
    parsed = parse_user_query('Fix "Module Not Found" in lake/index.py now now')
    # Stop words leave the free words ("in") but stay in phrases ("not").
    assert parsed.phrases == [["module", "not", "found"]]
    assert parsed.terms == ["fix", "lake/index.py", "now"]
    assert parse_user_query("What did she say about it?").terms == ["say"]
    assert parse_user_query("the who").terms == ["the", "who"]
    assert parse_user_query("didn't work").terms == ["work"]


def test_open_round_trip(index: LexicalIndex, tmp_path: Path) -> None:
    LexicalIndex.build(tmp_path / "ix", ROWS, heap_bytes=20_000_000)
    reopened = LexicalIndex.open(tmp_path / "ix")
    assert len(reopened) == len(ROWS)
    for query in ("running", "東京", '"not found" module', "ERR_CONNECTION_RESET"):
        assert reopened.search(query, user_id="bob") == index.search(query, user_id="bob")


def test_open_missing_or_incomplete_index(tmp_path: Path) -> None:
    with pytest.raises(IndexUnavailable):
        LexicalIndex.open(tmp_path / "absent")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    with pytest.raises(IndexUnavailable):
        LexicalIndex.open(tmp_path / "junk")
    with pytest.raises(IndexUnavailable):
        LexicalIndex.build(tmp_path / "junk", ROWS)


@pytest.mark.parametrize(
    "row",
    [
        LexicalDoc(0, "x", "robot", "u", "c"),
        LexicalDoc(-1, "x", "user", "u", "c"),
        LexicalDoc(True, "x", "user", "u", "c"),
        LexicalDoc(0, None, "user", "u", "c"),  # type: ignore[arg-type]
        LexicalDoc(0, "lone \udc00 surrogate", "user", "u", "c"),
    ],
)
def test_build_rejects_bad_rows(tmp_path: Path, row: LexicalDoc) -> None:
    with pytest.raises(RecordError):
        LexicalIndex.build(tmp_path / "ix", [row], heap_bytes=20_000_000)


def test_build_rejects_duplicate_doc_ids(tmp_path: Path) -> None:
    rows = [LexicalDoc(1, "a", "user", "u", "c"), LexicalDoc(1, "b", "user", "u", "c")]
    with pytest.raises(RecordError, match="duplicate"):
        LexicalIndex.build(tmp_path / "ix", rows, heap_bytes=20_000_000)


@pytest.mark.parametrize("limit", [0, -1, 10**9])
def test_bad_limit_raises(index: LexicalIndex, limit: int) -> None:
    with pytest.raises(QueryError):
        index.search("openpyxl", limit=limit)


def test_turn_context_field_matches_the_exchange_and_can_be_switched_off(tmp_path: Path) -> None:
    docs = [
        LexicalDoc(0, "can you check it again", "user", "u1", "c1",
                   context="can you check it again\nthe ingress timeout was too short"),
        LexicalDoc(1, "nothing about that here", "user", "u1", "c2", context="other words"),
    ]
    index = LexicalIndex.build(tmp_path / "ctx", docs)
    assert [d for d, _ in index.search("ingress timeout")] == [0]
    assert index.search("ingress timeout", context=False) == []


def test_a_partition_that_fits_the_heap_is_one_segment(tmp_path: Path) -> None:
    # Several indexing threads would each write a segment, and every search visits each.
    rows = [LexicalDoc(i, f"row {i} about a deploy error", "user", f"u{i % 7}", f"c{i % 40}")
            for i in range(2000)]
    index = LexicalIndex.build(tmp_path / "ix", rows)
    assert index.segments == 1
    assert len(index) == 2000
    assert docs(index.search("deploy", limit=5, user_id="u3")) == [3, 10, 17, 24, 31]


def test_term_stats_count_the_index_or_one_users_rows(index: LexicalIndex) -> None:
    # "openpyxl": rows 1 and 3 (alice), 10 (bob), 14 (carol); "module": 1, 2 (alice), 10 (bob)
    assert index.term_stats("openpyxl module") == (len(ROWS), [4, 3])
    alice = sum(1 for row in ROWS if row.user_id == "alice")
    assert index.term_stats("openpyxl module", user_id="alice") == (alice, [2, 2])
    assert index.term_stats("openpyxl module", user_id="nobody") == (0, [0, 0])
    with pytest.raises(QueryError, match="user_id"):
        index.term_stats("openpyxl", user_id="")


def test_word_weights_multiply_each_words_clauses(index: LexicalIndex) -> None:
    plain = dict(index.search("openpyxl"))
    doubled = dict(index.search("openpyxl", word_weights={"openpyxl": 2.0}))
    assert doubled.keys() == plain.keys()
    for doc, score in plain.items():
        assert doubled[doc] == pytest.approx(2 * score, rel=1e-5)
    # Lowering one word of two ranks rows by the other: row 2 holds only "module", row 3
    # only "openpyxl".
    low_openpyxl = docs(index.search("openpyxl module", word_weights={"openpyxl": 0.01}))
    low_module = docs(index.search("openpyxl module", word_weights={"module": 0.01}))
    assert low_openpyxl.index(2) < low_openpyxl.index(3)
    assert low_module.index(3) < low_module.index(2)
    # A stem the query does not make changes nothing.
    assert index.search("openpyxl", word_weights={"kubernetes": 5.0}) == index.search("openpyxl")


@pytest.mark.parametrize("weight", [0.0, -1.0, float("nan"), float("inf"), True])
def test_word_weights_must_be_positive_numbers(index: LexicalIndex, weight: object) -> None:
    with pytest.raises(QueryError, match="word weight"):
        index.search("openpyxl", word_weights={"openpyxl": weight})  # type: ignore[dict-item]


def test_an_index_removed_while_it_opens_is_an_index_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction in another process may remove a build between the open of its folder and
    its reader's lock file: an IndexUnavailable (which search answers by looking again), not the
    tantivy ValueError that reached a served search as an internal error."""
    import shutil

    import tantivy

    import lake.index.lexical as lexical

    folder = tmp_path / "ix"
    LexicalIndex.build(folder, ROWS[:3], heap_bytes=20_000_000)

    class Removed:
        @staticmethod
        def open(path: str) -> tantivy.Index:
            opened = tantivy.Index.open(path)
            shutil.rmtree(path)  # the compaction's prune, right after the open
            return opened

    monkeypatch.setattr(lexical, "Index", Removed)
    with pytest.raises(IndexUnavailable, match="cannot open lexical index"):
        LexicalIndex.open(folder)


# --- held_stems against word_stems ------------------------------------------------------

# Words whose stems are irregular (y -> i, the Porter2 exceptions), stop words, accents,
# digits, underscores, apostrophes and CJK: the cases a prefix shortcut could get wrong.
_TRICKY = ["dying", "die", "lying", "lies", "tying", "ties", "skies", "sky", "skis", "study",
           "studies", "studied", "happy", "happiness", "happily", "early", "only", "ugly",
           "gently", "news", "running", "runs", "ran", "go", "goes", "going", "the", "was",
           "Café", "cafe", "naïve", "naive", "x2", "covid19", "foo_bar", "don't", "Mia's",
           "犬の散歩", "Pottery", "POTTERS", "kiln", "idly", "a" * 70, "exceed", "proceeding"]
_SEPARATORS = [" ", ", ", "\n", "-", ".", "!", " (", ") ", "/", "'"]


@given(st.lists(st.sampled_from(_TRICKY), max_size=6),
       st.lists(st.lists(st.tuples(st.sampled_from(_TRICKY), st.sampled_from(_SEPARATORS)),
                         max_size=12), max_size=5))
def test_held_stems_are_the_query_stems_each_text_makes(query_words: list[str],
                                                        texts: list[list[tuple[str, str]]],
                                                        ) -> None:
    stems = query_stems(" ".join(query_words))
    written = ["".join(w + s for w, s in text) for text in texts]
    got = held_stems(stems, written)
    assert got == [frozenset(stems) & frozenset(word_stems(t)) for t in written]


def test_held_stems_of_no_stems_or_no_texts() -> None:
    assert held_stems((), ["anything at all"]) == [frozenset()]
    assert held_stems(("studi",), []) == []
    assert held_stems(("studi", "die"), ["Dying to STUDY", "a dead end"]) == [
        frozenset({"studi", "die"}), frozenset()]


@given(st.lists(st.text(max_size=40), max_size=6))
def test_word_stems_each_is_word_stems_per_text(texts: list[str]) -> None:
    assert word_stems_each(texts) == [word_stems(t) for t in texts]
