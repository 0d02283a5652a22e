"""How query words and the turn-context field score, on real tantivy indexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake.index.lexical import MAX_QUERY_TERMS, LexicalDoc, LexicalIndex, parse_user_query

ROWS = [
    LexicalDoc(0, "What did she say? She said that it was what it was.", "user", "u1", "c1",
               context="What did she say? She said that it was what it was."),
    LexicalDoc(1, "the pottery class was on Saturday", "user", "u1", "c2",
               context="the pottery class was on Saturday\nlovely"),
    LexicalDoc(2, "I saw The Who live in 1979", "user", "u1", "c3",
               context="I saw The Who live in 1979"),
    LexicalDoc(3, "who is the owner of this and the other thing", "user", "u1", "c4",
               context="who is the owner of this and the other thing"),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> LexicalIndex:
    return LexicalIndex.build(tmp_path_factory.mktemp("lexq") / "ix", ROWS, heap_bytes=20_000_000)


def docs(hits: list[tuple[int, float]]) -> list[int]:
    return [doc for doc, _ in hits]


def test_stop_words_do_not_score(index: LexicalIndex) -> None:
    # Row 0 is full of "what", "did", "she", "was"; only row 1 holds a content word.
    assert docs(index.search("What did she do at the pottery class?")) == [1]
    assert index.search("what did she do at the pottery class") == index.search("pottery class")


def test_a_query_of_only_stop_words_keeps_them(index: LexicalIndex) -> None:
    hits = docs(index.search("the who"))
    assert hits[:1] in ([2], [3])
    assert {2, 3} <= set(hits)


def test_quoted_phrase_keeps_its_stop_words(index: LexicalIndex) -> None:
    # Row 3 holds "the" and "who" too, but not as a phrase.
    assert docs(index.search('"the who"')) == [2]
    assert docs(index.search('"the who" live')) == [2]
    assert docs(index.search('"who is the owner"')) == [3]
    assert index.search('"who was the owner"') == []


def test_stop_words_do_not_use_up_the_term_cap() -> None:
    words = ["the", "what", "did"] * 20 + [f"word{i}" for i in range(MAX_QUERY_TERMS)]
    assert parse_user_query(" ".join(words)).terms == [f"word{i}" for i in range(MAX_QUERY_TERMS)]


def test_turn_context_scores_only_on_user_and_assistant_rows(tmp_path: Path) -> None:
    exchange = "the deploy failed twice\nrolled back the ingress change"
    rows = [
        # Turn c1 has an anchor; turn c2 is plain. Both exchanges mention the ingress.
        LexicalDoc(0, "the deploy failed twice", "user", "u1", "c1", context=exchange),
        LexicalDoc(1, "rolled back the ingress change", "assistant", "u1", "c1",
                   context=exchange),
        LexicalDoc(2, "deploy rollback", "anchor", "u1", "c1", context=exchange),
        LexicalDoc(3, "is the ingress change live", "user", "u1", "c2",
                   context="is the ingress change live\nyes"),
    ]
    index = LexicalIndex.build(tmp_path / "ctx", rows)
    hits = index.search("ingress")
    # The anchor row never matches through its turn's exchange, however heavy its role.
    assert 2 not in docs(hits)
    assert set(docs(hits)) == {0, 1, 3}
    # Its own words still match, and its role weight puts it first.
    assert docs(index.search("rollback"))[0] == 2
    # Without the context field, only rows whose own text holds the word match.
    assert set(docs(index.search("ingress", context=False))) == {1, 3}


def test_a_code_is_found_in_its_other_spelling(tmp_path: Path) -> None:
    rows = [
        LexicalDoc(0, "the ingress broke, see INC-3147", "user", "u1", "c1"),
        LexicalDoc(1, "closing INC5150 today", "assistant", "u1", "c2"),
        LexicalDoc(2, "INC 3148 and 3147 other things", "user", "u1", "c3"),
        LexicalDoc(3, "nothing here about tickets", "user", "u1", "c4"),
    ]
    index = LexicalIndex.build(tmp_path / "ix", rows, heap_bytes=20_000_000)
    # written without its separator, the code finds the row writing it with one, as its
    # runs in order ("inc 3147" as a phrase): row 2 holds both runs apart and comes after
    assert docs(index.search("INC3147"))[:1] == [0]
    assert docs(index.search("what broke in INC3147"))[:1] == [0]
    # written with one, it finds the row writing it without (as the token "inc5150")
    assert docs(index.search("INC-5150"))[:1] == [1]
    assert docs(index.search("inc_5150 status"))[:1] == [1]
    # a number alone, or words with no digit, keep their one spelling
    assert docs(index.search("5150")) == []
    assert docs(index.search("e-mail")) == []
