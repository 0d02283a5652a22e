"""The service lifts a turn whose neighbouring turns match too (lake.search.neighbours)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from lake.embedding.hashing import HashingEmbedder
from lake.errors import QueryError
from lake.search.access import Principal
from lake.search.neighbours import LONG_TURN_BYTES
from lake.search.request import FusionSettings, Hit, SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, write_jsonl

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


def _hits(service: SearchService, weight: float) -> list[Hit]:
    return service.search(SearchRequest(
        "quokka costume parade", ANA, as_of=BASE_TIME + timedelta(days=1), recency_weight=0,
        min_relevance=0.0, fusion=FusionSettings(neighbour_weight=weight))).hits


def _order(service: SearchService, weight: float) -> list[tuple[str, str]]:
    return [(h.conversation_id, h.turn_id) for h in _hits(service, weight)]


Scores = dict[tuple[str, str], float]


def _smoothed_and_plain(records: list[dict[str, object]], settings: Settings, tmp_path: Path
                        ) -> tuple[Scores, Scores]:
    """Each turn's score with the default neighbour weight and with none, in a lake of
    ``records``."""
    run_ingest(settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    service = SearchService(LakeStore(settings.lake), embedder=HashingEmbedder(64))
    smoothed, plain = ({(h.conversation_id, h.turn_id): h.score for h in _hits(service, w)}
                       for w in (0.5, 0.0))
    return smoothed, plain


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


def test_a_long_turn_lends_its_neighbour_nothing(hashing_settings: Settings,
                                                 tmp_path: Path) -> None:
    # as in the fixture, but the turn before c-trip's match holds more than LONG_TURN_BYTES
    filler = " ".join(f"item {i}: socks, a scarf and a rain jacket" for i in range(60))
    assert len(filler.encode()) > LONG_TURN_BYTES
    records = [
        _turn(0, "c-trip", "t-9", "packing list: the quokka costume", filler),
        _turn(1, "c-trip", "t-1", *MATCH),
        _turn(3, "c-lone", "t-1", "book a table for dinner", "booked for eight"),
        _turn(4, "c-lone", "t-2", *MATCH),
    ]
    smoothed, plain = _smoothed_and_plain(records, hashing_settings, tmp_path)
    # the long turn lends c-trip's match nothing, and is still lifted by it
    assert smoothed[("c-trip", "t-1")] == plain[("c-trip", "t-1")]
    assert smoothed[("c-trip", "t-9")] > plain[("c-trip", "t-9")]
    # c-lone's match, beside a short turn, is lifted
    assert smoothed[("c-lone", "t-2")] > plain[("c-lone", "t-2")]


def test_a_turn_alone_in_its_conversation_is_lifted_by_its_own_value(
        hashing_settings: Settings, tmp_path: Path) -> None:
    records = [
        _turn(0, "c-one", "t-1", *MATCH),
        _turn(1, "c-many", "t-1", "renew the car insurance", "renewed online"),
        _turn(2, "c-many", "t-2", *MATCH),
        _turn(3, "c-many", "t-3", "what is the weather like", "sunny all week"),
    ]
    smoothed, plain = _smoothed_and_plain(records, hashing_settings, tmp_path)
    # unsmoothed, the twin matches tie and the tie goes by conversation id; smoothed, the one
    # with no neighbour is its own neighbourhood, while the other's neighbours match weakly
    assert plain[("c-one", "t-1")] < plain[("c-many", "t-2")]
    assert smoothed[("c-one", "t-1")] == pytest.approx(1.5 * plain[("c-one", "t-1")])
    assert plain[("c-many", "t-2")] < smoothed[("c-many", "t-2")] < smoothed[("c-one", "t-1")]
