"""A search's query as one value: its text and everything the search derives from the text,
worked out once by :meth:`Query.of` and handed to the arms, the coverage weights and the
relevance floor.

Each part keeps its own definition where it belongs: the words, phrases, stems, code words and
field tokens are the lexical index's reading (lake.index.lexical.ParsedQuery); whether the text
reads as meaning and its code terms are the relevance floor's (lake.search.relevance); the
times it names are lake.search.named_time's. This module only gathers them, so that no step
of a search parses the text again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lake.index.lexical import CodeWord, ParsedQuery, parse_user_query
from lake.search.named_time import NamedTime, named_times
from lake.search.relevance import code_terms, reads_as_meaning

__all__ = ["Query"]


@dataclass(frozen=True)
class Query:
    """One search's query, parsed once (read-only: it is shared by the search's threads)."""

    text: str  # as searched: the request's query without surrounding white space
    words: ParsedQuery  # free words, phrases, stems, code words, field tokens
    meaning: bool  # whether it holds a word (lake.search.relevance.reads_as_meaning)
    code_terms: tuple[str, ...]  # lake.search.relevance.code_terms
    named: tuple[NamedTime, ...]  # the times it names (none unless read against an as_of)

    @classmethod
    def of(cls, text: str, as_of: datetime | None = None) -> Query:
        """Parse ``text`` (stripped of surrounding white space); with ``as_of``, also read
        the times it names against it (a search whose time weight is 0 passes None)."""
        text = text.strip()
        return cls(text=text, words=parse_user_query(text), meaning=reads_as_meaning(text),
                   code_terms=tuple(code_terms(text)),
                   named=tuple(named_times(text, as_of)) if as_of is not None else ())

    @property
    def stems(self) -> tuple[str, ...]:
        """The query's distinct stems (lake.index.lexical.query_stems)."""
        return self.words.stems

    @property
    def code_words(self) -> tuple[CodeWord, ...]:
        """Its free words that are codes (lake.index.lexical.code_words)."""
        return self.words.code_words
