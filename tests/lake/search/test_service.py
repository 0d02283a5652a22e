from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from lake.embedding.hashing import HashingEmbedder
from lake.errors import AccessDenied, QueryError
from lake.search.access import Principal
from lake.search.request import Hit, SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.jobs import run_ingest
from tests.factories import (
    BASE_TIME,
    garden_notes,
    make_record,
    passage_hashing_embedder,
    rich_record,
    write_jsonl,
)

AS_OF = BASE_TIME + timedelta(days=1)
ANA = Principal("acme", "u-ana")
BEN = Principal("acme", "u-ben")
ANALYST = Principal("acme", analyst=True)


def _records() -> list[dict[str, object]]:
    return [
        rich_record(0, conversation="c-sheet"),
        make_record(1, conversation="c-deploy",
                    prompt="deploy failed with ERR_CONNECTION_RESET on the staging node",
                    answer="restarted the ingress; the reset is gone"),
        make_record(2, conversation="c-deploy", prompt="pods in CrashLoopBackOff again",
                    answer="the liveness probe was too strict"),
        make_record(3, conversation="c-billing", prompt="why was my invoice charged twice",
                    answer="a duplicate payment was refunded"),
        make_record(4, user="u-ben", conversation="c-ben",
                    prompt="secret project zanzibar budget numbers",
                    answer="zanzibar budget is in the vault"),
        make_record(5, tenant="globex", user="u-ana", conversation="c-globex",
                    prompt="zanzibar deploy on globex", answer="globex answer"),
    ]


@pytest.fixture
def lake(hashing_settings: Settings, tmp_path: Path) -> Settings:
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", _records())])
    return hashing_settings


@pytest.fixture
def service(lake: Settings) -> SearchService:
    return SearchService(LakeStore(lake.lake), embedder=HashingEmbedder(64))


def _search(service: SearchService, query: str, principal: Principal = ANA,
            **kw: object) -> list[tuple[str, str]]:
    result = service.search(SearchRequest(query, principal, as_of=AS_OF, **kw))  # type: ignore[arg-type]
    return [(h.conversation_id, h.turn_id) for h in result.hits]


def test_exact_error_string_finds_its_turn(service: SearchService) -> None:
    assert _search(service, "ERR_CONNECTION_RESET")[0] == ("c-deploy", "t-0001")


@pytest.mark.parametrize("generator", ["semantic", "lexical", "trigram"])
def test_each_generator_alone_finds_the_turn(service: SearchService, generator: str) -> None:
    enabled = {g: g == generator for g in ("semantic", "lexical", "trigram")}
    hits = _search(service, "CrashLoopBackOff pods", enabled=enabled)
    assert hits and hits[0] == ("c-deploy", "t-0002")
    result = service.search(SearchRequest("CrashLoopBackOff pods", ANA, as_of=AS_OF,
                                          enabled=enabled))
    ranks = result.hits[0].ranks
    assert ranks[generator] is not None
    assert all(ranks[g] is None for g in enabled if g != generator)


def test_trigram_catches_a_misspelling(service: SearchService) -> None:
    only = {"semantic": False, "lexical": False, "trigram": True}
    assert _search(service, "CrashLopBackof", enabled=only)[0] == ("c-deploy", "t-0002")


def test_a_user_never_sees_another_users_rows(service: SearchService) -> None:
    assert all(cid != "c-ben" for cid, _ in _search(service, "zanzibar budget"))
    assert _search(service, "zanzibar budget", BEN)[0] == ("c-ben", "t-0004")


def test_no_call_crosses_a_tenant(service: SearchService) -> None:
    hits = _search(service, "zanzibar globex", ANALYST, scope="tenant")
    assert ("c-globex", "t-0005") not in hits
    assert _search(service, "zanzibar globex", Principal("globex", "u-ana")) == [
        ("c-globex", "t-0005")]


def test_scope_rules(service: SearchService) -> None:
    with pytest.raises(AccessDenied):
        _search(service, "x", ANA, scope="tenant")
    with pytest.raises(AccessDenied):
        _search(service, "x", ANA, user_id="u-ben")
    with pytest.raises(QueryError):
        _search(service, "x", ANA, scope="conversation")
    assert _search(service, "zanzibar", ANALYST, scope="tenant")[0] == ("c-ben", "t-0004")
    in_conv = _search(service, "deploy", ANA, scope="conversation", conversation_id="c-billing")
    assert all(cid == "c-billing" for cid, _ in in_conv)


def test_recency_lift_and_score_breakdown(service: SearchService) -> None:
    result = service.search(SearchRequest("deploy", ANA, as_of=AS_OF))
    hit = result.hits[0]
    age_days = (AS_OF - hit.turn_at).total_seconds() / 86400
    assert hit.lift == pytest.approx(1 + 0.5 ** (age_days / 7))
    assert hit.score == pytest.approx(hit.fused * hit.lift)
    off = service.search(SearchRequest("deploy", ANA, as_of=AS_OF, recency_weight=0))
    assert off.hits[0].lift == 1.0


def test_snippets_and_roles(service: SearchService) -> None:
    result = service.search(SearchRequest("ingress", ANA, as_of=AS_OF))
    top = result.hits[0]
    assert top.role == "assistant" and "ingress" in top.text
    assert "ERR_CONNECTION_RESET" in top.snippets["user"]
    assert "ingress" in top.snippets["assistant"]
    none = service.search(SearchRequest("ingress", ANA, as_of=AS_OF, snippets="none"))
    assert none.hits[0].snippets == {}
    lexical = {"semantic": False, "lexical": True, "trigram": False}
    only_user = _search(service, "ingress", roles=("user",), enabled=lexical)
    assert ("c-deploy", "t-0001") not in only_user


def test_notes_are_opt_in(service: SearchService) -> None:
    only_lexical = {"semantic": False, "lexical": True, "trigram": False}
    assert _search(service, "prefers", enabled=only_lexical) == []
    assert _search(service, "prefers", enabled=only_lexical,
                   roles=("note",)) == [("c-sheet", "t-0000")]


def test_max_per_conversation(service: SearchService) -> None:
    capped = _search(service, "deploy pods reset", max_per_conversation=1)
    assert sum(1 for cid, _ in capped if cid == "c-deploy") == 1
    uncapped = _search(service, "deploy pods reset", max_per_conversation=0)
    assert sum(1 for cid, _ in uncapped if cid == "c-deploy") == 2


def test_time_range_and_expiry(service: SearchService) -> None:
    since = BASE_TIME + timedelta(minutes=15)
    hits = _search(service, "staging pods", since=since)  # words of t-0001 and t-0002
    assert ("c-deploy", "t-0001") not in hits and ("c-deploy", "t-0002") in hits
    far_future = BASE_TIME + timedelta(days=400)
    assert service.search(SearchRequest("deploy", ANA, as_of=far_future)).hits == []


def test_bad_requests_are_clear(service: SearchService) -> None:
    with pytest.raises(QueryError, match="unknown role"):
        _search(service, "x", roles=("robot",))
    with pytest.raises(QueryError, match="k must be"):
        _search(service, "x", k=0)
    assert _search(service, "   ") == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
@pytest.mark.parametrize("field,name", [("half_life_days", "half-life days"),
                                        ("recency_weight", "recency weight"),
                                        ("weights", "lexical weight")])
def test_weights_that_are_not_finite_numbers_are_refused_by_name(
        service: SearchService, field: str, name: str, bad: float) -> None:
    # A NaN lexical weight used to pass every check and switch the lexical arm off.
    value: object = {"lexical": bad} if field == "weights" else bad
    with pytest.raises(QueryError, match=f"{name} must be a finite number >= 0"):
        _search(service, "deploy", **{field: value})


def test_stale_index_is_reported(lake: Settings, service: SearchService,
                                 tmp_path: Path) -> None:
    run_ingest(lake, [write_jsonl(tmp_path / "more.jsonl",
                                  [make_record(9, prompt="brand new kubernetes topic")])],
               index=False)
    result = service.search(SearchRequest("kubernetes", ANA, as_of=AS_OF))
    assert result.stale_partitions == ["acme/2026-03"]
    assert "stale" in result.warnings[0]


def test_vectors_of_another_model_are_not_searched_by_meaning(service: SearchService,
                                                              lake: Settings) -> None:
    class OtherModel(HashingEmbedder):
        """Same width, another model: its vectors and the lake's are not comparable."""

        @property
        def name(self) -> str:
            return "another-64"

    other = SearchService(LakeStore(lake.lake), embedder=OtherModel(64))
    result = other.search(SearchRequest("CrashLoopBackOff pods", ANA, as_of=AS_OF))
    assert result.hits[0].turn_id == "t-0002"  # found by its words
    assert all(h.ranks["semantic"] is None for h in result.hits)
    assert "semantic" not in result.timings_ms
    assert result.foreign_model_partitions == ["acme/2026-03"]
    assert any("another embedding model" in w and "another-64" in w for w in result.warnings)
    same = service.search(SearchRequest("CrashLoopBackOff pods", ANA, as_of=AS_OF))
    assert same.hits[0].ranks["semantic"] is not None
    assert same.foreign_model_partitions == [] and same.warnings == []


def test_embedding_failure_keeps_text_search(hashing_settings: Settings,
                                             tmp_path: Path) -> None:
    class Broken(HashingEmbedder):
        def encode(self, texts: object, *, batch_size: int = 64) -> np.ndarray:
            raise RuntimeError("model server down")

    job = run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", _records())],
                     embedder=Broken(64))
    assert job.embedding.failed > 0 and job.embedding.embedded == 0
    service = SearchService(LakeStore(hashing_settings.lake), embedder=Broken(64))
    result = service.search(SearchRequest("ERR_CONNECTION_RESET", ANA, as_of=AS_OF))
    assert result.hits[0].turn_id == "t-0001"
    assert result.hits[0].ranks["semantic"] is None

    from pipeline.embed import backfill
    from pipeline.index_build import build_indexes

    report = backfill(hashing_settings, HashingEmbedder(64))
    assert report.embedded == job.embedding.failed and report.failed == 0
    build_indexes(LakeStore(hashing_settings.lake), model="hashing-64")
    healed = SearchService(LakeStore(hashing_settings.lake), embedder=HashingEmbedder(64))
    again = healed.search(SearchRequest("ERR_CONNECTION_RESET", ANA, as_of=AS_OF))
    assert again.hits[0].ranks["semantic"] is not None


def test_as_of_defaults_to_now(service: SearchService) -> None:
    result = service.search(SearchRequest("deploy", ANA))
    assert all(h.turn_at < datetime.now(UTC) for h in result.hits)


def test_stale_index_never_returns_a_deleted_turn(lake: Settings, service: SearchService) -> None:
    store = LakeStore(lake.lake)
    assert _search(service, "CrashLoopBackOff")[0] == ("c-deploy", "t-0002")
    # Delete the TurnLog behind the index's back (as an erase does before it rebuilds).
    store.delete(Table.TURN_LOGS, "conversation_id = 'c-deploy' AND turn_id = 't-0002'")
    result = service.search(SearchRequest("CrashLoopBackOff", ANA, as_of=AS_OF))
    assert result.stale_partitions == ["acme/2026-03"]
    assert ("c-deploy", "t-0002") not in [(h.conversation_id, h.turn_id) for h in result.hits]


def test_appends_alone_leave_no_removed_turn_to_check(
        lake: Settings, service: SearchService, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_ingest(lake, [write_jsonl(tmp_path / "more.jsonl",
                                  [make_record(9, conversation="c-deploy",
                                               prompt="CrashLoopBackOff once more")])],
               index=False)
    checked: list[object] = []
    real = SearchService._live_turns
    monkeypatch.setattr(SearchService, "_live_turns",
                        lambda self, *a: checked.append(a) or real(self, *a))
    result = service.search(SearchRequest("CrashLoopBackOff", ANA, as_of=AS_OF))
    assert result.stale_partitions == ["acme/2026-03"]
    assert ("c-deploy", "t-0002") in [(h.conversation_id, h.turn_id) for h in result.hits]
    assert checked == []  # the TurnLog table only grew since the build: nothing to look up
    # A deletion after the appends is seen, and the deleted turn is not served.
    LakeStore(lake.lake).delete(Table.TURN_LOGS,
                                "conversation_id = 'c-deploy' AND turn_id = 't-0002'")
    result = service.search(SearchRequest("CrashLoopBackOff", ANA, as_of=AS_OF))
    assert checked
    assert ("c-deploy", "t-0002") not in [(h.conversation_id, h.turn_id) for h in result.hits]


def test_service_follows_index_rebuilds(lake: Settings, service: SearchService,
                                        tmp_path: Path) -> None:
    from pipeline.index_build import build_indexes

    before = service.search(SearchRequest("deploy", ANA, as_of=AS_OF)).hits
    build_indexes(LakeStore(lake.lake), model="hashing-64", full=True)
    after = service.search(SearchRequest("deploy", ANA, as_of=AS_OF)).hits
    assert [(h.turn_id, h.score) for h in before] == [(h.turn_id, h.score) for h in after]


def test_lifting_only_until_the_top_is_settled_changes_no_hit(
        hashing_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Many turns share the query words, spread over weeks and a few conversations, so the
    # recency lift reorders them and the per-conversation cap bites.
    records = [make_record(i, conversation=f"c-{i % 5}",
                           prompt=f"deploy pipeline step {i} failed on node {i % 3}",
                           answer=f"retried the deploy, node {i % 3} is fine",
                           at=BASE_TIME + timedelta(days=2 * i, hours=i % 7))
               for i in range(60)]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "many.jsonl", records)])
    service = SearchService(LakeStore(hashing_settings.lake), embedder=HashingEmbedder(64))
    as_of = BASE_TIME + timedelta(days=130)
    import lake.search.lifts as lifts_module

    def hits(**kw: object) -> list[tuple[str, str, float]]:
        result = service.search(SearchRequest("deploy failed node", ANA, as_of=as_of, **kw))  # type: ignore[arg-type]
        return [(h.conversation_id, h.turn_id, h.score) for h in result.hits]

    cases: list[dict[str, object]] = [
        {}, {"k": 3}, {"k": 25}, {"max_per_conversation": 0, "k": 7},
        {"max_per_conversation": 1}, {"recency_weight": 4.0, "k": 5},
        {"half_life_days": 1.0, "max_per_conversation": 3, "k": 12}]
    verdicts: list[bool] = []
    real_settled = lifts_module._settled

    def spy(*args: object) -> bool:
        verdicts.append(real_settled(*args))  # type: ignore[arg-type]
        return verdicts[-1]

    monkeypatch.setattr(lifts_module, "_settled", spy)
    settled = [hits(**case) for case in cases]
    assert True in verdicts  # the early stop was taken
    monkeypatch.setattr(lifts_module, "SETTLE_EVERY", 10**9)  # lift every turn
    assert settled == [hits(**case) for case in cases]
    assert all(settled) and len({tuple(h) for h in settled}) > 3


@pytest.mark.parametrize("query", ["?!", "...;;", "qxzvbt wprrfk", "zzyzx harpsichord"])
def test_a_query_that_matches_nothing_finds_nothing_and_says_why(
        service: SearchService, query: str) -> None:
    result = service.search(SearchRequest(query, ANA, as_of=AS_OF))
    assert result.hits == []
    everything = service.search(SearchRequest(query, ANA, as_of=AS_OF, min_relevance=0.0))
    if everything.hits:  # the nearest turns exist, they are only not relevant
        assert result.below_floor >= len(everything.hits)
        assert any("relevance floor" in w for w in result.warnings)
        assert all(0.0 <= h.relevance < 0.5 for h in everything.hits)


def test_hits_carry_their_relevance_and_the_floor_drops_the_weak(
        service: SearchService) -> None:
    hits = service.search(SearchRequest("CrashLoopBackOff pods", ANA, as_of=AS_OF,
                                        min_relevance=0.0)).hits
    assert hits[0].turn_id == "t-0002" and hits[0].relevance > 0.5
    floor = (hits[0].relevance + min(h.relevance for h in hits)) / 2
    kept = service.search(SearchRequest("CrashLoopBackOff pods", ANA, as_of=AS_OF,
                                        min_relevance=floor)).hits
    assert kept and all(h.relevance >= floor for h in kept)
    assert [h.turn_id for h in kept] == [h.turn_id for h in hits if h.relevance >= floor]


def test_min_relevance_outside_zero_to_one_is_refused(service: SearchService) -> None:
    with pytest.raises(QueryError, match="min relevance"):
        _search(service, "deploy", min_relevance=1.5)


def test_user_scope_weighs_words_by_the_users_own_history(
        hashing_settings: Settings, tmp_path: Path) -> None:
    # Ana's history is full of her friend's name; her one turn about turtles is what she
    # means by "jon turtles". Among all users' rows the name is rare and "turtles" common
    # (Ben's history is about turtles), so the partition's statistics rank her turns that
    # only name Jon first.
    records = [make_record(i, conversation=f"c-{i}", prompt=f"thanks jon, chat {i} was fun",
                           answer="sure thing, see you soon") for i in range(8)]
    records.append(make_record(8, conversation="c-8", prompt="my turtles got sick",
                               answer="sorry to hear that"))
    records += [make_record(20 + i, user="u-ben", conversation=f"c-ben-{i}",
                            prompt=f"turtles tank {i}", answer="turtles like warm water")
                for i in range(30)]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "names.jsonl", records)])
    service = SearchService(LakeStore(hashing_settings.lake), embedder=HashingEmbedder(64))
    lexical = {"semantic": False, "lexical": True, "trigram": False}
    assert _search(service, "jon turtles", enabled=lexical)[0] == ("c-8", "t-0008")
    # the same index under the partition's statistics: a row naming Jon comes first
    (part,) = service.partitions.views()  # the partition the search opened
    first, _ = part.lexical.search("jon turtles", limit=1, user_id="u-ana")[0]
    assert part.rows.column("conversation_id")[first].as_py() != "c-8"


@pytest.mark.parametrize("principal,scope", [(ANALYST, "tenant"), (ANA, "user")])
def test_a_wide_scope_running_its_semantic_arm_aside_finds_the_same(
        service: SearchService, monkeypatch: pytest.MonkeyPatch, principal: Principal,
        scope: str) -> None:
    import lake.search.service as service_module

    queries = ["deploy failed ERR_CONNECTION_RESET", "invoice charged twice", "zanzibar",
               "CrashLopBackof pods", "budget"]

    def answers() -> list[list[tuple[str, str, float, dict[str, int | None]]]]:
        out = []
        for query in queries:
            result = service.search(SearchRequest(query, principal, scope=scope,  # type: ignore[arg-type]
                                                  as_of=AS_OF, k=10))
            assert {"semantic", "lexical", "trigram"} <= set(result.timings_ms)
            out.append([(h.conversation_id, h.turn_id, h.score, dict(h.ranks))
                        for h in result.hits])
        return out

    monkeypatch.setattr(service_module, "PARALLEL_ARMS_MIN_ROWS", 10**9)
    in_line = answers()
    submitted: list[object] = []
    pool = service_module._arm_pool()
    real_submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda *a, **k: submitted.append(a) or real_submit(*a, **k))
    monkeypatch.setattr(service_module, "PARALLEL_ARMS_MIN_ROWS", 1)
    assert answers() == in_line
    assert len(submitted) == len(queries)  # each search ran its semantic arm aside
    assert any(in_line)


def test_a_forked_child_runs_wide_searches_on_threads_of_its_own(
        service: SearchService, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    import lake.search.service as service_module

    monkeypatch.setattr(service_module, "PARALLEL_ARMS_MIN_ROWS", 1)
    expected = _search(service, "deploy failed", ANALYST, scope="tenant")
    assert service_module._ARM_POOL is not None  # the parent's pool, with its threads
    _FORKED.append(service)  # the child finds it in its copy of this module
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            # With the parent's pool object and none of its threads, the child would wait
            # forever.
            found = pool.apply_async(_search_in_child).get(timeout=120)
    finally:
        _FORKED.clear()
    assert found == expected


_FORKED: list[SearchService] = []


def _search_in_child() -> list[tuple[str, str]]:
    return _search(_FORKED[0], "deploy failed", ANALYST, scope="tenant")


def test_one_tenants_statuses_are_the_whole_lakes_of_that_tenant(service: SearchService) -> None:
    everything = service.statuses()
    assert {tenant for tenant, _ in everything} == {"acme", "globex"}
    for tenant in ("acme", "globex"):
        assert service.statuses(tenant) == {part: s for part, s in everything.items()
                                            if part[0] == tenant}
    assert service.statuses("initech") == {}


def test_a_query_without_a_word_finds_only_turns_that_hold_its_text(
        hashing_settings: Settings, tmp_path: Path) -> None:
    class Alike(HashingEmbedder):
        """Every text at the same point: each cosine is 1, as near as a vector can be (an
        embedding model puts any two short codes close, "#4471" to "PR #4560")."""

        def encode(self, texts: object, *, batch_size: int = 64) -> np.ndarray:
            one = np.zeros((len(texts), 64), np.float32)  # type: ignore[arg-type]
            one[:, 0] = 1.0
            return one

    records = [make_record(1, conversation="c-ops", prompt="what broke in INC-3147",
                           answer="the ingress certificate expired"),
               make_record(2, conversation="c-ops", prompt="and PR #4560?",
                           answer="it renews the certificate"),
               make_record(3, conversation="c-pay", prompt="why was my invoice charged twice",
                           answer="a duplicate payment was refunded"),
               make_record(4, conversation="c-db", prompt="is INC5150 fixed?",
                           answer="yes, the replica caught up")]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)],
               embedder=Alike(64))
    service = SearchService(LakeStore(hashing_settings.lake), embedder=Alike(64))

    def found(query: str, floor: float = 0.5) -> list[str]:
        result = service.search(SearchRequest(query, ANA, as_of=AS_OF, min_relevance=floor))
        return [h.turn_id for h in result.hits]

    # codes and numbers the history does not hold: every turn is as near as can be, and none
    # is a match
    for absent in ("#4471", "9876", "x7y9z1", "cp1252"):
        assert found(absent) == [], absent
        assert found(absent, 0.0)  # the nearest turns are there, under the floor
    # nor is a code that shares a part with one the history holds: another number is another
    # ticket, however strong the BM25 of the shared "INC" or "PR"
    for other in ("INC-9999", "INC-3148", "PR #9999"):
        assert found(other) == [], other
        assert found(other, 0.0)
    # a query of several codes finds the turns that hold any one of them (t-0002 also passes
    # as t-0001's neighbour, less surely)
    def relevances(query: str) -> dict[str, float]:
        result = service.search(SearchRequest(query, ANA, as_of=AS_OF))
        return {h.turn_id: h.relevance for h in result.hits}

    assert relevances("INC-3147 #4560") == {"t-0001": 1.0, "t-0002": 1.0}
    one = relevances("INC-3147 #9999")
    assert one["t-0001"] == 1.0 and one.get("t-0002", 0.0) < 1.0 and "t-0003" not in one
    assert found("INC-9999 #9999") == []
    # a code the history holds is found by its text, as written or in other case
    assert found("INC-3147")[0] == "t-0001"
    assert found("inc-3147")[0] == "t-0001"
    assert found("#4560")[0] == "t-0002"
    # and with other separators or none, whichever way the history wrote it
    for query, turn in (("INC3147", "t-0001"), ("inc 3147", "t-0001"), ("PR4560", "t-0002"),
                        ("INC-5150", "t-0004"), ("inc_5150", "t-0004")):
        assert found(query)[0] == turn, query
    for other in ("INC3148", "INC-5151", "PR4561"):
        assert found(other) == [], other
    # a query of words is still judged by meaning too: at cosine 1 every turn passes
    assert sorted(found("renewal of a certificate")) == ["t-0001", "t-0002", "t-0003", "t-0004"]


def test_a_code_held_by_more_turns_than_the_trigram_arm_keeps_is_found_in_every_one(
        hashing_settings: Settings, tmp_path: Path) -> None:
    # 131 turns name the ticket, more than a generator keeps (depth 60): the trigram arm keeps
    # 60 of its equal scores, the lexical arm 60 by BM25, and a turn holding the code whole
    # passes the floor whichever of them found it
    records = [make_record(i, conversation=f"c-{i}", prompt=f"status of INC-3147, part {i}",
                           answer="still investigating the ingress" + " and more" * (i % 7))
               for i in range(130)]
    records.append(make_record(130, conversation="c-130", prompt="did INC-3147 close?",
                               answer="yes, it closed this morning"))
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)],
               embedder=HashingEmbedder(64))
    service = SearchService(LakeStore(hashing_settings.lake), embedder=HashingEmbedder(64))

    def hits(floor: float) -> list[Hit]:
        return service.search(SearchRequest("INC-3147", ANA, as_of=AS_OF, k=200, depth=60,
                                            min_relevance=floor)).hits

    by_text = {h.turn_id for h in hits(0.0) if h.ranks["lexical"] or h.ranks["trigram"]}
    only_lexical = {h.turn_id for h in hits(0.0) if not h.ranks["trigram"]} & by_text
    assert only_lexical  # the case at hand: turns the trigram arm did not keep
    floored = hits(0.5)
    assert {h.turn_id for h in floored} == by_text
    assert floored[0].turn_id == "t-0130"  # the newest, lifted by recency


def test_a_query_longer_than_the_model_reads_is_embedded_once_by_what_it_reads(
        hashing_settings: Settings, tmp_path: Path) -> None:
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", [
        make_record(1, prompt="how often should I water the tomato beds",
                    answer="every week, and mulch the roses")])], embedder=HashingEmbedder(64))
    embedder = passage_hashing_embedder(64, window=40)
    asked: list[list[str]] = []
    encode = embedder.encode

    def recording(texts: list[str], **kw: object) -> np.ndarray:
        asked.append(list(texts))
        return encode(texts, **kw)  # type: ignore[arg-type]

    embedder.encode = recording  # type: ignore[method-assign]
    service = SearchService(LakeStore(hashing_settings.lake), embedder=embedder)
    query = garden_notes(60)  # ~1,200 word pieces: 30 passages of 40
    assert len(embedder.passage_splitter.split([query])[0]) > 20
    result = service.search(SearchRequest(query, ANA, as_of=AS_OF, min_relevance=0.0))
    # one call, of what the model reads: its first 40 word pieces (to a word's start)
    assert asked == [[embedder.passage_splitter.head(query)]]
    assert query.startswith(asked[0][0]) and len(asked[0][0]) < len(query)
    assert result.hits and result.hits[0].ranks["semantic"] is not None
