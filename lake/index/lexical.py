"""Lexical (BM25) candidate generator over one partition's content rows, on tantivy.

Each row is indexed four ways (stemmed words, raw words with positions, compound identifiers,
CJK bigrams). A query is never parsed as tantivy syntax: it is split into words and quoted
phrases here and built from ``Query`` constructors with the fields' own analyzers, so syntax
characters are plain separators. English stop words are dropped from a query's free words,
codes also match their other spelling (lake.index.codes), and a search may swap the index's
IDF for a user's own (``word_weights``). The fields and the reasons for each rule:
docs/design/lexical.md.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from tantivy import (
    Document,
    Filter,
    Index,
    Occur,
    Query,
    Schema,
    SchemaBuilder,
    TextAnalyzer,
    TextAnalyzerBuilder,
    Tokenizer,
)

from lake.errors import IndexUnavailable, QueryError, RecordError
from lake.index.codes import spellings
from lake.tables import EXCHANGE_ROLES
from lake.tables import ROLES as ROLE_ORDER

ROLES = frozenset(ROLE_ORDER)  # the roles are defined once, in lake.tables
DEFAULT_ROLE_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"anchor": 2.5, "summary": 2.5, "note": 1.5, "attachment": 1.5, "user": 1.0, "assistant": 1.0}
)

# Bounds that keep a pasted 100 KB query cheap: characters beyond MAX_QUERY_CHARS are
# ignored, then at most MAX_QUERY_TERMS distinct words, MAX_PHRASES phrases of at most
# MAX_PHRASE_WORDS words, and MAX_FIELD_TOKENS analysed tokens per field become clauses.
MAX_QUERY_CHARS = 16_384
MAX_QUERY_TERMS = 32
MAX_PHRASES = 8
MAX_PHRASE_WORDS = 16
MAX_FIELD_TOKENS = 64
MAX_LIMIT = 10_000

# Per-field boosts: the stemmed field carries the match, exact forms and identifiers add.
# The turn's exchange outweighs the row's own words because search returns turns: a person
# remembers the exchange, not which of its rows held a word. Exact word forms only break ties
# between stemmed matches: at 0.6 a word written exactly as queried counted 1.6 times in the
# row's own text (stemmed + exact) but once in the exchange (stemmed only), which tipped the
# balance back to the row. On LoCoMo, with stop words already dropped, these two moved the
# lexical arm's recall@10 from .660 to .674 (minimal records) and from .683 to .728 (rich);
# anything from 2 to 3 for the exchange and 0 to 0.3 for exact forms is within .01 of that.
_W_STEM = 1.0
_W_RAW = 0.1
_W_IDENT = 1.0  # per word of the identifier
_W_CJK = 1.0
_W_CTX = 3.0
# Rows of these roles never match through the turn's exchange (see the module docstring).
# Excluding the few rows of these roles is cheaper than requiring the many user/assistant ones.
_NO_CTX_ROLES = sorted(ROLES - EXCHANGE_ROLES)

# The Snowball English stop-word list, less its contracted forms, plus the pieces the word
# splitter leaves of a contraction ("didn't" -> "didn", "t"); "don" and "won" stay searchable
# (a name, a verb). It is longer than tantivy's "english" filter, which the stemmed field uses
# at index time and which keeps "what", "did", "she", "how" and the like.
_STOP_WORDS = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing would should could ought a an the and but if or because as until while of at by for
    with about against between into through during before after above below to from up down
    in out on off over under again further then once here there when where why how all any
    both each few more most other some such no nor not only own same so than too very cannot
    s t d ll re ve m isn aren wasn weren hasn haven hadn doesn didn wouldn shan shouldn couldn
    mustn
"""
ENGLISH_STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS.split())

_FORMAT = 1
_META_FILE = "turnlake_lexical.json"
_TOK_STEM, _TOK_RAW, _TOK_IDENT = "tl_stem", "tl_raw", "tl_ident"

# Scripts written without spaces between words; they are searched through bigrams.
_CJK_RANGES = [
    (0x1100, 0x11FF), (0x3040, 0x30FF), (0x3130, 0x318F), (0x31F0, 0x31FF),
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F), (0x20000, 0x2FA1F),
]  # fmt: skip
_CJK_RUN = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _CJK_RANGES) + "]+")
# Only "_ . -" join identifiers: with ":" or "/" too, "net::ERR_X" or "src/a.py" would be one
# token that a query for "ERR_X" or "a.py" could not hit.
_RUST_IDENT = r"[\p{L}\p{N}\p{M}]+(?:[_.\-]+[\p{L}\p{N}\p{M}]+)+"
# A query word keeps identifier connectors so the ident analyzer sees the whole identifier.
_QUERY_WORD = re.compile(r"\w+(?:[.\-/:@]+\w+)*")
_PHRASE = re.compile(r'"([^"]*)"')
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "＂": '"'})


@dataclass(frozen=True)
class LexicalDoc:
    """One content row to index: its position in the partition, text, role and scope."""

    doc: int
    text: str
    role: str
    user_id: str
    conversation_id: str
    # The turn's exchange (its user and assistant texts): a low-weight field that lets a row
    # match words its turn used elsewhere, as a person remembers the whole exchange.
    context: str = ""


@dataclass(frozen=True)
class ParsedQuery:
    """A user query split into free words (OR-ed) and quoted phrases (each required), with
    what the index derives from them, worked out once when it is made: a search hands the
    same value to every partition, its statistics and its coverage weights. Read-only."""

    terms: list[str]
    phrases: list[list[str]]
    # derived from terms and phrases (not compared: they follow from them)
    stems: tuple[str, ...] = field(init=False, compare=False, repr=False)
    code_words: tuple[CodeWord, ...] = field(init=False, compare=False, repr=False)
    tokens: Mapping[str, tuple[tuple[str, tuple[str, ...]], ...]] = field(
        init=False, compare=False, repr=False)
    other_spellings: tuple[tuple[tuple[str, ...], int, tuple[str, ...]], ...] = field(
        init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        analyzers = _shared_analyzers()
        words = [*self.terms, *(w for phrase in self.phrases for w in phrase)]
        derived = {
            "stems": tuple(dict.fromkeys(t for w in words for t in word_stems(w)))[
                :MAX_FIELD_TOKENS],
            "code_words": tuple(code_words(self.terms)),
            "tokens": MappingProxyType({
                name: _field_tokens(self.terms, name, analyzer) for name, analyzer in (
                    ("text_stem", analyzers.stem), ("text_raw", analyzers.raw),
                    ("text_ident", analyzers.ident), ("context_stem", analyzers.stem))}),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "other_spellings", _other_spellings(self.code_words,
                                                                     analyzers.raw))

    @classmethod
    def of(cls, query: str | ParsedQuery) -> ParsedQuery:
        """``query`` itself when parsed already, else :func:`parse_user_query` of it."""
        return query if isinstance(query, ParsedQuery) else parse_user_query(query)

    @property
    def key(self) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
        """The words and phrases as a hashable key (what an index's compiled query depends
        on)."""
        return tuple(self.terms), tuple(tuple(p) for p in self.phrases)


def parse_user_query(query: str) -> ParsedQuery:
    """Split raw user text into lower-cased words and balanced ``"quoted phrases"``.

    Nothing is treated as syntax except a balanced pair of double quotes; an unbalanced quote
    is plain text. Only the first MAX_QUERY_CHARS characters are read; words are de-duplicated,
    ENGLISH_STOP_WORDS are dropped from the free words unless every free word is one, and the
    rest are capped at MAX_QUERY_TERMS; phrases (stop words kept) are capped at MAX_PHRASES
    (extra phrases become free words).
    """
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    text = unicodedata.normalize("NFC", query[:MAX_QUERY_CHARS]).translate(_QUOTES).lower()
    phrases: list[list[str]] = []
    loose: list[str] = []
    last = 0
    for match in _PHRASE.finditer(text):
        loose.append(text[last : match.start()])
        last = match.end()
        words = _QUERY_WORD.findall(match.group(1))
        if len(words) == 0:
            continue
        if len(phrases) < MAX_PHRASES:
            phrases.append(words[:MAX_PHRASE_WORDS])
        else:
            loose.append(" ".join(words))
    loose.append(text[last:])
    terms = list(dict.fromkeys(w for part in loose for w in _QUERY_WORD.findall(part)))
    content = [w for w in terms if w not in ENGLISH_STOP_WORDS]
    return ParsedQuery(terms=(content or terms)[:MAX_QUERY_TERMS], phrases=phrases)


def query_stems(query: str | ParsedQuery) -> tuple[str, ...]:
    """The distinct stemmed words of a query, in order (free words and phrase words, at most
    MAX_FIELD_TOKENS): the words whose statistics :meth:`LexicalIndex.term_stats` reports and
    that ``word_weights`` are keyed by (:attr:`ParsedQuery.stems`)."""
    return ParsedQuery.of(query).stems


def _without_cjk(text: str) -> str:
    return _CJK_RUN.sub(" ", text)


def cjk_grams(text: str) -> list[list[str]]:
    """Overlapping character bigrams per CJK run of ``text`` (a one-character run is kept)."""
    if text.isascii():  # O(1) in CPython; the regex scan holds the GIL ~2.3 s over 9 MB
        return []
    runs = _CJK_RUN.findall(text)
    return [[r] if len(r) == 1 else [r[i : i + 2] for i in range(len(r) - 1)] for r in runs]


@dataclass(frozen=True)
class _Analyzers:
    stem: TextAnalyzer
    raw: TextAnalyzer
    ident: TextAnalyzer

    @classmethod
    def create(cls) -> _Analyzers:
        def word() -> TextAnalyzerBuilder:
            # The simple tokenizer is ~6x faster than a regex one; CJK runs are blanked out
            # in Python beforehand (_without_cjk), on both the index and the query side.
            return TextAnalyzerBuilder(Tokenizer.simple()).filter(Filter.remove_long(64))

        stem = (
            word()
            .filter(Filter.lowercase())
            .filter(Filter.ascii_fold())
            .filter(Filter.stopword("english"))
            .filter(Filter.stemmer("english"))
            .build()
        )
        raw = word().filter(Filter.lowercase()).build()
        ident = (
            TextAnalyzerBuilder(Tokenizer.regex(_RUST_IDENT))
            .filter(Filter.remove_long(128))
            .filter(Filter.lowercase())
            .build()
        )
        return cls(stem=stem, raw=raw, ident=ident)

    def register(self, index: Index) -> None:
        # Custom analyzers are not persisted with the index; every open must register them.
        index.register_tokenizer(_TOK_STEM, self.stem)
        index.register_tokenizer(_TOK_RAW, self.raw)
        index.register_tokenizer(_TOK_IDENT, self.ident)


@functools.cache
def _shared_analyzers() -> _Analyzers:
    return _Analyzers.create()


def word_stems(text: str) -> list[str]:
    """The stemmed terms the lexical index makes of ``text`` (stop words dropped, CJK runs
    left out): a word of a query matches a row only when they share one of these."""
    return list(_shared_analyzers().stem.analyze(_without_cjk(text)))


# Placed between texts so one analyzer call stems many: lowercase ASCII letters that no
# analyzer step changes (not a stop word, no English suffix, under the length cap).
_TEXT_BREAK = "qzxtextbreakqzx"


class CodeWord(NamedTuple):
    """A query word that is a code of letters and digits (lake.index.codes.spellings)."""

    word: str  # as the word fields read it (CJK runs left out)
    runs: list[str]
    joined: str
    stems: tuple[str, ...]  # the stems the word makes


def code_words(terms: Sequence[str]) -> list[CodeWord]:
    """The query's free words (:attr:`ParsedQuery.terms`) that are codes: the ones the index
    also looks for in their other spelling, and that a turn writing them so covers
    (lake.search.coverage)."""
    found = []
    for term in terms:
        word = _without_cjk(term)
        if (forms := spellings(word)) is not None:
            found.append(CodeWord(word, *forms, tuple(word_stems(word))))
    return found


def _field_tokens(terms: Sequence[str], field_name: str, analyzer: TextAnalyzer
                  ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A field's tokens of the query's free words, each with the stems of the word that made
    it (the first such word), which key its weight."""
    tokens: dict[str, tuple[str, ...]] = {}
    for term in terms:
        stems = tuple(word_stems(term))
        text = term if field_name == "text_ident" else _without_cjk(term)
        for token in analyzer.analyze(text):
            tokens.setdefault(token, stems)
    return tuple(tokens.items())[:MAX_FIELD_TOKENS]


def _other_spellings(codes: Sequence[CodeWord], raw: TextAnalyzer
                     ) -> tuple[tuple[tuple[str, ...], int, tuple[str, ...]], ...]:
    """Each code word's other spelling on ``text_raw`` (lake.index.codes): "inc3147" as the
    tokens of the phrase "inc 3147", which a row writing "INC-3147" holds, "inc-3147" as the
    token "inc3147" of a row writing "INC3147"; with the word's number of runs and its stems,
    which weigh it as its identifier would be."""
    found = []
    for code in codes:
        tokens = raw.analyze(code.word)
        other = raw.analyze(" ".join(code.runs) if len(tokens) == 1 else code.joined)
        if other and other != tokens:
            found.append((tuple(other), len(code.runs), code.stems))
    return tuple(found)


def word_stems_each(texts: Sequence[str]) -> list[list[str]]:
    """:func:`word_stems` of every text, in one analyzer call (a call per text costs ~12 µs):
    :func:`held_stems` stems a search's candidate words at once. A text that itself holds
    the separator word is stemmed on its own instead."""
    if len(texts) < 2:
        return [word_stems(t) for t in texts]
    out: list[list[str]] = [[]]
    for token in word_stems(f" {_TEXT_BREAK} ".join(texts)):
        if token == _TEXT_BREAK:
            out.append([])
        else:
            out[-1].append(token)
    if len(out) != len(texts):
        return [word_stems(t) for t in texts]
    return out


# Words whose Porter2 stem does not begin with the word's first letters (the algorithm's
# exceptional forms): each stem's extra prefixes for held_stems.
_IRREGULAR_PREFIXES = {"die": ("dy",), "lie": ("ly",), "tie": ("ty",)}


def held_stems(stems: Collection[str], texts: Sequence[str]) -> list[frozenset[str]]:
    """Per text, the ones of ``stems`` that its words make: ``frozenset(word_stems(text)) &
    stems``, found without stemming every word.

    A search weighs each lexical match by the share of the query it holds
    (lake.search.coverage), over about twenty turns' texts: stemming all their words took
    ~0.45 ms a search (tantivy's analyzer from Python, ~450 ns a word), most of them words
    that cannot make a query stem. A Porter2 stem keeps its word's first letters, all but a
    final ``i`` that was a ``y`` ("studi" of "study") and three exceptional forms ("die" of
    "dying"), so in an ASCII text only the words beginning with such a prefix are stemmed;
    other texts are stemmed whole. :func:`word_stems` per text is the test oracle."""
    wanted = frozenset(stems)
    if not wanted:
        return [frozenset() for _ in texts]
    prefixes = tuple(sorted({p for stem in wanted
                             for p in (stem[:-1] if len(stem) > 2 else stem,
                                       *_IRREGULAR_PREFIXES.get(stem, ()))}))
    words = [_prefixed_words(t.lower(), prefixes) if t.isascii() else None for t in texts]
    distinct = sorted({w for found in words if found for w in found})
    stem_of = dict(zip(distinct, word_stems_each(distinct), strict=True))
    out = []
    for text, found in zip(texts, words, strict=True):
        if found is None:
            out.append(wanted.intersection(word_stems(text)))
        else:
            out.append(frozenset(s for w in found for s in stem_of[w] if s in wanted))
    return out


# A word as the tokenizer cuts a lower-cased ASCII text: a run of letters and digits.
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def _prefixed_words(text: str, prefixes: tuple[str, ...]) -> list[str]:
    """The words of a lower-cased ASCII ``text`` that begin with one of ``prefixes`` (a word
    may come once per prefix it begins with). Searching for each prefix skips the text's
    other words in C; splitting every text into words took twice as long."""
    found = []
    for prefix in prefixes:
        at = text.find(prefix)
        while at >= 0:
            if at == 0 or not text[at - 1].isalnum():
                word = _ASCII_WORD.match(text, at)
                if word is not None:
                    found.append(word.group())
            at = text.find(prefix, at + 1)
    return found


def _schema() -> Schema:
    sb = SchemaBuilder()
    sb.add_integer_field("doc", fast=True)
    sb.add_text_field("text_stem", tokenizer_name=_TOK_STEM, index_option="freq")
    sb.add_text_field("text_raw", tokenizer_name=_TOK_RAW, index_option="position")
    sb.add_text_field("text_ident", tokenizer_name=_TOK_IDENT, index_option="freq")
    sb.add_text_field("text_cjk", tokenizer_name="whitespace", index_option="position")
    sb.add_text_field("context_stem", tokenizer_name=_TOK_STEM, index_option="freq")
    for name in ("role", "user_id", "conversation_id"):
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    return sb.build()


def _document(row: LexicalDoc, seen: set[int]) -> Document:
    if not isinstance(row, LexicalDoc):
        raise RecordError(f"expected LexicalDoc, got {type(row).__name__}")
    if not isinstance(row.doc, int) or isinstance(row.doc, bool) or not 0 <= row.doc < 2**63:
        raise RecordError(f"doc id must be an int in [0, 2**63), got {row.doc!r}", field="doc")
    if row.doc in seen:
        raise RecordError(f"duplicate doc id {row.doc}", field="doc")
    if row.role not in ROLES:
        raise RecordError(f"doc {row.doc}: unknown role {row.role!r}", field="role")
    for name in ("text", "user_id", "conversation_id"):
        if not isinstance(getattr(row, name), str):
            raise RecordError(f"doc {row.doc}: {name} must be a string", field=name)
    text = unicodedata.normalize("NFC", row.text)
    document = Document()
    document.add_integer("doc", row.doc)
    grams = cjk_grams(text)
    words = _without_cjk(text) if grams else text
    try:
        document.add_text("text_stem", words)
        document.add_text("text_raw", words)
        document.add_text("text_ident", text)
        document.add_text("text_cjk", " ".join(g for run in grams for g in run))
        if row.context:
            context = unicodedata.normalize("NFC", row.context)
            document.add_text("context_stem", _without_cjk(context) if cjk_grams(context)
                              else context)
        document.add_text("role", row.role)
        document.add_text("user_id", row.user_id)
        document.add_text("conversation_id", row.conversation_id)
    except UnicodeEncodeError as exc:
        raise RecordError(f"doc {row.doc}: a field holds a lone surrogate: {exc}") from exc
    seen.add(row.doc)
    return document


def _commit(writer: Any, docs: Iterable[LexicalDoc]) -> set[int]:
    """Add ``docs`` in one commit (nothing on failure); returns their doc ids."""
    seen: set[int] = set()
    try:
        for row in docs:
            writer.add_document(_document(row, seen))
        writer.commit()
    except BaseException:
        writer.rollback()
        raise
    writer.wait_merging_threads()
    return seen


class LexicalIndex:
    """A built, searchable BM25 index of one partition's content rows."""

    def __init__(self, index: Index, analyzers: _Analyzers) -> None:
        """Wrap an opened tantivy index; use :meth:`build` or :meth:`open` instead."""
        self._index = index
        self._schema = index.schema
        self._an = analyzers
        # An opened index never changes: counts among one user's rows are kept (a user's
        # searches repeat their words; each count is a tantivy search of its own).
        self._user_count = functools.lru_cache(maxsize=8192)(self._count_for_user)
        # Compiled content queries of the last queries, built with this index's schema: a
        # user's searches repeat, and several threads search one index.
        self._compiled: dict[tuple[Any, ...], Query | None] = {}  # oldest first
        self._compiled_lock = threading.Lock()

    @classmethod
    def build(
        cls, directory: Path, docs: Iterable[LexicalDoc], *, heap_bytes: int = 200_000_000
    ) -> LexicalIndex:
        """Index ``docs`` into the empty (or absent) ``directory`` and return the index.

        The marker file is written last, so a build that failed half-way is refused by open().
        """
        if heap_bytes < 15_000_000:
            raise ValueError(f"heap_bytes must be at least 15_000_000, got {heap_bytes}")
        directory = Path(directory)
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise IndexUnavailable(f"lexical index directory {directory} exists and is not empty")
        directory.mkdir(parents=True, exist_ok=True)
        analyzers = _Analyzers.create()
        index = Index(_schema(), path=str(directory), reuse=False)
        analyzers.register(index)
        # One indexing thread, so that a partition that fits the heap is one segment: every
        # search pays per segment (term lookups, a union window per filter), and a user's
        # rows, stored together, would be split across the threads' segments. Two segments
        # made a user-scoped search 1.6x slower; building the documents in Python, not
        # indexing them, bounds the build either way.
        seen = _commit(index.writer(heap_size=heap_bytes, num_threads=1), docs)
        meta = {"format": _FORMAT, "docs": len(seen)}
        (directory / _META_FILE).write_text(json.dumps(meta), encoding="utf-8")
        index.reload()
        return cls(index, analyzers)

    @classmethod
    def extend(
        cls, directory: Path, docs: Iterable[LexicalDoc], *, heap_bytes: int = 50_000_000
    ) -> LexicalIndex:
        """Add ``docs`` to the complete index in ``directory`` in one commit.

        The new rows become one more tantivy segment; the existing segment files are not
        rewritten (tantivy never modifies a segment), so ``directory`` may be a hard-linked
        copy of another index folder. Scores then use statistics over all rows, as one build
        of the same rows would. Doc ids must not repeat those already indexed."""
        index = cls.open(directory)
        seen = _commit(index._index.writer(heap_size=heap_bytes, num_threads=1), docs)
        meta = {"format": _FORMAT, "docs": len(index) + len(seen)}
        (directory / _META_FILE).unlink()  # a hard link: replace it, never write through it
        (directory / _META_FILE).write_text(json.dumps(meta), encoding="utf-8")
        index._index.reload()
        index._user_count.cache_clear()  # the rows grew
        return index

    @classmethod
    def open(cls, directory: Path) -> LexicalIndex:
        """Open an index previously written by :meth:`build`."""
        directory = Path(directory)
        meta_path = directory / _META_FILE
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexUnavailable(f"no complete lexical index at {directory}: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise IndexUnavailable(f"lexical index at {directory} has unsupported format {meta!r}")
        try:
            index = Index.open(str(directory))
            analyzers = _Analyzers.create()
            analyzers.register(index)
            # Its reader takes a lock file in the folder: a build another process removed
            # meanwhile (a compaction replaced it) fails here, not at the open above.
            index.reload()
        except (OSError, ValueError) as exc:
            raise IndexUnavailable(f"cannot open lexical index at {directory}: {exc}") from exc
        return cls(index, analyzers)

    def __len__(self) -> int:
        """Number of indexed rows."""
        return int(self._index.searcher().num_docs)

    @property
    def segments(self) -> int:
        """Number of index segments (each search visits every one)."""
        return int(self._index.searcher().num_segments)

    def search(
        self,
        query: str | ParsedQuery,
        *,
        limit: int = 50,
        user_id: str | None = None,
        conversation_id: str | None = None,
        roles: Collection[str] | None = None,
        role_weights: Mapping[str, float] | None = None,
        context: bool = True,
        word_weights: Mapping[str, float] | None = None,
    ) -> list[tuple[int, float]]:
        """Return up to ``limit`` ``(doc, score)`` pairs, best first, for raw user text (or
        the :class:`ParsedQuery` of it).

        ``user_id``, ``conversation_id`` and ``roles`` are exact-match filters. ``role_weights``
        overrides DEFAULT_ROLE_WEIGHTS per role (roles it omits keep their default weight).
        ``context=False`` matches rows on their own words only (no turn-exchange field): use it
        when the caller targets one speaker's words. ``word_weights`` maps stems (as
        :func:`query_stems` gives them) to factors > 0 that multiply every clause of the query
        words making those stems (a word of several stems takes their mean; stems it omits
        keep 1).
        """
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            raise QueryError(f"limit must be an int in [1, {MAX_LIMIT}], got {limit!r}")
        weights = _merge_weights(role_weights)
        allowed = _check_roles(roles)
        if not allowed:
            return []
        filters: list[tuple[Occur, Query]] = []
        for name, value in (("user_id", user_id), ("conversation_id", conversation_id)):
            if value is None:
                continue
            if not isinstance(value, str) or not value or not _encodable(value):
                raise QueryError(f"{name} filter must be a non-empty UTF-8 string, got {value!r}")
            filters.append((Occur.Must, self._unscored([value], name)))
        if roles is not None:
            filters.append((Occur.Must, self._unscored(sorted(allowed), "role")))
        words = ParsedQuery.of(query)
        if word_weights:
            _check_word_weights(word_weights)
            content = self._content_query(words, context=context, word_weights=word_weights)
        else:
            content = self._cached_content_query(words, context)
        if content is None:
            return []
        scored = self._weighted(content, allowed, weights)
        searcher = self._index.searcher()
        final = Query.boolean_query([(Occur.Must, scored), *filters])
        hits = searcher.search(final, limit, count=False).hits
        ids = searcher.fast_field_values("doc", [address for _, address in hits])
        results: list[tuple[int, float]] = []
        for (score, _), doc in zip(hits, ids, strict=True):
            if not isinstance(doc, int):
                raise IndexUnavailable("lexical index returned a hit without a doc id")
            results.append((doc, float(score)))
        return results

    def term_stats(self, query: str | ParsedQuery, *, user_id: str | None = None
                   ) -> tuple[int, list[int]]:
        """(rows, rows holding each of :func:`query_stems`), over the whole index or, with
        ``user_id``, over that user's rows only.

        Lets a caller put BM25 scores on one scale: several partitions' (each partition's IDF
        reflects only its own rows), or one user's history (lake.search.bm25)."""
        searcher = self._index.searcher()
        stems = query_stems(query)
        everywhere = [searcher.doc_freq("text_stem", t) for t in stems]
        if user_id is None:
            return searcher.num_docs, everywhere
        if not isinstance(user_id, str) or not user_id or not _encodable(user_id):
            raise QueryError(f"user_id must be a non-empty UTF-8 string, got {user_id!r}")
        # a word no row of the index holds needs no count among the user's rows
        return self._user_count(user_id, None), [
            df and self._user_count(user_id, stem)
            for stem, df in zip(stems, everywhere, strict=True)]

    def _count_for_user(self, user_id: str, stem: str | None) -> int:
        """The user's rows, or those of them holding ``stem``."""
        user = Query.term_query(self._schema, "user_id", user_id)
        if stem is None:
            return _count(self._index.searcher(), user)
        return _count(self._index.searcher(), Query.boolean_query([
            (Occur.Must, user), (Occur.Must, Query.term_query(self._schema, "text_stem", stem))]))

    def _cached_content_query(self, words: ParsedQuery, context: bool) -> Query | None:
        """The content query of ``words`` without word weights, kept for this index's last
        queries (a compiled query names this index's schema, so it is kept here, not per
        process)."""
        key = (words.key, context)
        with self._compiled_lock:
            if key in self._compiled:
                return self._compiled[key]
        content = self._content_query(words, context=context)
        with self._compiled_lock:
            while len(self._compiled) >= _COMPILED_KEPT:
                del self._compiled[next(iter(self._compiled))]
            self._compiled[key] = content
        return content

    def _unscored(self, values: list[str], field: str) -> Query:
        # Filters must not add to the BM25 score, or role boosts would scale them.
        # Term queries, not a term-set query: tantivy's term set first gathers every row that
        # holds one of the values into a bitset, on every search, while term queries are only
        # advanced to the rows the text clauses match (lexical search 3.5x faster at 100k rows).
        terms = [Query.term_query(self._schema, field, value) for value in values]
        union = terms[0] if len(terms) == 1 else Query.boolean_query(
            [(Occur.Should, term) for term in terms])
        return Query.const_score_query(union, 0.0)

    def _weighted(
        self, content: Query, allowed: frozenset[str], weights: Mapping[str, float]
    ) -> Query:
        groups: dict[float, list[str]] = {}
        for role in sorted(allowed):
            groups.setdefault(weights[role], []).append(role)
        if len(groups) == 1:
            ((weight, _),) = groups.items()
            return Query.boost_query(content, weight)
        clauses = []
        for weight, members in groups.items():
            scoped = Query.boolean_query(
                [
                    (Occur.Must, content),
                    (Occur.Must, self._unscored(members, "role")),
                ]
            )
            clauses.append((Occur.Should, Query.boost_query(scoped, weight)))
        return Query.boolean_query(clauses)

    def _content_query(self, parsed: ParsedQuery, *, context: bool = True,
                       word_weights: Mapping[str, float] | None = None) -> Query | None:
        should: list[Query] = []
        fields = (("text_stem", _W_STEM), ("text_raw", _W_RAW), ("text_ident", _W_IDENT))
        for name, boost in fields:
            for token, stems in parsed.tokens[name]:
                term = Query.term_query(self._schema, name, token)
                # An identifier of k words competes with the 2k per-word clauses that also
                # match its pieces scattered in a shorter row, so its weight grows with k.
                pieces = len(self._an.raw.analyze(token)) if name == "text_ident" else 1
                should.append(Query.boost_query(
                    term, boost * max(1, pieces) * _word_weight(stems, word_weights)))
        for other, parts, stems in parsed.other_spellings:
            clause = (Query.term_query(self._schema, "text_raw", other[0]) if len(other) == 1
                      else self._phrase("text_raw", list(other)))
            should.append(Query.boost_query(
                clause, _W_IDENT * parts * _word_weight(stems, word_weights)))
        if context and _W_CTX > 0:
            exchange = [_weighted(Query.term_query(self._schema, "context_stem", token),
                                  _word_weight(stems, word_weights))
                        for token, stems in parsed.tokens["context_stem"]]
            if exchange:
                on_turn_rows = Query.boolean_query([
                    (Occur.Must, Query.boolean_query([(Occur.Should, q) for q in exchange])),
                    *((Occur.MustNot, Query.term_query(self._schema, "role", role))
                      for role in _NO_CTX_ROLES),
                ])
                should.append(Query.boost_query(on_turn_rows, _W_CTX))
        runs = [run for term in parsed.terms for run in cjk_grams(term)][:MAX_FIELD_TOKENS]
        for gram in list(dict.fromkeys(g for run in runs for g in run))[:MAX_FIELD_TOKENS]:
            should.append(Query.boost_query(self._cjk_query([gram]), _W_CJK))
        for run in runs:
            if len(run) > 1:  # a whole-run phrase bonus on top of the per-bigram matches
                should.append(Query.boost_query(self._cjk_query(run), _W_CJK))
        must = [q for words in parsed.phrases for q in self._phrase_queries(words)]
        if not should and not must:
            return None
        return Query.boolean_query(
            [(Occur.Must, q) for q in must] + [(Occur.Should, q) for q in should]
        )

    def _phrase_queries(self, words: list[str]) -> list[Query]:
        # Non-CJK stretches become phrases on text_raw and CJK runs bigram phrases on
        # text_cjk; adjacency across a CJK/non-CJK boundary is not enforced.
        text = " ".join(words)
        queries: list[Query] = []
        for segment in re.split(f"({_CJK_RUN.pattern})", text):
            if _CJK_RUN.fullmatch(segment):
                queries.extend(self._cjk_query(run) for run in cjk_grams(segment))
                continue
            tokens = self._an.raw.analyze(segment)
            if len(tokens) == 1:
                queries.append(Query.term_query(self._schema, "text_raw", tokens[0]))
            elif tokens:
                queries.append(self._phrase("text_raw", tokens))
        return queries

    def _phrase(self, field: str, tokens: list[str]) -> Query:
        words: list[str | tuple[int, str]] = list(tokens)
        return Query.phrase_query(self._schema, field, words)

    def _cjk_query(self, grams: list[str]) -> Query:
        if len(grams) > 1:
            return self._phrase("text_cjk", grams)
        gram = grams[0]
        if len(gram) == 1:
            # A lone CJK character is in bigrams on either side (or alone); it is a
            # CJK code point, never a regex metacharacter.
            return Query.regex_query(self._schema, "text_cjk", f"(?:{gram}.?|.{gram})")
        return Query.term_query(self._schema, "text_cjk", gram)


_COMPILED_KEPT = 128  # compiled content queries kept per index


def _count(searcher: Any, query: Query) -> int:
    """Rows matching ``query`` (tantivy-py's stub omits SearchResult.count)."""
    return int(searcher.search(query, 1, count=True).count)


def _word_weight(stems: tuple[str, ...], word_weights: Mapping[str, float] | None) -> float:
    """A query word's weight: the mean of its stems' (1 for stems without one)."""
    if not word_weights or not stems:
        return 1.0
    return sum(word_weights.get(t, 1.0) for t in stems) / len(stems)


def _weighted(query: Query, weight: float) -> Query:
    return query if weight == 1.0 else Query.boost_query(query, weight)


def _check_word_weights(word_weights: Mapping[str, float]) -> None:
    for stem, weight in word_weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) \
                or not math.isfinite(weight) or weight <= 0:
            raise QueryError(f"word weight for {stem!r} must be a positive number, "
                             f"got {weight!r}")


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _merge_weights(role_weights: Mapping[str, float] | None) -> dict[str, float]:
    weights = dict(DEFAULT_ROLE_WEIGHTS)
    for role, weight in (role_weights or {}).items():
        if role not in ROLES:
            raise QueryError(f"role_weights names unknown role {role!r}")
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise QueryError(f"role weight for {role!r} must be a number, got {weight!r}")
        if not math.isfinite(weight) or weight <= 0:
            raise QueryError(f"role weight for {role!r} must be a positive number, got {weight!r}")
        weights[role] = float(weight)
    return weights


def _check_roles(roles: Collection[str] | None) -> frozenset[str]:
    if roles is None:
        return ROLES
    if isinstance(roles, str):
        raise QueryError("roles must be a collection of role names, not a single string")
    unknown = sorted(set(roles) - ROLES)
    if unknown:
        raise QueryError(f"unknown roles in filter: {unknown}")
    return frozenset(roles)
