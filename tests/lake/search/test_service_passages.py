"""A long row is scored by its best passage (MaxP): a row that says one thing in one passage
among others is found by it, not by a sum its other passages pull away from the query."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lake.embedding.passages import pooled
from lake.embedding.sentence import SentenceTransformerEmbedder
from lake.index.partition import PartitionIndex
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest
from tests.factories import TRIP_SENTENCES, garden_notes, make_record

GARDEN = garden_notes(8)
BREAD = " ".join(f"Batch {i}: knead the dough for ten minutes, let it rise under a damp "
                 f"cloth, then bake it at 220 degrees." for i in range(1, 8))
CAR = " ".join(f"Service {i}: the mechanic replaced the brake pads, rotated the tyres and "
               f"topped up the coolant." for i in range(1, 8))
TRIP = " ".join(TRIP_SENTENCES * 4)
LONG = f"{GARDEN} {BREAD} {TRIP} {CAR}"  # the trip is one passage of four
QUERY = "trip to Portugal for a design meeting"
ANSWERS = [LONG, "We are planning a vacation abroad next spring.",
           "The design review meeting went well.", "I packed my suitcase for the holiday."]


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
         ) -> Path:
    root = tmp_path_factory.mktemp("maxp") / "lake"
    records = [make_record(i, prompt=f"note {i}", answer=a) for i, a in enumerate(ANSWERS)]
    run_ingest(Settings(lake=root, embedding_model=embedder.name),
               records=[json.dumps(r) for r in records], embedder=embedder)
    return root


def _semantic(lake: Path, embedder: SentenceTransformerEmbedder) -> list[tuple[str, float]]:
    result = SearchService(LakeStore(lake), embedder=embedder).search(SearchRequest(
        QUERY, Principal("acme", "u-ana"), k=4, min_relevance=0.0, recency_weight=0.0,
        enabled={"semantic": True, "lexical": False, "trigram": False}))
    return [(h.turn_id, h.ranks["semantic"].score) for h in result.hits
            if h.ranks["semantic"] is not None]


def test_a_long_row_scores_its_best_passage(lake: Path,
                                            embedder: SentenceTransformerEmbedder) -> None:
    splitter = embedder.passage_splitter
    assert splitter is not None
    parts = embedder.encode(splitter.split([LONG])[0])
    query = embedder.encode([QUERY])[0]
    best = float((parts @ query).max())
    assert len(parts) == 4 and best > float(pooled(parts) @ query) + 0.1
    (first, score), *_ = _semantic(lake, embedder)
    assert first == "t-0000"
    assert score == pytest.approx(best, abs=1e-5)


def test_by_its_pooled_vector_alone_the_same_row_falls_behind(
        lake: Path, embedder: SentenceTransformerEmbedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PartitionIndex, "passages", property(lambda self: None))
    ranked = _semantic(lake, embedder)
    assert ranked and ranked[0][0] != "t-0000"
    assert all(score < 0.3 for turn, score in ranked if turn == "t-0000")


def _snippet(lake: Path, embedder: SentenceTransformerEmbedder, query: str) -> tuple[str, str]:
    result = SearchService(LakeStore(lake), embedder=embedder).search(SearchRequest(
        query, Principal("acme", "u-ana"), k=1, min_relevance=0.0, recency_weight=0.0,
        enabled={"semantic": True, "lexical": False, "trigram": False}))
    (hit,) = result.hits
    return hit.turn_id, hit.snippets["assistant"]


def test_a_long_answer_is_shown_by_the_passage_that_matched(
        lake: Path, embedder: SentenceTransformerEmbedder) -> None:
    turn, snippet = _snippet(lake, embedder, QUERY)
    assert turn == "t-0000"
    assert snippet.startswith("…") and "Lisbon" in snippet and len(snippet) <= 500
    assert "tomato" not in snippet
    # a query about what the answer opens with is shown by the opening
    turn, snippet = _snippet(lake, embedder, "watering the tomato beds and the basil")
    assert turn == "t-0000" and snippet == LONG[:500]


def test_without_passages_a_long_answer_is_shown_by_its_opening(
        lake: Path, embedder: SentenceTransformerEmbedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PartitionIndex, "passages", property(lambda self: None))
    result = SearchService(LakeStore(lake), embedder=embedder).search(SearchRequest(
        "garden flights Lisbon bread brakes", Principal("acme", "u-ana"), k=4,
        min_relevance=0.0, recency_weight=0.0))
    shown = {h.turn_id: h.snippets["assistant"] for h in result.hits}
    assert shown["t-0000"] == LONG[:500]
