"""Snippets: a long text found by one of its passages is shown by that passage; otherwise, and
whenever the passage cannot be told, by its opening."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lake.embedding.hashing import HashingEmbedder
from lake.search.access import Principal
from lake.search.request import SNIPPET_CHARS, SearchRequest
from lake.search.service import SearchService
from lake.search.snippets import passage_snippet
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest
from tests.factories import make_record, passage_hashing_embedder

# passages of 12 word pieces at most: a few sentences make a text of many
SENTENCES = [f"Sentence {i} tells of the {w} that happened on day {i}." for i, w in
             enumerate(["harbour", "orchard", "quarry", "library", "glacier", "market",
                        "vineyard", "foundry", "lighthouse", "meadow", "canyon", "bakery"])]
LONG = " ".join(SENTENCES * 2)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("snippets") / "lake"
    embedder = passage_hashing_embedder(64)
    records = [make_record(0, prompt="the diary", answer=LONG),
               make_record(1, prompt="short", answer="a short answer")]
    run_ingest(Settings(lake=root, embedding_model=embedder.name),
               records=[json.dumps(r) for r in records], embedder=embedder)
    return root


def _shown(lake: Path, query: str, embedder: object, **options: object) -> dict[str, str]:
    result = SearchService(LakeStore(lake), embedder=embedder).search(SearchRequest(  # type: ignore[arg-type]
        query, Principal("acme", "u-ana"), k=1, min_relevance=0.0, recency_weight=0.0,
        enabled={"semantic": True, "lexical": False, "trigram": False}, **options))  # type: ignore[arg-type]
    return result.hits[0].snippets


def test_the_passage_the_query_matches_is_shown(lake: Path) -> None:
    embedder = passage_hashing_embedder(64)
    passages = embedder.passage_splitter.split([LONG])[0]
    assert len(LONG) > SNIPPET_CHARS and len(passages) > 4
    # a hashing vector of a passage's own words is nearest that passage
    for place in (0, 3, len(passages) - 1):
        shown = _shown(lake, passages[place], embedder)
        assert shown["assistant"] == passage_snippet(passages[place], first=place == 0)
        assert shown["user"] == "the diary"
    assert _shown(lake, passages[3], embedder, snippets="assistant").keys() == {"assistant"}
    assert _shown(lake, passages[3], embedder, snippets="none") == {}


def test_without_a_splitter_the_opening_is_shown(lake: Path) -> None:
    # the same identity, but an embedder that cuts no passages cannot tell them apart
    plain = HashingEmbedder(64)
    passages = passage_hashing_embedder(64).passage_splitter.split([LONG])[0]
    assert _shown(lake, passages[3], plain)["assistant"] == LONG[:SNIPPET_CHARS]


def test_a_passage_snippet_is_marked_when_cut_and_never_too_long() -> None:
    assert passage_snippet("x" * 600, first=True) == "x" * SNIPPET_CHARS
    cut = passage_snippet("y" * 600, first=False)
    assert cut.startswith("…") and len(cut) == SNIPPET_CHARS
    assert passage_snippet("middle words", first=False) == "…middle words"
