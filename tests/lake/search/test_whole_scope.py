"""The semantic arm's one pass over a small scope answers exactly as the general path does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import lake.search.generators as generators
from bench.scale import NOW, bench_embedder, build_scale_lake, make_queries
from lake.embedding.hashing import HashingEmbedder
from lake.search import whole_scope
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.search.whole_scope import whole_scope_turns
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.index_build import Compaction, build_indexes
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, rich_record

AS_OF = BASE_TIME + timedelta(days=120)
QUERIES = ["budget plan", "tuesday forecast", "the hiring plan moved", "openpyxl workbook",
           "question number 3"]
TOPICS = ["budget", "travel", "hiring", "budget", "launch", "travel", "audit", "budget"]


def _records() -> list[dict[str, Any]]:
    """Three months of one user's turns (three partitions), with repeated texts (equal
    scores), rich turns (rows that stand alone) and another user's turns beside them."""
    out = []
    for month in range(3):
        start = BASE_TIME + timedelta(days=35 * month)
        for t, topic in enumerate(TOPICS):
            n = month * 100 + t
            out.append(make_record(n, conversation=f"c-{month}-{t % 3}",
                                   prompt=f"what about the {topic} plan",
                                   answer=f"the {topic} forecast moved to tuesday",
                                   at=start + timedelta(minutes=10 * t)))
        rich = rich_record(month * 100 + 50, conversation=f"c-rich-{month}")
        rich["started_at"] = (start + timedelta(hours=5)).isoformat()
        out.append(rich)
        out.append(make_record(month * 100 + 60, user="u-ben", conversation=f"c-ben-{month}",
                               prompt="budget plan for ben", answer="ben's budget",
                               at=start + timedelta(hours=6)))
    return out


def _lake(settings: Settings, batches: int) -> Path:
    """The records ingested in ``batches`` (more than one: partitions of several segments)."""
    records = _records()
    for b in range(batches):
        report = run_ingest(settings, records=[json.dumps(r) for r in records[b::batches]],
                            index=False)
        build_indexes(LakeStore(settings.lake), model="hashing-64",
                      partitions=report.ingest.partitions,
                      compaction=Compaction(max_segments=1000, max_delta_ratio=1e9))
    return settings.lake


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Checks every one-pass answer against the general path's; yields how many it checked."""
    checked: list[int] = []

    def both(searched: Any, query: np.ndarray, depth: int) -> Any:
        once = whole_scope_turns(searched, query, depth)
        monkeypatch.setattr(generators, "whole_scope_turns", lambda *_: None)
        try:
            general = generators.semantic_hits(list(searched), query, depth)
        finally:
            monkeypatch.setattr(generators, "whole_scope_turns", both)
        if once is not None:
            assert once == [list(zip(h.docs, h.scores, strict=True)) for h in general]
            checked.append(sum(len(turns) for turns in once))
        return once

    monkeypatch.setattr(generators, "whole_scope_turns", both)
    yield checked


@pytest.mark.parametrize("batches", [1, 3])
def test_one_pass_gives_the_general_paths_turns(hashing_settings: Settings, batches: int,
                                                compared: list[int]) -> None:
    service = SearchService(LakeStore(_lake(hashing_settings, batches)),
                            embedder=HashingEmbedder(64))
    scopes = [(Principal("acme", "u-ana"), "user", None),
              (Principal("acme", analyst=True), "tenant", None),
              (Principal("acme", "u-ana"), "conversation", "c-1-0")]
    for principal, scope, conversation in scopes:
        for roles in (None, ("user",), ("assistant", "anchor", "summary")):
            for depth in (1, 3, 100):
                for query in QUERIES:
                    extra: dict[str, Any] = {} if roles is None else {"roles": roles}
                    service.search(SearchRequest(
                        query, principal, scope=scope, conversation_id=conversation,  # type: ignore[arg-type]
                        as_of=AS_OF, depth=depth, enabled={"semantic": True}, **extra))
    assert len(compared) == 3 * 3 * 3 * len(QUERIES)  # the pass answered every search
    assert sum(compared) > 0


def test_a_scope_over_the_bound_goes_the_general_way(hashing_settings: Settings,
                                                     compared: list[int],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    service = SearchService(LakeStore(_lake(hashing_settings, 1)), embedder=HashingEmbedder(64))
    request = SearchRequest("budget plan", Principal("acme", "u-ana"), scope="user",
                            as_of=AS_OF, enabled={"semantic": True})
    before = service.search(request).hits
    assert compared
    monkeypatch.setattr(whole_scope, "WHOLE_SCOPE_ROWS", 5)
    compared.clear()
    after = service.search(request).hits
    assert not compared  # declined: the general path answered
    assert [(h.row_id, h.score) for h in after] == [(h.row_id, h.score) for h in before]


def test_long_rows_are_raised_by_their_passages_as_the_general_path_raises_them(
        tmp_path: Path, compared: list[int]) -> None:
    # the scale bench's lake with half its answers long (passage vectors pooled into theirs)
    settings, _, _ = build_scale_lake(tmp_path / "lake", 1500, vectors="clustered",
                                      long_share=0.5)
    store = LakeStore(settings.lake)
    service = SearchService(store, embedder=bench_embedder("clustered", 5))
    queries = make_queries(store, 12)
    for tenant, user, query in queries:
        for depth in (3, 20, 100):
            for principal, scope in ((Principal(tenant, user), "user"),
                                     (Principal(tenant, analyst=True), "tenant")):
                service.search(SearchRequest(query, principal, scope=scope,  # type: ignore[arg-type]
                                             as_of=NOW, depth=depth,
                                             enabled={"semantic": True}))
    assert len(compared) == len(queries) * 3 * 2
    assert sum(compared) > 0


def test_a_graph_search_goes_the_general_way() -> None:
    allowed = np.arange(3)
    graph = SimpleNamespace(scores_exactly=lambda size: size <= 2)
    query = np.ones(4, np.float32)
    through_graph = SimpleNamespace(semantic=graph, passages=None)
    assert whole_scope_turns([(through_graph, allowed)], query, 10) is None  # type: ignore[list-item]
    assert whole_scope_turns([], query, 10) == []
