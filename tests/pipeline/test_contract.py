"""The search JSON contract (`search --json`, `POST /v1/search`): pinned field by field, and
documented by the schema of the hit dataclass itself."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from lake.search.named_time import named_times
from lake.search.request import GeneratorRank, Hit, SearchResult
from pipeline.contract import QueryOptions, SearchAnswer

HIT = Hit(tenant="acme", user_id="u-ana", conversation_id="c-1", turn_id="t-0001",
          turn_at=datetime(2026, 3, 10, 9, 30, tzinfo=UTC), role="assistant",
          text="restarted the ingress", row_id="r-1",
          ranks={"semantic": GeneratorRank(2, 0.61), "lexical": GeneratorRank(1, 7.5),
                 "trigram": None},
          fused=0.032, lift=1.4, score=0.0448, relevance=0.97,
          snippets={"user": "deploy failed", "assistant": "restarted the ingress"})


def test_a_hit_written_before_fused_was_named_so_still_reads() -> None:
    """Until 2026-12 the fused value was spelled ``rrf``: a client reading an older server's
    answer still gets it, as ``fused``."""
    older = {**HIT.to_json()}
    older["rrf"] = older.pop("fused")
    assert SearchAnswer.model_validate({"hits": [older]}).hits[0].fused == 0.032


def test_a_hit_in_json_is_pinned() -> None:
    answer = SearchAnswer.of(SearchResult([HIT])).to_json()
    assert json.loads(json.dumps(answer)) == {"hits": [{
        "tenant": "acme", "user_id": "u-ana", "conversation_id": "c-1", "turn_id": "t-0001",
        "turn_at": "2026-03-10T09:30:00+00:00", "role": "assistant",
        "text": "restarted the ingress", "row_id": "r-1",
        "ranks": {"semantic": {"rank": 2, "score": 0.61}, "lexical": {"rank": 1, "score": 7.5},
                  "trigram": None},
        "fused": 0.032, "lift": 1.4, "score": 0.0448, "relevance": 0.97,
        "snippets": {"user": "deploy failed", "assistant": "restarted the ingress"},
        "address": None, "turn_address": None, "agent": None, "app": None}],
        "warnings": [], "named_times": []}


def test_a_named_time_in_json_is_pinned() -> None:
    as_of = datetime(2026, 3, 11, tzinfo=UTC)
    answer = SearchAnswer.of(SearchResult(
        [], named_times=named_times("the deploy in March 2026", as_of))).to_json()
    assert answer["named_times"] == [{"phrase": "in March 2026",
                                      "start": "2026-03-01T00:00:00+00:00",
                                      "end": "2026-04-01T00:00:00+00:00"}]


def test_the_schema_the_api_documents_is_the_hits_own() -> None:
    fields = [f.name for f in dataclasses.fields(Hit)]
    schema = SearchAnswer.model_json_schema(mode="serialization")
    hit = schema["$defs"]["Hit"]
    assert list(hit["properties"]) == fields == list(HIT.to_json())
    assert hit["properties"]["turn_at"] == {"description": "ISO 8601", "title": "Turn At",
                                            "type": "string"}
    assert "min_relevance" in hit["properties"]["relevance"]["description"]
    # what the answer carries is the search's hits themselves, spelt by that schema
    assert SearchAnswer.of(SearchResult([HIT])).hits == [HIT]


def test_an_answer_emptied_by_the_floor_says_so() -> None:
    answer = SearchAnswer.of(SearchResult([], below_floor=12, floor=0.5)).to_json()
    assert answer["hits"] == []
    assert answer["warnings"] == [
        "no turn reached the relevance floor 0.5: 12 weaker candidate(s) left out "
        "(a lower min relevance shows them)"]


def test_a_relevance_floor_that_is_not_a_number_is_refused_by_name() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValidationError, match="finite number") as caught:
            QueryOptions(query="budget", min_relevance=bad)
        assert caught.value.errors()[0]["loc"] == ("min_relevance",)
    assert QueryOptions(query="budget", min_relevance=0.8).min_relevance == 0.8
