"""AppTest runs of every workbench page on a seeded lake, an empty lake and a stale index."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.dataset as ds
import pyarrow.ipc as pa_ipc
import pytest
from streamlit.testing.v1 import AppTest

from app.components.hits import export_bytes, export_frame
from app.service import Workbench
from lake.embedding.hashing import HashingEmbedder
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.jobs import run_ingest
from tests.app.workbench_lake import (
    ANA,
    BEN,
    KNOWN_CONVERSATION,
    PANEL_CODE,
    PANEL_OUTPUT,
    PRIVATE_CONVERSATION,
    QUERY,
    TENANT,
    SeededLake,
    seed,
    turn_record,
)

MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"
PAGES = {"screens/search.py": "Search", "screens/replay.py": "Conversations & Replay",
         "screens/overview.py": "Overview", "screens/retention.py": "Retention",
         "screens/index_health.py": "Index health"}
TIMEOUT = 60


def _app(lake: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("TURNLAKE_LAKE", str(lake))
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_WORKBENCH_AUTH", "local")
    monkeypatch.delenv("TURNLAKE_TENANTS", raising=False)
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    # Search shows its hits as cards (the table is the default; see test_the_results_table).
    at.session_state["layout"] = "cards"
    return at


def _texts(at: AppTest) -> str:
    parts = [e.value for e in (*at.markdown, *at.caption, *at.info, *at.warning, *at.error)]
    return "\n".join(str(p) for p in parts)


def _search(at: AppTest, query: str) -> AppTest:
    at.text_input[0].input(query)
    return at.form_submit_button[0].click().run()


def assert_every_page_renders(at: AppTest) -> None:
    """Visit each page of a started app: no exception, its title, no error box."""
    assert not at.exception
    for page, title in PAGES.items():
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert [t.value for t in at.title] == [title]
        assert not at.error, (page, [e.value for e in at.error])


def test_every_page_renders(seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    assert_every_page_renders(at)
    # the sidebar names the tenants the analyst acts for
    assert "`acme`, `globex`, `initech`" in _texts(at)


def test_search_finds_the_turn_and_shows_the_services_scores(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _search(_app(seeded.settings.lake, monkeypatch).run(), QUERY)
    assert not at.exception and not at.error
    assert at.markdown[0].value == "**1. Quokka workbook**"
    caption = next(c.value for c in at.caption if f"{KNOWN_CONVERSATION} / " in c.value)
    assert f"{KNOWN_CONVERSATION} / t-0001" in caption
    assert ":orange-background[quokka]" in _texts(at)  # query terms are highlighted

    service = SearchService(LakeStore(seeded.settings.lake), embedder=HashingEmbedder(64))
    expected = service.search(SearchRequest(QUERY, Principal(TENANT, analyst=True),
                                            scope="tenant")).hits[0]
    assert (expected.conversation_id, expected.turn_id) == (KNOWN_CONVERSATION, "t-0001")
    table = at.dataframe[0].value  # the first card's ranks per generator
    by = dict(zip(table["generator"], table.itertuples(index=False), strict=True))
    for generator, rank in expected.ranks.items():
        assert rank is not None
        assert by[generator].rank == str(rank.rank)
        # rounded to 3 significant digits, never a 16-digit float
        assert by[generator].score == f"{rank.score:.3g}"
    assert "None" not in set(table["rank"]) | set(table["score"])
    fused = next(c.value for c in at.caption if c.value.startswith("relevance "))
    assert f"fused {expected.fused:.4f}" in fused and f"relevance {expected.relevance:.2f}" in fused
    assert len(at.get("vega_lite_chart")) >= 1  # the ranks' chart


def test_search_keeps_to_the_agent_asked_for(seeded: SeededLake,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    next(t for t in at.text_input if t.label == "Agent").input("react-agent")
    _search(at, QUERY)
    assert not at.exception and not at.error
    assert at.markdown[0].value == "**1. Quokka workbook**"
    next(t for t in at.text_input if t.label == "Agent").input("codex")
    at.form_submit_button[0].click().run()
    assert not at.exception
    assert not [b for b in at.button if b.label == "Open in Replay"]
    # and to the app asked for
    next(t for t in at.text_input if t.label == "Agent").input("")
    next(t for t in at.text_input if t.label == "App").input("no-such-app")
    at.form_submit_button[0].click().run()
    assert not at.exception
    assert not [b for b in at.button if b.label == "Open in Replay"]


def test_search_says_how_it_read_a_named_time(seeded: SeededLake,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    at = _search(_app(seeded.settings.lake, monkeypatch).run(), f"{QUERY} in March 2026")
    assert not at.exception and not at.error
    assert any("Read “in March 2026” as 2026-03-01 to 2026-03-31" in c.value
               for c in at.caption)
    next(n for n in at.number_input if n.label == "Named-time weight").set_value(0.0)
    at.form_submit_button[0].click().run()
    assert not any("Read “" in c.value for c in at.caption)


def test_the_when_filter_says_how_it_read_the_phrase_and_where_the_data_starts(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    when = next(t for t in at.text_input if t.label == "When")
    when.input("in March 2020")
    _search(at, QUERY)
    assert not at.exception and not at.error
    captions = [c.value for c in at.caption]
    assert "When “in March 2020” read as 2020-03-01 to 2020-03-31 (UTC days, both included)." \
        in captions
    first = LakeStore(seeded.settings.lake).read(
        Table.TURN_LOGS, columns=["started_at"], filter=ds.field("tenant") == TENANT
    )["started_at"].to_pylist()
    assert any(c.startswith(f"This view's turns start on {min(first):%Y-%m-%d}, after that")
               for c in captions)
    next(t for t in at.text_input if t.label == "When").input("last 30 days")
    at.form_submit_button[0].click().run()
    captions = [c.value for c in at.caption]
    assert any(c.startswith("When “last 30 days” read as ") for c in captions)
    assert not any(c.startswith("This view's") for c in captions)  # the data is in range


def test_a_hit_opens_in_replay_with_its_file_card(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _search(_app(seeded.settings.lake, monkeypatch).run(), QUERY)
    next(b for b in at.button if b.label == "Open in Replay").click().run()
    assert not at.exception and not at.error
    assert [t.value for t in at.title] == ["Conversations & Replay"]
    # The whole conversation, scrolled to the hit's turn, with a way back to the results.
    assert at.query_params == {"tenant": TENANT, "conversation": KNOWN_CONVERSATION,
                               "turn": "t-0001", "view": "conversation", "from": "search"}
    assert [b.label for b in at.download_button] == [
        "Download quokka-copy.csv", "Download chart.png", "Download quokka.csv",
        "Download quokka.csv"]  # the second turn's answer names the first's file
    heads = [s.value for s in at.subheader]
    assert [h.split(" · ")[0] for h in heads[1:]] == ["#1", "#2"]
    assert "from the search" in heads[1] and "from the search" not in heads[2]
    assert "April is fine" in _texts(at)  # the second turn, in the same scroll
    assert any(p.label == "Back to the results" for p in at.get("page_link"))
    text = _texts(at)
    assert "**quokka\\.csv** · text/csv · 22 B" in text
    assert "corrected quokka hours" in text
    assert [m.avatar for m in at.chat_message] == ["user", "assistant"] * 2
    assert "actually, use UTC everywhere" in text  # the steer message of the turn


def test_deep_link_opens_a_turn(seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.query_params = {"conversation": KNOWN_CONVERSATION, "turn": "t-0002"}
    at.switch_page("screens/replay.py").run()
    assert not at.exception and not at.error
    assert [t.value for t in at.title] == ["Conversations & Replay"]
    assert "April is fine" in _texts(at)
    # turn 2 hosts no file; its answer names turn 1's file by ref: a download through the
    # resolver, and the ref itself is not shown raw
    assert [b.label for b in at.download_button] == ["Download quokka.csv"]
    assert "conv:fi:" not in "".join(m.value for m in at.markdown)
    # Next / Previous step through the conversation
    next(b for b in at.button if b.label == "◀ Previous").click().run()
    assert at.query_params["turn"] == "t-0001"
    assert "Download chart.png" in [b.label for b in at.download_button]


def test_view_as_user_cannot_reach_another_users_conversation(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch)
    at.session_state["wb_tenant"] = TENANT
    at.session_state["wb_view_as_on"] = True
    at.session_state["wb_view_as_user"] = ANA
    at.run()
    at.query_params = {"conversation": PRIVATE_CONVERSATION, "turn": "t-0003"}
    at.switch_page("screens/replay.py").run()
    assert not at.exception
    assert "Reading as **user u-wb-ana of acme**" in _texts(at)
    errors = [e.value for e in at.error]
    assert errors and "may not read conversation" in errors[0]
    assert "zanzibar" not in _texts(at)
    assert not at.chat_message
    listing = at.dataframe[0].value
    assert set(listing["user_id"]) == {ANA}

    at.switch_page("screens/search.py").run()
    # No tenant scope for an end user: the scope is fixed to the user's own turns (the same
    # options as an analyst's, so that switching the view resets no widget).
    scope = next(s for s in at.selectbox if s.label == "Scope")
    assert scope.disabled and set(scope.options) == {"own turns"}
    _search(at, "zanzibar budget secret")
    assert not at.exception
    assert PRIVATE_CONVERSATION not in _texts(at)
    assert BEN not in _texts(at)


def test_empty_lake_says_so_on_every_page(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(tmp_path / "empty", monkeypatch).run()
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page
        assert any("holds no conversations yet" in i.value and "turnlake demo" in i.value
                   for i in at.info), page


def test_stale_index_is_reported_not_raised(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    lake = seed(tmp_path / "lake", demo_turns=0)
    later = turn_record(9, at=lake.now - timedelta(days=2), prompt="a late quokka question",
                        answer="a late answer")
    run_ingest(Settings(lake=lake.settings.lake, embedding_model="hashing-64"),
               records=[json.dumps(later)], index=False)
    month = (lake.now - timedelta(days=2)).astimezone(UTC).strftime("%Y-%m")
    at = _search(_app(lake.settings.lake, monkeypatch).run(), "quokka")
    assert not at.exception
    assert any("stale" in w.value and "turnlake index build" in w.value for w in at.warning)
    at.switch_page("screens/index_health.py").run()
    assert not at.exception
    assert any(f"**{TENANT}/{month}** is stale" in w.value for w in at.warning)
    assert f"turnlake index build --tenant {TENANT} --month {month}" in [c.value for c in at.code]
    table = next(d for d in at.dataframe if "state" in d.value)
    assert "stale" in set(table.value["state"])
    # the stale row is highlighted (the Styler reached the table as its style)
    styled = table.proto.arrow_data.styler
    assert "#fff3bf" in styled.styles
    assert "None" not in table.value.astype(str).to_numpy().ravel().tolist()
    # a user view: the user's rows, none of the tenant-wide index figures
    at.query_params = {"tenant": TENANT, "as_user": ANA}
    at.switch_page("screens/index_health.py").run()
    table = next(d for d in at.dataframe if "state" in d.value)
    assert "index size" not in table.value.columns and "index rows" not in table.value.columns


def test_retention_previews_the_purge(seeded: SeededLake,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.switch_page("screens/retention.py").run()
    assert not at.exception
    preview = at.dataframe[-1].value
    counts = dict(zip(preview["table"], preview["rows to purge"], strict=True))
    assert counts["turn_logs"] >= 1 and counts["content_rows"] >= 2
    assert any("c-wb-expired" in set(d.value.get("conversation_id", []))
               for d in at.dataframe if "conversation_id" in d.value)
    purge = next(b for b in at.button if b.label == "Purge expired rows")
    assert purge.disabled


def test_overview_counts_the_tenants_turns(seeded: SeededLake,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.switch_page("screens/overview.py").run()
    next(s for s in at.selectbox if s.label == "Window").select("all time").run()
    assert not at.exception
    stored = LakeStore(seeded.settings.lake).read(
        Table.TURN_LOGS, columns=["turn_id"], filter=ds.field("tenant") == TENANT).num_rows
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Turns"] == f"{stored:,}"
    # per day, then the open tab's 5 daily trends (tokens, cost, duration, feedback rate,
    # interrupted or failed completions)
    assert len(at.get("vega_lite_chart")) == 6
    at.session_state["overview_tab"] = "Roles, writers, feedback"
    at.run()
    assert len(at.get("vega_lite_chart")) == 4  # per day; roles, writers, feedback
    # A date range: only the known turns' days (two and five days before the seeding).
    next(s for s in at.selectbox if s.label == "Window").select("date range").run()
    day = (seeded.now - timedelta(days=2)).date()
    next(d for d in at.date_input if d.label.startswith("From")).set_value((day, day)).run()
    assert not at.exception and not at.error
    in_range = LakeStore(seeded.settings.lake).read(
        Table.TURN_LOGS, columns=["started_at"], filter=ds.field("tenant") == TENANT
    )["started_at"].to_pylist()
    expected = sum(1 for t in in_range if t.astimezone(UTC).date() == day)
    assert {m.label: m.value for m in at.metric}["Turns"] == f"{expected:,}"


def test_overview_splits_by_user_and_opens_top_users_and_failed_turns(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.switch_page("screens/overview.py").run()
    next(s for s in at.selectbox if s.label == "Window").select("all time").run()
    next(r for r in at.radio if r.label == "Split turns by").set_value("user").run()
    assert not at.exception and not at.error
    assert any(s.value == "Turns per day by user" for s in at.subheader)
    assert not at.dataframe  # the daily trends' tab: nothing else is read or drawn
    at.session_state["overview_tab"] = "Top users and apps"
    at.run()
    tables = [d.value for d in at.dataframe]
    users = next(t for t in tables if "user" in t.columns and "negative" in t.columns)
    stored = LakeStore(seeded.settings.lake).read(
        Table.TURN_LOGS, columns=["user_id"], filter=ds.field("tenant") == TENANT)
    top = pl.from_arrow(stored)["user_id"].value_counts().sort("count", descending=True)
    assert users["turns"].iloc[0] == top["count"][0]
    assert set(users["user"]) <= set(top["user_id"])
    at.session_state["overview_tab"] = "Failure review"
    at.run()
    assert not at.exception
    failures = next(d.value for d in at.dataframe if "failed_steps" in d.value.columns)
    assert len(failures) > 0 and all((failures["failed_steps"] != "")
                                     | (failures["feedback"] == "negative"))
    # A failure's row picked: its turn in the whole conversation, with a way back.
    row = failures.iloc[0]
    at.session_state["wb_open_turn"] = (row["conversation_id"], row["turn_id"])
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Conversations & Replay"]
    assert at.query_params["turn"] == row["turn_id"] and at.query_params["from"] == "overview"
    assert any(p.label == "Back to the Overview" for p in at.get("page_link"))
    assert any("from the overview" in s.value for s in at.subheader)


def test_tenants_come_from_the_setting(seeded: SeededLake,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch)
    monkeypatch.setenv("TURNLAKE_TENANTS", "globex, nowhere")
    at.run()
    tenant = next(s for s in at.sidebar.selectbox if s.label == "Tenant")
    assert tenant.options == ["globex", "nowhere"]
    tenant.select("nowhere").run()
    for page in PAGES:  # a configured tenant without data shows empty states, not errors
        at.switch_page(page).run()
        assert not at.exception and not at.error, page
    monkeypatch.setenv("TURNLAKE_TENANTS", "bad tenant!")
    at.run()
    assert any("invalid tenant" in e.value for e in at.error)


def test_retention_purge_needs_confirmation_and_writes_an_audit_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime, timedelta

    from pipeline.jobs import run_ingest
    from tests.factories import make_record, write_jsonl

    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    old = datetime.now(UTC) - timedelta(days=10)
    run_ingest(settings, [write_jsonl(tmp_path / "in.jsonl", [
        make_record(0, at=old, ttl_days=1), make_record(1, at=old)])])
    at = _app(settings.lake, monkeypatch)
    at.switch_page("screens/retention.py").run()
    purge = next(b for b in at.button if b.label == "Purge expired rows")
    assert purge.disabled  # no confirmation yet
    next(c for c in at.checkbox if c.label.startswith("I understand")).check().run()
    next(b for b in at.button if b.label == "Purge expired rows").click().run()
    assert any("Purged" in s.value for s in at.success)
    assert not at.exception
    from lake.deletion.audit import read_audit
    from lake.store import LakeStore

    assert [e.action for e in read_audit(LakeStore(settings.lake))] == ["purge"]
    # The page was read afresh: no preview of purged rows, no ticked box, no button, and
    # the audit log shows the purge.
    preview = next(d.value for d in at.dataframe if "rows to purge" in d.value)
    assert set(preview["rows to purge"]) == {0}
    assert not [c for c in at.checkbox if c.label.startswith("I understand")]
    assert not [b for b in at.button if b.label == "Purge expired rows"]
    assert any("nothing to purge" in c.value for c in at.caption)
    audit = at.dataframe[-1].value
    assert list(audit["action"]) == ["purge"]
    at.switch_page("screens/index_health.py").run()
    assert not at.exception and not at.error
    # Compact enough for a 1,400 px window: both versions in one column, one model said once.
    columns = list(at.dataframe[0].value.columns)
    assert "versions" in columns and "model" not in columns and "index version" not in columns
    assert any(c.value.startswith("Every index holds vectors of the model") for c in at.caption)


def test_view_as_from_the_url_survives_every_page(seeded: SeededLake,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch)
    at.query_params = {"tenant": TENANT, "as_user": ANA}
    at.run()
    for page in [*PAGES, *PAGES]:
        at.switch_page(page).run()
        assert not at.exception, page
        assert "Reading as **user u-wb-ana of acme**" in _texts(at), page
        assert at.query_params["tenant"] == TENANT and at.query_params["as_user"] == ANA
    # The sidebar turns it off: every page is the analyst's again, and so is the URL.
    next(t for t in at.sidebar.toggle if t.label == "View as user").set_value(False).run()
    at.switch_page("screens/overview.py").run()
    assert "Reading as **analyst of acme**" in _texts(at)
    assert "as_user" not in at.query_params


def test_a_selection_of_another_tenant_is_closed_with_a_note(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.query_params = {"tenant": TENANT, "conversation": KNOWN_CONVERSATION, "turn": "t-0001"}
    at.switch_page("screens/replay.py").run()
    assert "Converted the" in _texts(at)
    next(s for s in at.sidebar.selectbox if s.label == "Tenant").select("globex").run()
    assert not at.exception and not at.error
    assert any(KNOWN_CONVERSATION in i.value and "was closed" in i.value for i in at.info)
    assert "Converted the" not in _texts(at)
    assert at.query_params.get("tenant") == "globex"
    # Ids, never labels: picking another conversation opens it by its id.
    listing = next(d.value for d in at.dataframe if "conversation_id" in d.value)
    other = str(listing["conversation_id"].iloc[-1])
    next(s for s in at.selectbox if s.label == "Conversation").set_value(other).run()
    assert not at.exception and not at.error
    assert at.query_params["conversation"] == other


def test_replay_renders_panels_badges_links_and_images(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.query_params = {"conversation": KNOWN_CONVERSATION, "turn": "t-0001"}
    at.switch_page("screens/replay.py").run()
    assert not at.exception and not at.error
    codes = {(c.value, c.language) for c in at.code}
    assert (PANEL_CODE, "python") in codes and (PANEL_OUTPUT, "text") in codes
    text = _texts(at)
    assert ":blue-badge[cost · \\$0.0100 · 200 tokens]" in text
    assert "[tz docs](https://example.com/tz)" in text
    assert "+0.0 s" in text and "run\\_python" in text  # the steps timeline
    assert [i.captions for i in at.get("image")] == [["chart.png"]]  # the PNG preview
    other = next(d.value for d in at.dataframe if "type" in d.value)
    assert list(other["type"]) == ["canvas.opened"]  # unknown types: compact rows


def test_search_messages_paging_and_export(seeded: SeededLake,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    _search(at, "?!… ***")
    assert any("the query has no words to search" in e.value for e in at.error)
    assert not [b for b in at.button if b.label == "Open in Replay"]
    long = "quokka " + "x" * 5000
    _search(at, long)
    echo = " ".join(c.value for c in [*at.caption, *at.info])
    assert "quokka" in echo and long not in echo and "…" in echo
    # Nothing relevant: the empty state says the floor left the nearest turns out.
    _search(at, "zqxv wpfk")
    assert any("fell below the relevance floor 0.5" in i.value for i in at.info)
    assert not [b for b in at.button if b.label == "Open in Replay"]
    # Paging needs more turns than the floor lets through for a vague query.
    next(n for n in at.number_input if n.label == "Relevance floor").set_value(0.0)
    _search(at, "the answer")
    opened = [b for b in at.button if b.label == "Open in Replay"]
    assert len(opened) == 10
    assert [b.label for b in at.download_button] == [
        "Export CSV", "Export JSONL", "Export Parquet"]
    next(b for b in at.button if b.label == "Show 20 more").click().run()
    assert not at.exception
    # k = 10 and 20 more: 30 asked for and on show, never more than asked
    shown = len([b for b in at.button if b.label == "Open in Replay"])
    outcome = at.session_state["wb_last_search"]
    assert 10 < shown <= 30 and outcome.form.k == 30 and shown == len(outcome.hits)
    assert not any("fewer than k = 40" in i.value for i in at.info)
    frame = export_frame(outcome.hits)  # the export: every hit up to k, rounded
    assert frame.height == len(outcome.hits)
    assert set(frame["tenant"]) == {TENANT}
    assert {"semantic_rank", "lexical_rank", "trigram_rank", "user_snippet",
            "assistant_snippet", "relevance", "agent", "app", "address"} <= set(frame.columns)
    assert all(frame["agent"]) and all(a.startswith("conv:") for a in frame["address"])
    # each card shows its row's and turn's addresses as copyable code
    shown_addresses = {c.value for c in at.code}
    assert set(frame["address"]) <= shown_addresses
    assert any(a.startswith("conv:ar:") for a in shown_addresses)
    assert all(len(repr(v).split(".")[-1]) <= 6 for v in frame["score"])
    assert pl.read_parquet(io.BytesIO(export_bytes(frame, "parquet"))).equals(frame)
    assert pl.read_ndjson(io.BytesIO(export_bytes(frame, "jsonl"))).height == frame.height
    for toggle in at.toggle:
        if toggle.label in ("Semantic", "Lexical (BM25)", "Trigram"):
            toggle.set_value(False)
    at.form_submit_button[0].click().run()
    assert any("switched off or weighted 0" in i.value for i in at.info)
    assert not any("No turn matches" in i.value for i in at.info)


def test_untitled_conversations_show_their_first_prompt(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _search(_app(seeded.settings.lake, monkeypatch).run(), "wallaby export stall")
    assert at.markdown[0].value == "**1. why does the wallaby export stall at night?**"


def test_the_whole_conversation_view_lists_every_turn_with_its_steps(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.query_params = {"conversation": KNOWN_CONVERSATION, "turn": "t-0002",
                       "view": "conversation"}
    at.switch_page("screens/replay.py").run()
    assert not at.exception and not at.error
    assert next(r for r in at.radio if r.label == "Show").value == "Whole conversation"
    assert [s.value.split(" · ")[0] for s in at.subheader[1:]] == ["#1", "#2"]
    text = _texts(at)
    assert "timezone drift" in text and "April is fine" in text
    assert len(at.get("vega_lite_chart")) == 1  # the first turn's step on its waterfall
    assert not any(p.label == "Back to the results" for p in at.get("page_link"))
    # One cost (the recorded badge, not the usage figure again); tokens with separators.
    assert "cost · \\$0.0100 · 200 tokens" in text and ":gray-badge[\\$0.0100]" not in text
    assert "tokens 120 in / 80 out" in text
    next(r for r in at.radio if r.label == "Show").set_value("One turn").run()
    assert "view" not in at.query_params
    assert [s.value for s in at.subheader] == ["Quokka workbook"]


def test_a_long_conversation_is_paged_at_the_linked_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import datetime

    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    start = datetime.now(UTC) - timedelta(days=1)
    records = [json.dumps(turn_record(n, at=start + timedelta(minutes=n), conversation="c-long",
                                      prompt=f"question number {n}", answer=f"answer {n}"))
               for n in range(1, 24)]
    run_ingest(settings, records=records)
    at = _app(settings.lake, monkeypatch).run()
    at.query_params = {"conversation": "c-long", "turn": "t-0022", "view": "conversation"}
    at.switch_page("screens/replay.py").run()
    assert not at.exception and not at.error
    pager = next(s for s in at.selectbox if s.label == "Turns")
    assert pager.value == 1 and pager.options == ["1–20 of 23", "21–23 of 23"]
    assert [s.value.split(" · ")[0] for s in at.subheader[1:]] == ["#21", "#22", "#23"]
    pager.select(0).run()
    assert len(at.subheader[1:]) == 20 and "question number 1" in _texts(at)


def test_a_search_url_reproduces_the_search_and_the_form_survives_other_pages(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch)
    at.query_params = {"q": QUERY, "k": "3", "floor": "0", "scope": "tenant"}
    at.run()
    assert not at.exception and not at.error
    assert at.markdown[0].value == "**1. Quokka workbook**"
    assert at.text_input(key="q").value == QUERY
    assert at.number_input(key="k").value == 3
    outcome = at.session_state["wb_last_search"]
    assert outcome.form.k == 3 and outcome.form.min_relevance == 0.0
    assert len([b for b in at.button if b.label == "Open in Replay"]) == 3
    at.switch_page("screens/overview.py").run()
    at.switch_page("screens/search.py").run()
    assert at.text_input(key="q").value == QUERY and at.number_input(key="k").value == 3
    assert at.markdown[0].value == "**1. Quokka workbook**"
    assert at.session_state["wb_last_search"] is outcome  # shown again, not searched again


def test_a_hit_names_a_hosted_file_not_its_ref(seeded: SeededLake,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    at = _search(_app(seeded.settings.lake, monkeypatch).run(), "corrected sheet April")
    assert not at.exception and not at.error
    text = _texts(at)
    assert "conv:fi:" not in text, text
    assert "quokka\\.csv" in text or "quokka.csv" in text, text


def test_the_conversation_list_stays_open_while_it_is_filtered_or_paged(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    at.switch_page("screens/replay.py").run()  # /replay without a conversation
    assert at.expander[0].label == "Conversations" and at.expander[0].proto.expanded
    next(s for s in at.selectbox if s.label == "User").select(ANA).run()
    assert not at.exception and at.expander[0].proto.expanded
    next(b for b in at.button if b.label == "Older ▶")  # the pager is there to use
    next(t for t in at.text_input if t.label == "Title or id contains").input("quokka").run()
    assert at.expander[0].proto.expanded


def _chart_rows(chart: Any) -> list[dict[str, Any]]:
    """The rows a drawn chart was sent (its data, or its named datasets), as Arrow wrote
    them for the browser."""
    sent = [chart.proto.data, *(named.data for named in chart.proto.datasets)]
    return [row for arrow in sent if arrow.data
            for row in pa_ipc.open_stream(arrow.data).read_all().to_pylist()]


def _ended(turn: int, status: str, at: datetime) -> str:
    """A turn whose completion was cut short (``status``: interrupted or failed)."""
    return json.dumps(turn_record(
        turn, at=at, conversation=f"c-wb-{status}", conversation_title=f"An {status} turn",
        prompt=f"the {status} numbat report", answer="",
        completion={"text": "", "at": (at + timedelta(seconds=3)).isoformat(),
                    "status": status}))


def test_the_overview_reviews_interrupted_and_failed_completions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = seed(tmp_path / "lake", demo_turns=20, index=False)
    day = lake.now - timedelta(days=1)
    run_ingest(lake.settings, records=[_ended(7, "interrupted", day),
                                       _ended(8, "failed", day + timedelta(minutes=5))],
               embed=False, index=False)
    at = _app(lake.settings.lake, monkeypatch).run()
    at.switch_page("screens/overview.py").run()
    next(s for s in at.selectbox if s.label == "Window").select("all time").run()
    assert not at.exception and not at.error
    # The daily share: the day of the two cut-short turns has a share above zero.
    share = next(c for c in at.get("vega_lite_chart")
                 if "completions interrupted or failed" in c.proto.spec)
    rates = {str(row["day"])[:10]: row["unfinished_rate"] for row in _chart_rows(share)}
    stored = LakeStore(lake.settings.lake).read(
        Table.TURN_LOGS, columns=["started_at"], filter=ds.field("tenant") == TENANT)
    that_day = sum(1 for t in stored["started_at"].to_pylist()
                   if t.astimezone(UTC).date() == day.date())
    assert rates[f"{day.date()}"] == pytest.approx(2 / that_day)
    at.session_state["overview_tab"] = "Failure review"
    at.run()
    failures = next(d.value for d in at.dataframe if "completion" in d.value.columns)
    cut_short = failures[failures["completion"].isin(["interrupted", "failed"])]
    assert sorted(zip(cut_short["conversation_id"], cut_short["completion"], strict=True)) == [
        ("c-wb-failed", "failed"), ("c-wb-interrupted", "interrupted")]
    # Its row picked: the interrupted turn in its conversation, marked so.
    row = cut_short[cut_short["completion"] == "interrupted"].iloc[0]
    at.session_state["wb_open_turn"] = (row["conversation_id"], row["turn_id"])
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Conversations & Replay"]
    assert at.query_params["conversation"] == "c-wb-interrupted"
    assert "interrupted before the answer" in _texts(at)


def test_the_conversation_list_of_a_day_shows_its_filter_and_drops_it(
        seeded: SeededLake, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(seeded.settings.lake, monkeypatch).run()
    day = (seeded.now - timedelta(days=2)).date()
    # What a click on that day's support-desk bar in Overview leaves for the list.
    at.session_state["conv_day"] = day
    at.session_state["conv_app"] = "support-desk"
    at.switch_page("screens/replay.py").run()
    assert not at.exception and at.expander[0].proto.expanded
    picker = next(d for d in at.date_input if d.label == "Active on (UTC day)")
    assert picker.value == day
    caption = next(c.value for c in at.caption if c.value.startswith("Conversations "))
    assert f"active on {day:%Y-%m-%d} (UTC)" in caption
    listing = next(d.value for d in at.dataframe if "turn_count" in d.value.columns)
    wb = Workbench(seeded.settings)
    active = {t.conversation_id for t in wb.catalog.between(
        Principal(TENANT, analyst=True), datetime.combine(day, time.min, UTC),
        datetime.combine(day, time.min, UTC) + timedelta(days=1))}
    assert KNOWN_CONVERSATION in set(listing["conversation_id"])
    assert set(listing["conversation_id"]) <= active
    assert set(listing["app"]) == {"support-desk"}
    # The filter is removable: every day's conversations of the app again.
    next(b for b in at.button if b.label.endswith("any day")).click().run()
    assert not at.exception
    assert next(d for d in at.date_input if d.label == "Active on (UTC day)").value is None
    wider = next(d.value for d in at.dataframe if "turn_count" in d.value.columns)
    assert len(wider) > len(listing)
    assert not any(b.label.endswith("any day") for b in at.button)
