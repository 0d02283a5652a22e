"""Hostile search input: query syntax, regex metacharacters, huge and empty queries never
break a search; non-English words are found by the lexical generator alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lake.embedding.hashing import HashingEmbedder
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.cli import app
from pipeline.jobs import run_ingest
from tests.reliability.lake_audit import turn_record

ANA = Principal("acme", "u-ana")
TEXTS = {
    "c-cjk": "東京タワーの予約を変更したい",
    "c-accent": "Der Müller bestellte café crème brûlée à Zürich",
    "c-error": "deploy failed with ERR_CONNECTION_RESET (code: 104) at *.example.com",
    "c-plain": "the forecast sheet shows wrong hours",
    "c-ben": "ben's private forecast about the merger",
}
LEXICAL_ONLY = {"semantic": False, "lexical": True, "trigram": False}
SYNTAX = ['"', ":", "*", "(", ")", "\\", "AND", "OR", "NOT", "AND OR NOT", "text:forecast",
          'forecast AND "', '"unclosed phrase', "role:note", "+-&&||!{}[]^~?", "forecast*",
          "(forecast", "forecast)", "\\forecast\\", "a:b:c", "~forecast^2", "/forecast/",
          "'; DROP TABLE turn_logs; --", "%s%n%x", "\x00", "\u202eforecast", "..//..",
          ".*", "[a-z]+", "(?i)forecast", "^$|", "\\d{3}", "a{1000000}", "(a+)+$", "[[:alpha:]]",
          "\\p{L}", "$(rm -rf /)", "<script>alert(1)</script>", "\ud800", "NULL", "  ", ""]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One indexed lake with English, CJK, accented and identifier texts."""
    root = tmp_path_factory.mktemp("search") / "lake"
    records = []
    for n, (conversation, text) in enumerate(TEXTS.items()):
        record = turn_record(n, conversation=conversation,
                             user="u-ben" if conversation == "c-ben" else "u-ana")
        record["submissions"][0]["text"] = text
        records.append(json.dumps(record))
    run_ingest(Settings(lake=root, embedding_model="hashing-64"), records=records)
    return root


@pytest.fixture(scope="module")
def service(lake: Path) -> SearchService:
    """A search service over the module's lake."""
    return SearchService(LakeStore(lake), embedder=HashingEmbedder(64))


def _found(service: SearchService, query: str, enabled: dict[str, bool] | None = None
           ) -> list[str]:
    request = SearchRequest(query, ANA, enabled=enabled or LEXICAL_ONLY, k=20)
    return [h.conversation_id for h in service.search(request).hits]


@pytest.mark.parametrize("query", SYNTAX, ids=[repr(q)[1:-1][:24] for q in SYNTAX])
def test_syntax_and_regex_characters_are_plain_text(service: SearchService,
                                                    query: str) -> None:
    for enabled in (LEXICAL_ONLY, {"semantic": False, "lexical": False},
                    {"semantic": False}):
        request = SearchRequest(query, ANA, enabled=enabled, k=20)
        hits = service.search(request).hits  # never a parse error or a regex blow-up
        assert {h.user_id for h in hits} <= {"u-ana"}


@pytest.mark.parametrize("query", ['"', ".*"])
def test_a_query_without_words_does_not_fail_hybrid_search(service: SearchService,
                                                           query: str) -> None:
    result = service.search(SearchRequest(query, ANA, k=20))
    assert {h.user_id for h in result.hits} <= {"u-ana"}


def test_syntax_around_a_word_still_finds_it(service: SearchService) -> None:
    for query in ('forecast AND "', "(forecast", "forecast*", "text:forecast", "\\forecast\\"):
        assert "c-plain" in _found(service, query), query
    assert _found(service, "ERR_CONNECTION_RESET (code: 104)")[0] == "c-error"


def test_a_100_kb_query_is_answered(service: SearchService) -> None:
    # its speed is timed by bench.huge_queries: a busy machine fails wall-clock asserts
    query = "forecast " + " ".join(f"w{i}x" for i in range(20_000))
    assert len(query) > 100_000
    assert "c-plain" in _found(service, query, {})


@pytest.mark.parametrize("query", ["", " ", "\n\t", "\u3000"])
def test_empty_queries_return_nothing(service: SearchService, query: str) -> None:
    assert service.search(SearchRequest(query, ANA)).hits == []


@pytest.mark.parametrize("query", ["東京", "予約", "東京タワー"])
def test_cjk_words_are_found_lexically(service: SearchService, query: str) -> None:
    assert _found(service, query) == ["c-cjk"]


@pytest.mark.parametrize("query", ["brûlée", "Müller", "muller", "cafe", "ZÜRICH", "crème"])
def test_accented_words_are_found_lexically(service: SearchService, query: str) -> None:
    assert _found(service, query) == ["c-accent"]


def test_cli_search_takes_hostile_queries(lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    runner = CliRunner()
    for query in ('"(forecast:*', "東京", "\\ AND forecast", "AND OR NOT"):
        result = runner.invoke(app, ["search", query, "--tenant", "acme", "--user", "u-ana",
                                     "--json", "--lake", str(lake)])
        assert result.exit_code == 0, result.output
        hits = json.loads(result.stdout)["hits"]
        assert {h["user_id"] for h in hits} <= {"u-ana"}
