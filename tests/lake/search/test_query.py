"""The query as a value (lake.search.query): each part it derives once equals what the
functions that define that part make of the text, on texts of words, codes, times, typos,
quotes, other scripts and nothing; and an index's compiled queries are its own."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.index.lexical import (
    MAX_FIELD_TOKENS,
    LexicalDoc,
    LexicalIndex,
    ParsedQuery,
    _shared_analyzers,
    _without_cjk,
    code_words,
    parse_user_query,
    query_stems,
    word_stems,
)
from lake.search.named_time import named_times
from lake.search.query import Query
from lake.search.relevance import code_terms, reads_as_meaning

AS_OF = datetime(2026, 3, 20, 12, 0, tzinfo=UTC)

TEXTS = [
    "", "   ", "what did Maria donate in December 2023?", "INC-3147", "what broke in INC3147",
    "PR #4560 INC-9999", "mk0 mk100", "x7y9z1", "cp1252 utf8", "the who", "didn't work",
    'Fix "Module Not Found" in lake/index.py now now', 'say "hello world', "東京タワー 行きました",
    "recieve teh pakage yesturday", "last week's deploy on Monday", "since March",
    "between June 5 and 2023-06-03", "net::ERR_CONNECTION_RESET", "v2.3.1 upgrade",
    "Café crème", "9876", "#4471", "  padded query  ", '"" empty quotes',
]

# words of every kind the search reads differently: plain, stop words, codes, dates, CJK
WORDS = st.sampled_from([
    "the", "what", "did", "running", "runs", "openpyxl", "module", "INC-3147", "inc3147",
    "PR", "#4560", "2023-06-03", "June", "3rd", "May", "last", "week", "yesterday", "東京",
    "タワー", "ERR_X", "a.py", "v2.3.1", '"', "'", "teh", "recieve", "Café", "x7y9z1", "ago",
    "2", "days", "in", "on", "since", "-", "::",
])


def old_stems(text: str) -> tuple[str, ...]:
    """The stems as query_stems made them before the value: every word's, first first."""
    parsed = parse_user_query(text)
    words = [*parsed.terms, *(w for phrase in parsed.phrases for w in phrase)]
    return tuple(dict.fromkeys(t for w in words for t in word_stems(w)))[:MAX_FIELD_TOKENS]


def old_tokens(terms: list[str], field: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A field's tokens as the index worked them out per search before the value."""
    analyzers = _shared_analyzers()
    analyzer = {"text_stem": analyzers.stem, "context_stem": analyzers.stem,
                "text_raw": analyzers.raw, "text_ident": analyzers.ident}[field]
    tokens: dict[str, tuple[str, ...]] = {}
    for term in terms:
        text = term if field == "text_ident" else _without_cjk(term)
        for token in analyzer.analyze(text):
            tokens.setdefault(token, tuple(word_stems(term)))
    return tuple(tokens.items())[:MAX_FIELD_TOKENS]


def check(text: str) -> None:
    query = Query.of(text, AS_OF)
    stripped = text.strip()
    assert query.text == stripped
    assert query.words == parse_user_query(stripped)
    assert query.stems == old_stems(stripped) == query_stems(stripped)
    assert list(query.code_words) == code_words(parse_user_query(stripped).terms)
    assert query.meaning == reads_as_meaning(stripped)
    assert list(query.code_terms) == code_terms(stripped)
    assert list(query.named) == named_times(stripped, AS_OF)
    for field in ("text_stem", "text_raw", "text_ident", "context_stem"):
        assert query.words.tokens[field] == old_tokens(query.words.terms, field), field


@pytest.mark.parametrize("text", TEXTS)
def test_each_part_is_what_its_own_function_makes_of_the_text(text: str) -> None:
    check(text)


@settings(max_examples=60, deadline=None)
@given(st.lists(WORDS, max_size=12).map(" ".join))
def test_each_part_is_what_its_own_function_makes_of_any_text(text: str) -> None:
    check(text)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=40))
def test_any_characters_parse_like_their_functions(text: str) -> None:
    check(text)


def test_times_are_read_only_against_an_as_of() -> None:
    assert Query.of("the deploy in March 2026").named == ()
    [named] = Query.of("the deploy in March 2026", AS_OF).named
    assert named.phrase == "in March 2026"


def test_the_value_is_read_only() -> None:
    query = Query.of("INC-3147 broke")
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.text = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.words.stems = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        query.words.tokens["text_raw"] = ()  # type: ignore[index]


def test_a_parsed_query_passes_through_and_equal_texts_share_a_key() -> None:
    words = parse_user_query("openpyxl module")
    assert ParsedQuery.of(words) is words
    assert ParsedQuery.of("openpyxl   module").key == words.key


ROWS = [
    LexicalDoc(0, "ModuleNotFoundError: No module named 'openpyxl'", "assistant", "alice", "c1"),
    LexicalDoc(1, "closing INC-3147 today", "user", "alice", "c1"),
    LexicalDoc(2, "openpyxl spreadsheet export", "assistant", "bob", "c2"),
]


def test_an_index_answers_a_parsed_query_as_its_text_and_keeps_its_own_compiled_queries(
        tmp_path: Path) -> None:
    first = LexicalIndex.build(tmp_path / "a", ROWS, heap_bytes=20_000_000)
    second = LexicalIndex.build(tmp_path / "b", ROWS[:2], heap_bytes=20_000_000)
    for text in ("openpyxl module", "inc3147", '"no module"', "the"):
        words = Query.of(text).words
        assert first.search(words) == first.search(text)
        assert first.term_stats(words, user_id="alice") == first.term_stats(text,
                                                                              user_id="alice")
        assert second.search(words) == second.search(text)
    # each index compiled the queries with its own schema, none with the other's
    assert first._compiled and second._compiled
    assert all(a is not b for a in first._compiled.values() for b in second._compiled.values()
               if a is not None)
