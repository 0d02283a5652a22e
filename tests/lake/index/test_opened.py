"""The memory budget of a search process: partitions opened past it are closed least recently
used first, and answers stay those of a process without a budget."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from lake.embedding.hashing import HashingEmbedder
from lake.errors import IndexUnavailable
from lake.index.opened import OpenedPartitions, parse_budget
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, write_jsonl

MONTHS = 4
AS_OF = BASE_TIME + timedelta(days=31 * MONTHS)


@pytest.fixture
def lake(hashing_settings: Settings, tmp_path: Path) -> Settings:
    """Two tenants, four months each: eight partitions."""
    records = [
        make_record(turn, tenant=tenant, user="u-ana", conversation=f"c-{tenant}-{month}",
                    at=BASE_TIME + timedelta(days=31 * month, minutes=turn),
                    prompt=f"deploy {word} failed in month {month} for {tenant}",
                    answer=f"fixed the {word} rollout ({tenant}, month {month})")
        for tenant in ("acme", "globex") for month in range(MONTHS)
        for turn, word in enumerate(("ingress", "database", "certificate"))
    ]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    return hashing_settings


def _answers(service: SearchService, query: str, tenant: str) -> list[tuple[str, str, float]]:
    result = service.search(SearchRequest(query, Principal(tenant, "u-ana"), as_of=AS_OF, k=20))
    return [(h.conversation_id, h.turn_id, round(h.score, 9)) for h in result.hits]


def test_a_budget_closes_the_least_recently_used_and_answers_stay_right(lake: Settings) -> None:
    unbounded = SearchService(LakeStore(lake.lake), embedder=HashingEmbedder(64))
    queries = [("database rollout", "acme"), ("certificate", "globex"),
               ("ingress month 2", "acme"), ("deploy failed", "globex")]
    want = {q: _answers(unbounded, *q) for q in queries}
    assert all(want.values())
    everything = unbounded.partitions.stats()
    assert everything.open_partitions == 2 * MONTHS and everything.closed == 0

    # a budget below one partition's cost keeps one partition open at most
    tight = SearchService(LakeStore(lake.lake), embedder=HashingEmbedder(64), memory_budget=1)
    for _ in range(2):
        for query in queries:
            assert _answers(tight, *query) == want[query]
    stats = tight.partitions.stats()
    assert stats.open_partitions == 1 and stats.budget == 1
    # every search opened its tenant's four partitions again: each one closed in turn
    assert stats.opened == 2 * len(queries) * MONTHS
    assert stats.closed == stats.opened - 1

    # room for one tenant's partitions: alternating tenants reopens, repeating one does not
    def charged(tenant: str) -> int:
        alone = SearchService(LakeStore(lake.lake), embedder=HashingEmbedder(64),
                              memory_budget=1 << 40)
        _answers(alone, "deploy", tenant)
        return alone.partitions.stats().open_bytes

    one_tenant = max(charged("acme"), charged("globex"))
    sized = SearchService(LakeStore(lake.lake), embedder=HashingEmbedder(64),
                          memory_budget=one_tenant + one_tenant // (4 * MONTHS))
    for query in [queries[0], queries[2], queries[0]]:  # acme only
        assert _answers(sized, *query) == want[query]
    acme_only = sized.partitions.stats()
    assert acme_only.opened == MONTHS and acme_only.closed == 0
    assert _answers(sized, *queries[1]) == want[queries[1]]  # globex: acme's are closed
    after = sized.partitions.stats()
    assert after.opened == 2 * MONTHS and after.closed == MONTHS
    assert {v.manifest.tenant for v in sized.partitions.views()} == {"globex"}
    assert after.open_bytes <= after.budget  # type: ignore[operator]


def test_unbounded_views_are_kept_and_charged_nothing(lake: Settings) -> None:
    service = SearchService(LakeStore(lake.lake), embedder=HashingEmbedder(64))
    _answers(service, "database", "acme")
    _answers(service, "database", "acme")
    stats = service.partitions.stats()
    assert stats.opened == MONTHS and stats.open_bytes == 0 and stats.budget is None


@pytest.mark.parametrize(("text", "size"), [("800MB", 800 << 20), ("2g", 2 << 30),
                                            ("1.5 GB", int(1.5 * (1 << 30))), ("4096", 4096),
                                            ("64kb", 64 << 10)])
def test_budgets_parse(text: str, size: int) -> None:
    assert parse_budget(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1GB", "0", "12 parsecs", "1e400GB"])
def test_bad_budgets_are_refused_by_name(text: str) -> None:
    with pytest.raises(IndexUnavailable, match="memory budget"):
        parse_budget(text)
    with pytest.raises(IndexUnavailable, match="memory budget"):
        OpenedPartitions(0)


def test_the_setting_comes_from_the_environment(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_MEMORY_BUDGET", "1.5GB")
    assert Settings.from_env(tmp_path / "lake").search_memory_budget == int(1.5 * (1 << 30))
    monkeypatch.setenv("TURNLAKE_MEMORY_BUDGET", "plenty")
    with pytest.raises(IndexUnavailable, match="memory budget 'plenty'"):
        Settings.from_env(tmp_path / "lake")
    monkeypatch.delenv("TURNLAKE_MEMORY_BUDGET")
    assert Settings.from_env(tmp_path / "lake").search_memory_budget is None
