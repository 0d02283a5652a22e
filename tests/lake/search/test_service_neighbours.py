"""The service lifts a turn whose neighbouring turns match too (lake.search.neighbours)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from factories import BASE_TIME, make_record, write_jsonl

from lake.embedding.hashing import HashingEmbedder
from lake.errors import QueryError
from lake.search.access import Principal
from lake.search.request import FusionSettings, SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest

ANA = Principal("acme", "u-ana")
MATCH = ("the quokka costume for the parade", "sewn and ready")


def _turn(minute: int, conversation: str, turn_id: str, prompt: str, answer: str
          ) -> dict[str, object]:
    return make_record(0, conversation=conversation, prompt=prompt, answer=answer,
                       at=BASE_TIME + timedelta(minutes=minute), turn_id=turn_id)


@pytest.fixture
def service(hashing_settings: Settings, tmp_path: Path) -> SearchService:
    # Turn ids sort against time in c-trip ("t-9" came first): neighbours follow time.
    records = [
        _turn(0, "c-trip", "t-9", "packing list: the quokka costume", "added it"),
        _turn(1, "c-trip", "t-1", *MATCH),
        _turn(2, "c-trip", "t-5", "what is the weather like", "sunny all week"),
        _turn(3, "c-lone", "t-1", "book a table for dinner", "booked for eight"),
        _turn(4, "c-lone", "t-2", *MATCH),
        _turn(5, "c-lone", "t-3", "renew the car insurance", "renewed online"),
    ]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    return SearchService(LakeStore(hashing_settings.lake), embedder=HashingEmbedder(64))


def _order(service: SearchService, weight: float) -> list[tuple[str, str]]:
    result = service.search(SearchRequest(
        "quokka costume parade", ANA, as_of=BASE_TIME + timedelta(days=1), recency_weight=0,
        min_relevance=0.0, fusion=FusionSettings(neighbour_weight=weight)))
    return [(h.conversation_id, h.turn_id) for h in result.hits]


def test_a_turn_beside_a_matching_turn_ranks_above_its_lone_twin(
        service: SearchService) -> None:
    # Without smoothing the two equal matches tie and the tie goes by conversation id.
    plain = _order(service, 0.0)
    assert plain.index(("c-lone", "t-2")) < plain.index(("c-trip", "t-1"))
    smoothed = _order(service, 0.5)
    assert smoothed[0] == ("c-trip", "t-1")
    assert smoothed.index(("c-trip", "t-1")) < smoothed.index(("c-lone", "t-2"))
    assert sorted(smoothed) == sorted(plain)


def test_a_bad_neighbour_weight_is_a_clear_query_error(service: SearchService) -> None:
    with pytest.raises(QueryError, match="neighbour weight"):
        _order(service, -1.0)
