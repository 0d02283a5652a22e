"""The workbench's service, typed models, session state and text helpers, without a browser."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.components.text import (
    compact_number,
    escape_markdown,
    highlight_markdown,
    human_bytes,
    query_terms,
)
from app.models import SearchForm, Viewer
from app.service import Workbench, cached_workbench, lake_version, purge_runner
from app.state import REPLAY_TURN_KEY, WorkbenchState
from lake.errors import AccessDenied, QueryError
from lake.search.access import Principal
from lake.settings import Settings
from pipeline.jobs import run_ingest
from tests.app.workbench_lake import (
    ANA,
    BEN,
    FILE_BYTES,
    FILE_REF,
    KNOWN_CONVERSATION,
    PRIVATE_CONVERSATION,
    QUERY,
    TENANT,
    SeededLake,
    seed,
    turn_record,
)

ANALYST = Viewer(TENANT)
AS_ANA = Viewer(TENANT, ANA)


def test_viewer_principals() -> None:
    assert ANALYST.principal == Principal(TENANT, analyst=True)
    assert AS_ANA.principal == Principal(TENANT, ANA)
    assert AS_ANA.describe() == "user u-wb-ana of acme" and not AS_ANA.is_analyst


def test_search_form_resolves_when_phrases() -> None:
    as_of = datetime(2026, 3, 12, 9, tzinfo=UTC)
    request = SearchForm("q", when="last week", k=3, trigram=False,
                         max_per_conversation=0).request(ANALYST.principal, as_of)
    assert (request.since, request.until) == (datetime(2026, 3, 2, tzinfo=UTC),
                                              datetime(2026, 3, 9, tzinfo=UTC))
    assert request.k == 3 and request.enabled["trigram"] is False
    assert request.max_per_conversation == 0 and request.as_of == as_of
    assert SearchForm("q").request(ANALYST.principal, as_of).since is None
    with pytest.raises(QueryError, match="names a turn position"):
        SearchForm("q", when="the 3rd turn").request(ANALYST.principal, as_of)
    with pytest.raises(QueryError, match="cannot resolve"):
        SearchForm("q", when="when pigs fly").request(ANALYST.principal, as_of)


def test_search_and_replay_through_the_service(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    outcome = wb.search(ANALYST, SearchForm(QUERY, scope="tenant"))
    top = outcome.hits[0]
    assert (top.hit.conversation_id, top.hit.turn_id, top.title) == (
        KNOWN_CONVERSATION, "t-0001", "Quokka workbook")
    lines = {line.component: line for line in top.breakdown()}
    assert lines["final"].score == pytest.approx(lines["rrf"].score * lines["recency lift"].score)  # type: ignore[operator]
    assert not outcome.warnings and outcome.viewer == ANALYST
    turn = wb.replay(ANALYST, KNOWN_CONVERSATION, "t-0001")
    assert [s.event_type for s in turn.submissions] == ["prompt", "steer"]
    assert [(f.card.ref, f.data, f.error) for f in turn.files] == [(FILE_REF, FILE_BYTES, None)]
    assert turn.feedback is not None and turn.feedback.rating == 1
    assert turn.usage is not None and turn.usage.tokens_in == 120
    assert [s.name for s in turn.steps] == ["run_python"]
    assert turn.attachments[0].has_text and turn.citations[0].url == "https://example.com/tz"
    assert wb.file_bytes(AS_ANA, FILE_REF) == FILE_BYTES


def test_a_user_view_is_held_to_the_users_rules(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    assert {c.user_id for c in wb.conversations(AS_ANA)} == {ANA}
    assert wb.users(AS_ANA) == [ANA]
    with pytest.raises(AccessDenied):
        wb.turns(AS_ANA, PRIVATE_CONVERSATION)
    with pytest.raises(AccessDenied):
        wb.replay(AS_ANA, PRIVATE_CONVERSATION, "t-0003")
    with pytest.raises(AccessDenied):
        wb.search(AS_ANA, SearchForm("zanzibar", scope="tenant"))
    hits = wb.search(AS_ANA, SearchForm("zanzibar budget secret")).hits
    assert all(h.hit.user_id == ANA for h in hits)
    assert [t.turn_id for t in wb.turns(Viewer(TENANT, BEN), PRIVATE_CONVERSATION)] == [
        "t-0003"]


def test_retention_and_index_health_figures(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    data = wb.retention(ANALYST, weeks=4)
    assert data.default_ttl_days == 365 and data.rules == ()
    assert "c-wb-expired" in data.expired_turns["conversation_id"].to_list()
    assert {p.table for p in data.purge} == {"turn_logs", "content_rows", "timelines",
                                             "events", "files"}
    health = wb.index_health(ANALYST)
    assert health and all(h.tenant == TENANT and h.freshness == "fresh" for h in health)
    runner = purge_runner(wb)
    assert runner is not None
    with pytest.raises(AccessDenied):  # a user view may see the preview, never purge
        runner(AS_ANA, data.as_of)


def test_the_cached_service_follows_the_lake_version(tmp_path: Path) -> None:
    lake = seed(tmp_path / "lake", demo_turns=0)
    first = cached_workbench(lake.settings)
    assert cached_workbench(lake.settings) is first
    before = lake_version(lake.settings.lake)
    later = turn_record(9, at=lake.now - timedelta(days=1), prompt="one more", answer="done")
    run_ingest(Settings(lake=lake.settings.lake, embedding_model="hashing-64"),
               records=[json.dumps(later)])
    after = lake_version(lake.settings.lake)
    assert after != before and after.index_builds != before.index_builds
    assert cached_workbench(lake.settings) is not first


def test_state_deep_links_and_turn_steps() -> None:
    session: dict[str, object] = {}
    state = WorkbenchState(session)
    assert state.replay_conversation is None and state.view_as_user is None
    state.apply_link("c-1", "t-2")
    assert (state.replay_conversation, state.replay_turn) == ("c-1", "t-2")
    state.select_turn("t-3")
    state.apply_link("c-1", "t-2")  # the same link again: the user's pick stays
    assert state.replay_turn == "t-3"
    state.step_turn(["t-1", "t-2", "t-3"], 1)
    assert state.replay_turn == "t-3"  # clamped at the end
    state.step_turn(["t-1", "t-2", "t-3"], -2)
    assert state.replay_turn == "t-1"
    state.forget_turn()
    assert session[REPLAY_TURN_KEY] is None and state.replay_turn is None
    session.update({"wb_view_as_on": True, "wb_view_as_user": ANA})
    assert state.view_as_user == ANA


def test_highlighting_escapes_markdown_and_marks_terms() -> None:
    assert escape_markdown("a *b* [c](d) :e: $f") == r"a \*b\* \[c\]\(d\) \:e\: \$f"
    assert query_terms("Quokka the x quokka-sheet") == ["quokka-sheet", "quokka", "the"]
    marked = highlight_markdown("The QUOKKA sheet: *bold*", "quokka")
    assert marked == r"The :orange-background[QUOKKA] sheet\: \*bold\*"
    assert highlight_markdown("abcdef", "", limit=3) == "abc…"
    assert human_bytes(None) == "-" and human_bytes(512) == "512 B"
    assert human_bytes(1536) == "1.5 KB" and human_bytes(3 * 1024**3) == "3.0 GB"
    assert compact_number(999) == "999" and compact_number(55_076) == "55.1k"
    assert compact_number(2_400_000) == "2.4M"
