"""The workbench's service, typed models, session state and text helpers, without a browser."""

from __future__ import annotations

import dataclasses
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.components.events import badge_text, group_events, ref_mentions
from app.components.text import (
    compact_number,
    escape_markdown,
    highlight_markdown,
    human_bytes,
    query_terms,
)
from app.components.turn import status_badge
from app.models import SearchForm, SearchOutcome, Viewer
from app.service import Warmup, Workbench, cached_workbench, index_rebuilder, purge_runner
from app.state import HITS_STEP, WorkbenchState, identity_params
from lake.errors import AccessDenied, QueryError
from lake.search.access import Principal
from lake.search.catalog import ConversationQuery
from lake.settings import Settings
from pipeline.jobs import run_ingest
from tests.app.workbench_lake import (
    ANA,
    BEN,
    FILE_BYTES,
    FILE_REF,
    KNOWN_CONVERSATION,
    PANEL_CODE,
    PANEL_OUTPUT,
    PNG_BYTES,
    PRIVATE_CONVERSATION,
    QUERY,
    TENANT,
    UNTITLED_CONVERSATION,
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
    assert lines["final"].score == pytest.approx(lines["fused"].score * lines["lift"].score)  # type: ignore[operator]
    assert not outcome.warnings and outcome.viewer == ANALYST
    turn = wb.replay(ANALYST, KNOWN_CONVERSATION, "t-0001")
    assert [s.event_type for s in turn.parts.submissions] == ["prompt", "steer"]
    assert [(f.card.ref, f.data, f.error) for f in turn.files
            if f.card.mime == "text/csv"] == [(FILE_REF, FILE_BYTES, None)]
    parts = turn.parts
    assert parts.feedback is not None and parts.feedback.rating == 1
    assert parts.usage is not None and parts.usage.tokens_in == 120
    assert [s.name for s in parts.steps] == ["run_python"]
    assert parts.attachments[0].text and parts.citations[0].url == "https://example.com/tz"
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
    with pytest.raises(AccessDenied, match="only an admin"):  # nor may a plain analyst
        runner(ANALYST, data.as_of)
    with pytest.raises(AccessDenied, match="only an admin"):
        runner(Viewer(TENANT, ANA, admin=True), data.as_of)  # an admin viewing as a user
    with pytest.raises(AccessDenied, match="only an admin"):
        index_rebuilder(wb)(ANALYST, [(TENANT, "2026-01")], lambda *_: None)


def test_the_cached_service_stays_and_sees_what_is_written_after_it(tmp_path: Path) -> None:
    lake = seed(tmp_path / "lake", demo_turns=0)
    first = cached_workbench(lake.settings)
    assert first.warmup.wait(60)
    form = SearchForm("zeppelin hangar", scope="user")
    assert not [h for h in first.search(AS_ANA, form).hits
                if "zeppelin" in h.hit.text]
    later = turn_record(9, at=lake.now - timedelta(days=1),
                        prompt="where is the zeppelin hangar", answer="behind the depot")
    run_ingest(Settings(lake=lake.settings.lake, embedding_model="hashing-64"),
               records=[json.dumps(later)])
    # the same service, no new model or warm-up: its search finds the new turn, its index
    # health shows the rebuilt partition fresh, and its catalog lists the turn
    assert cached_workbench(lake.settings) is first
    hits = first.search(AS_ANA, form).hits
    assert hits and "zeppelin" in hits[0].hit.text and hits[0].hit.turn_id == "t-0009"
    assert {h.freshness for h in first.index_health(ANALYST)} == {"fresh"}
    turns = first.catalog.turns(AS_ANA.principal, KNOWN_CONVERSATION)
    assert "t-0009" in [t.turn_id for t in turns]


def test_a_dropped_widget_state_gets_the_identity_back_and_a_choice_is_kept() -> None:
    session: dict[str, object] = {}
    state = WorkbenchState(session)
    state.keep_identity()
    assert session == {}  # nobody to restore before the first identity
    state.enter(Viewer(TENANT, ANA))
    state.keep_identity()  # Streamlit dropped the sidebar widgets' state
    assert (session["wb_tenant"], session["wb_view_as_on"], session["wb_view_as_user"]) == (
        TENANT, True, ANA)
    session["wb_view_as_on"] = False  # reset to its default by Streamlit: put back
    state.keep_identity()
    assert session["wb_view_as_on"] is True
    session["wb_view_as_on"] = False  # the analyst switched "view as" off: that stays
    state.identity_touched()
    state.keep_identity()
    assert session["wb_view_as_on"] is False and state.view_as_user is None
    state.enter(Viewer(TENANT))  # the run draws the new identity, and the next one keeps it
    state.keep_identity()
    assert session["wb_view_as_on"] is False


def test_state_deep_links_and_turn_steps() -> None:
    session: dict[str, object] = {}
    state = WorkbenchState(session)
    assert state.replay_conversation is None and state.view_as_user is None
    state.apply_link("c-1", "t-2")
    assert state.replay is None  # no identity yet: a link is never opened for nobody
    state.enter(ANALYST)
    state.apply_link("c-1", "t-2")
    assert (state.replay_conversation, state.replay_turn) == ("c-1", "t-2")
    state.select_turn("t-3")
    state.apply_link("c-1", "t-2")  # the same link again: the user's pick stays
    assert state.replay_turn == "t-3"
    state.step_turn(["t-1", "t-2", "t-3"], 1)
    assert state.replay_turn == "t-3"  # clamped at the end
    state.step_turn(["t-1", "t-2", "t-3"], -2)
    assert state.replay_turn == "t-1"
    assert state.link_params() == {"conversation": "c-1", "turn": "t-1"}
    state.forget_turn()
    assert state.replay_turn is None and state.replay_conversation == "c-1"
    assert state.link_params() == {}
    session.update({"wb_view_as_on": True, "wb_view_as_user": ANA})
    assert state.view_as_user == ANA


def test_identity_comes_from_the_url_once_and_goes_back_into_it() -> None:
    session: dict[str, object] = {}
    state = WorkbenchState(session)
    state.apply_url_identity({"tenant": "globex", "as_user": "u-1"}, ["acme", "globex"])
    assert (state.tenant, state.view_as_user) == ("globex", "u-1")
    assert state.enter(Viewer("globex", "u-1")) == {"tenant": "globex", "as_user": "u-1"}
    # A page change drops the query string: the identity stays.
    state.apply_url_identity({}, ["acme", "globex"])
    assert (state.tenant, state.view_as_user) == ("globex", "u-1")
    # The user changed the sidebar; the URL still names the identity it wrote: no reset.
    session.update({"wb_tenant": "acme", "wb_view_as_on": False})
    state.apply_url_identity({"tenant": "globex", "as_user": "u-1"}, ["acme", "globex"])
    assert (state.tenant, state.view_as_user) == ("acme", None)
    assert identity_params(Viewer("acme")) == {"tenant": "acme"}
    # A tenant the analyst may not read is refused with a note.
    state.apply_url_identity({"tenant": "umbrella"}, ["acme", "globex"])
    assert state.tenant == "acme"
    notes = state.take_notes()
    assert any("ignored" in n for n in notes) and not any("umbrella" in n for n in notes)
    assert state.take_notes() == []  # shown once
    # Another tenant's user is never kept.
    session.update({"wb_view_as_on": True, "wb_view_as_user": "u-1"})
    state.settle_user(["u-7", "u-8"])
    assert state.view_as_user == "u-7" and state.take_notes()


def test_selections_of_another_tenant_or_user_are_cleared_with_a_note() -> None:
    state = WorkbenchState({})
    state.enter(ANALYST)
    state.open_conversation(PRIVATE_CONVERSATION, "t-0003")
    state.claim(BEN)
    state.last_search = SearchOutcome(ANALYST, SearchForm("zanzibar"), [], [], 1.0)
    state.enter(Viewer(TENANT, BEN))  # the conversation is Ben's: it stays open
    assert state.replay_conversation == PRIVATE_CONVERSATION
    assert state.last_search is None  # a search is the view's own
    state.take_notes()
    state.enter(AS_ANA)
    assert state.replay is None
    notes = state.take_notes()
    assert any(PRIVATE_CONVERSATION in n and "was closed" in n for n in notes)
    state.open_conversation(KNOWN_CONVERSATION)
    state.enter(Viewer("globex"))
    assert state.replay is None and state.take_notes()


def test_hit_paging_counts_and_actions() -> None:
    state = WorkbenchState({})
    assert state.shown_hits == HITS_STEP
    state.show_hits(30)
    assert state.shown_hits == 30
    state.last_search = None  # a new search starts at the first page again
    assert state.shown_hits == HITS_STEP
    state.turn_conversation_page(-1)
    assert state.conversation_page == 0
    state.turn_conversation_page(2)
    assert state.conversation_page == 2
    state.reset_conversation_page()
    assert state.conversation_page == 0
    key = state.actions
    state.count_action()
    assert state.actions == key + 1
    state.add_result("retention", "Purged 3 turn_logs")
    assert state.take_results("retention") == ["Purged 3 turn_logs"]
    assert state.take_results("retention") == []


def test_warmup_loads_in_the_background_and_reports_its_state() -> None:
    gate = threading.Event()

    def load() -> str:
        gate.wait(30)
        return "model hashing-64"

    warmup = Warmup(load)
    assert not warmup.ready and "Loading the model" in warmup.describe()
    warmup.start()
    warmup.start()  # once only
    assert not warmup.wait(0.05) and "Loading the model" in warmup.describe()
    gate.set()
    assert warmup.wait(30) and warmup.ready
    assert warmup.describe().startswith("Service ready: model hashing-64")

    def broken() -> str:
        raise OSError("no weights")

    failed = Warmup(broken)
    assert failed.wait(30) and "no weights" in failed.describe()


def test_the_service_warms_its_model_and_indexes(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    assert "indexes of 3 tenant(s)" in wb.warm()
    assert wb.search_service.partitions  # the partitions are open before any search


def test_search_refuses_a_query_without_words_and_explains_short_answers(
        seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    for query in ("", "   ", "?!… --- ***"):
        with pytest.raises(QueryError, match="the query has no words to search"):
            wb.search(ANALYST, SearchForm(query, scope="tenant"))
    off = SearchForm(QUERY, scope="tenant", semantic=False, lexical=False, trigram_weight=0)
    outcome = wb.search(ANALYST, off)
    assert not outcome.hits and "switched off or weighted 0" in outcome.notes()[0]
    many = wb.search(ANALYST, SearchForm(QUERY, scope="tenant", k=200))
    assert 0 < len(many.hits) < 200
    assert "fewer than k = 200" in many.notes()[0] and "per conversation" in many.notes()[0]
    assert wb.search(ANALYST, SearchForm(QUERY, scope="tenant", k=1)).notes() == []


def test_untitled_conversations_are_named_by_their_first_prompt(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    titles = wb.titles(ANALYST, [UNTITLED_CONVERSATION, KNOWN_CONVERSATION])
    assert titles == {UNTITLED_CONVERSATION: "why does the wallaby export stall at night?",
                      KNOWN_CONVERSATION: "Quokka workbook"}
    hit = wb.search(ANALYST, SearchForm("wallaby export stall", scope="tenant")).hits[0]
    assert hit.title == "why does the wallaby export stall at night?"
    assert wb.titles(Viewer(TENANT, BEN), [UNTITLED_CONVERSATION]) == {}  # Ana's, not Ben's


def test_the_conversation_list_comes_a_page_at_a_time(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    everything = wb.conversations(ANALYST)
    first = wb.conversation_page(ANALYST, ConversationQuery(limit=5))
    assert first.total == len(everything) and len(first.entries) == 5
    assert [e.conversation_id for e in first.entries] == [
        e.conversation_id for e in everything[:5]]
    second = wb.conversation_page(ANALYST, ConversationQuery(offset=5, limit=5))
    assert not {e.conversation_id for e in first.entries} & {
        e.conversation_id for e in second.entries}
    quokka = wb.conversation_page(ANALYST, ConversationQuery(text="QUOKKA"))
    assert [e.conversation_id for e in quokka.entries] == [KNOWN_CONVERSATION]
    mine = wb.conversation_page(AS_ANA, ConversationQuery())
    assert mine.total and {e.user_id for e in mine.entries} == {ANA}
    with pytest.raises(AccessDenied):
        wb.conversation_page(AS_ANA, ConversationQuery(user_id=BEN))
    by_title = wb.conversation_page(ANALYST, ConversationQuery(sort="title", descending=False))
    titles = [e.title for e in by_title.entries if e.title]
    assert titles == sorted(titles)
    facets = wb.facets(AS_ANA)
    assert facets["user_id"] == [ANA] and "support-desk" in facets["app"]


def test_the_conversation_list_of_one_day(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    day = (seeded.now - timedelta(days=2)).date()
    that_day = wb.conversation_page(ANALYST, ConversationQuery(day=day, limit=500))
    listed = {e.conversation_id for e in that_day.entries}
    assert {KNOWN_CONVERSATION, PRIVATE_CONVERSATION} <= listed
    assert that_day.total == len(listed) < len(wb.conversations(ANALYST))
    # exactly the conversations with a turn started that UTC day
    active = {t.conversation_id for t in wb.catalog.between(
        ANALYST.principal, datetime.combine(day, datetime.min.time(), UTC),
        datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC))}
    assert listed == active
    mine = wb.conversation_page(AS_ANA, ConversationQuery(day=day, limit=500))
    assert KNOWN_CONVERSATION in {e.conversation_id for e in mine.entries}
    assert {e.user_id for e in mine.entries} == {ANA}
    later = (seeded.now + timedelta(days=30)).date()
    assert wb.conversation_page(ANALYST, ConversationQuery(day=later)).total == 0


def test_replay_types_events_and_resolves_refs_in_the_answer(seeded: SeededLake) -> None:
    wb = Workbench(seeded.settings)
    turn = wb.replay(ANALYST, KNOWN_CONVERSATION, "t-0001")
    groups = group_events(turn.parts.events)
    assert [(p.type, p.field("code"), p.field("output")) for p in groups.panels] == [
        ("panel.code", PANEL_CODE, PANEL_OUTPUT)]
    assert [badge_text(b) for b in groups.badges] == ["cost · \\$0.0100 · 200 tokens"]
    assert [e.type for e in groups.other] == ["canvas.opened"]
    assert {f.card.name: f.data for f in turn.files}["chart.png"] == PNG_BYTES
    assert turn.attached[FILE_REF].data == FILE_BYTES and turn.mentions == []
    later = wb.replay(ANALYST, KNOWN_CONVERSATION, "t-0002")
    assert [(m.ref, m.name, m.data) for m in later.mentions] == [
        (FILE_REF, "quokka.csv", FILE_BYTES)]
    text, mentions = ref_mentions(later.answer)
    assert FILE_REF not in text and "**quokka\\.csv** :gray[(file below)]." in text
    assert mentions == [(FILE_REF, "quokka.csv")]
    assert status_badge(turn) is None
    interrupted = dataclasses.replace(
        turn, turn=dataclasses.replace(turn.turn, completion_status="interrupted"))
    assert "interrupted" in (status_badge(interrupted) or "")


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


def test_daily_trends_count_each_day_of_the_principal(seeded: SeededLake) -> None:
    from lake import analytics
    from lake.store import LakeStore

    store = LakeStore(seeded.settings.lake)
    tenant = analytics.daily_trends(store, ANALYST.principal)
    ana = analytics.daily_trends(store, AS_ANA.principal)
    totals = analytics.activity_totals(store, ANALYST.principal)
    assert int(tenant["turns"].sum()) == totals.turns
    assert int(tenant["tokens"].sum()) == totals.tokens_in + totals.tokens_out
    assert 0 < int(ana["turns"].sum()) < totals.turns  # one user's share only
    assert (tenant["p50_s"] <= tenant["p95_s"]).all()
    assert tenant["feedback_rate"].is_between(0.0, 1.0).all()


def test_replay_follows_the_record_refs_an_answer_names(tmp_path: Path) -> None:
    from pipeline.live import LiveWriter
    from tests.reliability.lake_audit import turn_record

    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    first = turn_record(1, conversation="c-ref", rich=True)
    second = turn_record(2, conversation="c-ref")
    step = "conv:tc:conv_c-ref.turn_t-0001.steps/0"
    nowhere = "conv:tc:conv_c-ref.turn_t-0001.steps/9"
    second["completion"]["text"] = f"Ran it again, as at {step}; see also {nowhere}."
    LiveWriter(settings, embed=False).record([first, second])
    wb = Workbench(settings)
    turn = wb.replay(Viewer("acme", "u-ana"), "c-ref", "t-0002")
    refs = {r.ref: r for r in turn.refs}
    assert refs[step].status == "found" and refs[step].value is not None
    recorded = json.loads(refs[step].value)  # the step as recorded
    assert (recorded["name"], recorded["status"]) == ("run_python", "completed")
    assert refs[nowhere].status == "missing" and refs[nowhere].value is None
    # another user of the tenant gets no view of the turn at all
    with pytest.raises(AccessDenied):
        wb.replay(Viewer("acme", "u-ben"), "c-ref", "t-0002")


def test_the_tenants_follow_the_lake(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    at = datetime(2026, 11, 2, 9, tzinfo=UTC)
    run_ingest(settings, records=[json.dumps(turn_record(1, at=at, prompt="p", answer="a"))],
               embed=False, index=False)
    wb = Workbench(settings)
    assert wb.tenants() == [TENANT] == wb.tenants()  # the second from what the first found
    other = {**turn_record(2, at=at, prompt="p", answer="a"), "tenant": "globex"}
    run_ingest(settings, records=[json.dumps(other)], embed=False, index=False)
    assert wb.tenants() == [TENANT, "globex"]
