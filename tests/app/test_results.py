"""The results table, the hit counts and the ranks per generator, from real search hits."""

from __future__ import annotations

from collections import Counter

import pytest

from app.components.hits import rank_frame
from app.components.results import FACETS, hit_counts, hits_table
from app.models import HitView
from lake.embedding.hashing import HashingEmbedder
from lake.search.access import Principal
from lake.search.request import GENERATORS, SearchRequest
from lake.search.service import SearchService
from lake.store import LakeStore
from tests.app.test_pages import _app, _search
from tests.app.workbench_lake import KNOWN_CONVERSATION, QUERY, TENANT, SeededLake


def _hits(seeded: SeededLake, query: str = "the answer", k: int = 40) -> list[HitView]:
    service = SearchService(LakeStore(seeded.settings.lake), embedder=HashingEmbedder(64))
    result = service.search(SearchRequest(query, Principal(TENANT, analyst=True),
                                          scope="tenant", k=k, min_relevance=0.0))
    return [HitView(h, None) for h in result.hits]


def test_the_table_has_a_compact_row_a_hit_in_the_services_order(seeded: SeededLake) -> None:
    hits = _hits(seeded)
    table = hits_table(hits)
    assert table.height == len(hits) > 10
    assert table["#"].to_list() == list(range(1, len(hits) + 1))
    assert table["relevance"].to_list() == [round(v.hit.relevance, 3) for v in hits]
    assert all(0.0 <= r <= 1.0 for r in table["relevance"])
    assert table["turn_id"].to_list() == [v.hit.turn_id for v in hits]
    for g in GENERATORS:  # the rank, or null where the generator did not find the turn
        assert table[g].to_list() == [r.rank if (r := v.hit.ranks.get(g)) else None
                                      for v in hits]
    assert all(len(s) <= 160 and "conv:fi:" not in s and "**" not in s
               for s in table["snippet"])
    assert table["month"].to_list() == [f"{v.hit.turn_at:%Y-%m}" for v in hits]


def test_counts_by_each_facet_add_up_to_the_hits(seeded: SeededLake) -> None:
    hits = _hits(seeded)
    for facet in FACETS:
        counts = hit_counts(hits, facet)
        assert counts["hits"].sum() == len(hits), facet
    users = hit_counts(hits, "user")
    expected = Counter(v.hit.user_id for v in hits)
    assert dict(zip(users["user"], users["hits"], strict=True)) == dict(expected)
    assert users["hits"].to_list() == sorted(users["hits"], reverse=True)
    months = hit_counts(hits, "month")["month"].to_list()
    assert months == sorted(months)
    with pytest.raises(ValueError, match="by must be one of"):
        hit_counts(hits, "tenant")


def test_ranks_per_generator_are_rounded_and_say_not_found(seeded: SeededLake) -> None:
    view = _hits(seeded, QUERY, k=5)[0]
    ranks = rank_frame(view)
    assert ranks["generator"].to_list() == list(GENERATORS)
    for row in ranks.iter_rows(named=True):
        found = view.hit.ranks.get(row["generator"])
        assert row["rank"] == (found.rank if found else None)
        assert row["found"] == ("yes" if found else "not found")
        if found:
            assert row["score"] == float(f"{found.score:.3g}")


def test_the_results_table_opens_a_hit_in_replay(seeded: SeededLake,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch)
    del at.session_state["layout"]  # the default: the table
    _search(at.run(), QUERY)
    assert not at.exception and not at.error
    assert not [b for b in at.button if b.label == "Open in Replay"]  # no cards
    table = at.dataframe[0].value
    assert table["conversation_id"].iloc[0] == KNOWN_CONVERSATION
    assert len(at.get("vega_lite_chart")) == 1  # the counts' open tab (by user)
    at.session_state["counts"] = "by month"
    at.run()
    assert len(at.get("vega_lite_chart")) == 1 and not at.exception
    # A row selected in the table: the callback asks for it to be opened on the rerun.
    at.session_state["wb_open_hit"] = 0
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Conversations & Replay"]
    assert at.query_params["conversation"] == KNOWN_CONVERSATION
    assert at.query_params["from"] == "search"
