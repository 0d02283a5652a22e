"""The workbench in a real browser: `streamlit run` on a seeded lake, driven by Chromium.

Uses Debian's Chromium (never a downloaded browser); skipped only when /usr/bin/chromium is
absent (`apt-get install -y chromium`).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bench.workbench_idle import free_port, start_workbench
from lake.search.access import Principal
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.store import LakeStore
from tests.app.workbench_lake import (
    ANA,
    FILE_BYTES,
    FILE_REF,
    KNOWN_CONVERSATION,
    PANEL_CODE,
    PANEL_OUTPUT,
    QUERY,
    TENANT,
    SeededLake,
    seed,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking"]
WAIT_MS = 90_000  # a page on a busy 2-core machine (CI ran other jobs beside the suite)
# Loading the packaged sentence-transformers model on a busy machine.
MODEL_WAIT_MS = 180_000
PAGES = (("", "Search"), ("replay", "Conversations & Replay"), ("overview", "Overview"),
         ("retention", "Retention"), ("index-health", "Index health"))


@contextmanager
def _streamlit(lake: Path | str, log: Path, *, model: str | None = "hashing-64",
               env: dict[str, str] | None = None, port: int | None = None) -> Iterator[str]:
    """`streamlit run app/main.py` on a free loopback port against ``lake``; its base URL."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium "
                    "(apt-get install -y chromium)")
    extra = {**({"TURNLAKE_EMBEDDING_MODEL": model} if model is not None else {}),
             **(env or {})}
    proc, url = start_workbench(lake, log, extra, port=port)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(seeded: SeededLake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The workbench on the shared seeded lake (read only)."""
    with _streamlit(seeded.settings.lake,
                    tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@contextmanager
def _browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900},
                                    accept_downloads=True)
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            browser.close()


def _search(page: Any, query: str) -> None:
    _settled(page)
    page.get_by_label("Query").fill(query)
    page.get_by_role("button", name="Search", exact=True).click()


def _as_cards(page: Any, timeout: float = WAIT_MS) -> None:
    """Show the hits as cards (the table draws its cells on a canvas, out of a locator's
    reach); the choice stays in the URL and the session."""
    _settled(page, timeout)
    page.get_by_test_id("stButtonGroup").get_by_text("Cards", exact=True).click(
        timeout=timeout)


def _wait_for_input(page: Any, value: str) -> None:
    """Until an input holds ``value`` (a bound widget gets its value a moment after the
    results are drawn)."""
    page.wait_for_function("v => [...document.querySelectorAll('input')].some("
                           "i => i.value === v)", arg=value)


def _wait_for_link(page: Any, path: str, **params: str) -> None:
    """Until the page's URL is ``path`` with (at least) ``params``, in any order; a timeout
    fails naming the URL the page was at."""
    want = {"path": path, "params": params}
    try:
        page.wait_for_function(
            "w => location.pathname.endsWith(w.path) && Object.entries(w.params).every("
            "([k, v]) => new URLSearchParams(location.search).get(k) === v)", arg=want)
    except Exception as exc:  # Playwright's TimeoutError: say where the page was instead
        raise AssertionError(f"the page stayed at {page.url}, not {path} with {params}") from exc


def test_search_replay_download_and_every_page(server: str, seeded: SeededLake,
                                               tmp_path: Path) -> None:
    with _browser() as page:
        page.goto(server)
        page.get_by_role("heading", name="Search").wait_for()
        _search(page, QUERY)
        _as_cards(page)
        page.get_by_text("1. Quokka workbook").wait_for()
        page.screenshot(path=tmp_path / "search.png")
        # The settings are in the URL: a reload (a new session) reproduces the search.
        page.wait_for_url(re.compile(r"[?&]q=quokka"))
        page.reload()
        page.get_by_text("1. Quokka workbook").wait_for()
        _wait_for_input(page, QUERY)

        _settled(page)  # click a page whose run has ended: CI lost clicks sent mid-run
        page.get_by_role("button", name="Open in Replay").first.click()
        page.get_by_role("heading", name="Conversations & Replay").wait_for()
        # The whole conversation: the hit's turn (its file card first) and the next one.
        download_button = page.get_by_role("button", name="Download quokka.csv").first
        download_button.wait_for()
        page.get_by_text("April is fine.").wait_for()
        back = page.get_by_role("link", name="Back to the results")
        back.wait_for()
        _wait_for_link(page, "/replay", conversation=KNOWN_CONVERSATION, turn="t-0001")
        page.screenshot(path=tmp_path / "replay.png")
        with page.expect_download() as info:
            download_button.click()
        got = Path(info.value.path()).read_bytes()
        _, resolved = TurnMaterializer(LakeStore(seeded.settings.lake)).resolve(
            Principal(TENANT, analyst=True), FILE_REF)
        assert got == resolved == FILE_BYTES
        assert info.value.suggested_filename == "quokka.csv"

        _settled(page)
        back.click()  # the results and the form as they were
        page.get_by_text("1. Quokka workbook").wait_for()
        _wait_for_input(page, QUERY)
        page.goto(f"{server}/replay?conversation={KNOWN_CONVERSATION}&turn=t-0002")
        page.get_by_text("April is fine.").wait_for()

        for path, title, shot in (("overview", "Overview", "overview.png"),
                                  ("retention", "Retention", "retention.png"),
                                  ("index-health", "Index health", "index_health.png")):
            page.goto(f"{server}/{path}")
            page.get_by_role("heading", name=title).wait_for()
            page.wait_for_selector(".stVegaLiteChart, [data-testid='stVegaLiteChart']")
            assert page.get_by_text("Page not found").count() == 0
            page.screenshot(path=tmp_path / shot, full_page=True)
        page.goto(f"{server}/search")
        page.get_by_role("heading", name="Search").wait_for()
        assert page.get_by_text("Page not found").count() == 0
    for name in ("search", "replay", "overview", "retention", "index_health"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


def test_view_as_survives_navigating_every_page(server: str) -> None:
    reading = f"Reading as user {ANA} of {TENANT}"
    with _browser() as page:
        page.goto(f"{server}/?tenant={TENANT}&as_user={ANA}")
        page.get_by_role("heading", name="Search").wait_for()
        page.get_by_text(reading).wait_for()
        sidebar = page.locator("[data-testid='stSidebar']")
        for _ in range(2):
            for _, title in (*PAGES[1:], PAGES[0]):
                _settled(page)  # click a page whose run has ended: CI lost clicks sent mid-run
                sidebar.get_by_role("link", name=title).click()
                page.get_by_role("heading", name=title).wait_for()
                page.get_by_text(reading).wait_for()
                page.wait_for_url(re.compile(rf"[?&]as_user={ANA}"))
        # A page of the user view shows only that user's conversations.
        _settled(page)  # click a page whose run has ended: CI lost clicks sent mid-run
        sidebar.get_by_role("link", name="Conversations & Replay").click()
        page.get_by_role("heading", name="Conversations & Replay").wait_for()
        page.get_by_text(reading).wait_for()
        assert page.get_by_text("may not read").count() == 0


def _settled(page: Any, timeout: float = WAIT_MS) -> None:
    """Until Streamlit has finished the run (and the URL write that ends it)."""
    running = "[data-testid='stStatusWidget']"
    page.wait_for_selector(running, state="detached", timeout=timeout)
    page.wait_for_timeout(700)
    page.wait_for_selector(running, state="detached", timeout=timeout)


def test_each_sidebar_change_is_one_history_entry(server: str) -> None:
    with _browser() as page:
        page.goto(server)
        page.get_by_role("heading", name="Search").wait_for()
        _settled(page)
        length = page.evaluate("history.length")  # a first visit names no identity: none
        sidebar = page.locator("[data-testid='stSidebar']")

        def one_more(reading: str, path: str) -> None:
            nonlocal length
            page.get_by_text(reading).wait_for()
            _settled(page)
            length += 1
            assert page.evaluate("history.length") == length, (reading, page.url)
            assert re.search(path, page.url), page.url

        sidebar.get_by_text("View as user").click()
        one_more("Reading as user", r"/\?tenant=acme&as_user=")
        sidebar.locator("[data-testid='stSelectbox']").nth(1).click()
        page.get_by_role("option", name=ANA).click()
        one_more(f"Reading as user {ANA}", rf"as_user={ANA}")
        for title, path in (("Overview", "/overview"), ("Conversations & Replay", "/replay")):
            sidebar.get_by_role("link", name=title).click()
            page.get_by_role("heading", name=title).wait_for()
            one_more(f"Reading as user {ANA}", rf"{path}\?tenant=acme&as_user={ANA}$")
        sidebar.get_by_text("View as user").click()
        one_more(f"Reading as analyst of {TENANT}", r"/replay\?tenant=acme$")
        page.go_back()  # one step back: the user view again
        page.get_by_text(f"Reading as user {ANA}").wait_for()


def test_a_results_table_row_opens_its_turn(server: str) -> None:
    with _browser() as page:
        page.goto(f"{server}/?q={QUERY.replace(' ', '+')}&scope=tenant")
        page.get_by_text("turns for").wait_for()
        _settled(page)
        grid = page.locator("[data-testid='stDataFrame']").first
        grid.scroll_into_view_if_needed()
        table = grid.bounding_box()
        assert table is not None
        # The first row's selection box, at the table's left edge under its header.
        _settled(page)
        page.mouse.click(table["x"] + 12, table["y"] + 38 + 17)
        page.get_by_role("heading", name="Conversations & Replay").wait_for()
        _wait_for_link(page, "/replay", conversation=KNOWN_CONVERSATION, turn="t-0001")
        _settled(page)
        page.get_by_role("link", name="Back to the results").click()
        page.get_by_text("turns for").wait_for()
        _settled(page)
        assert "/replay" not in page.url  # the table opened nothing again


def test_a_days_bar_opens_that_days_conversations(server: str) -> None:
    with _browser() as page:
        page.goto(f"{server}/overview")
        page.get_by_role("heading", name="Turns per day by app").wait_for()
        _settled(page)
        # Vega draws the bars as SVG marks, each named by its tooltip's fields.
        bars = page.locator("[data-testid='stVegaLiteChart']").first.locator(
            "[aria-roledescription='bar']")
        bars.first.wait_for()
        heights = [(bars.nth(i).bounding_box() or {"height": 0.0})["height"]
                   for i in range(bars.count())]
        bar = bars.nth(heights.index(max(heights)))
        label = bar.get_attribute("aria-label") or ""
        # "day: Dec 05; turns: 4; app: support-desk" (the axis' format names no year)
        shown = re.search(r"day: (\w{3}) (\d{2})", label)
        app = re.search(r"app: ([\w-]+)", label)
        assert shown and app, label
        month = datetime.strptime(shown[1], "%b").month
        bar.click()
        page.get_by_role("heading", name="Conversations & Replay").wait_for()
        caption = page.get_by_text(re.compile(
            rf"of [\d,]+ active on \d{{4}}-{month:02d}-{shown[2]} \(UTC\)"))
        caption.wait_for()
        day = re.search(r"active on (\d{4})-(\d{2})-(\d{2})", caption.inner_text())
        assert day is not None
        clear = page.get_by_role("button", name=f"✕ {day[0][10:]}: any day")
        clear.wait_for()
        year, month, mday = int(day[1]), int(day[2]), int(day[3])
        for part, value in (("year", year), ("month", month), ("day", mday)):
            field = page.get_by_role("spinbutton", name=f"{part}, Active on (UTC day)")
            assert field.get_attribute("aria-valuenow") == str(value)
        apps = page.locator("[data-testid='stSelectbox']").filter(has_text="App")
        assert apps.first.locator("input").input_value() == app[1]
        _settled(page)
        clear.click()
        page.get_by_text(re.compile(r"Conversations \d+–\d+ of [\d,]+ \(untitled")).wait_for()
        page.get_by_role("button", name=re.compile("any day")).wait_for(state="detached")
        # Back in Overview the chart opens nothing by itself.
        _settled(page)  # click a page whose run has ended: CI lost clicks sent mid-run
        page.locator("[data-testid='stSidebar']").get_by_role("link", name="Overview").click()
        page.get_by_role("heading", name="Turns per day by app").wait_for()
        _settled(page)
        assert "/overview" in page.url


def test_the_conversation_view_lists_every_turn_with_its_steps(server: str,
                                                               seeded: SeededLake) -> None:
    store = LakeStore(seeded.settings.lake)
    analyst = Principal(TENANT, analyst=True)
    catalog, materializer = TurnCatalog(store), TurnMaterializer(store)
    # The demo conversation of the tenant with the most turns (one page of them) whose turns
    # carry steps.
    chosen: tuple[str, list[Any], list[list[str]]] | None = None
    for entry in catalog.conversations(analyst):
        turns = catalog.turns(analyst, entry.conversation_id)
        if not 3 <= len(turns) <= 20 or (chosen is not None and len(turns) <= len(chosen[1])):
            continue
        steps = [[s.name for s in materializer.turn(analyst, entry.conversation_id,
                                                    t.turn_id).parts().steps] for t in turns]
        if sum(1 for names in steps if names) >= 2:
            chosen = (entry.conversation_id, turns, steps)
    assert chosen is not None, "the seeded lake has no conversation with steps"
    cid, turns, steps = chosen
    with _browser() as page:
        page.goto(f"{server}/replay?conversation={cid}&turn={turns[0].turn_id}"
                  "&view=conversation")
        page.get_by_role("heading", name="Conversations & Replay").wait_for()
        page.get_by_text(f"{len(turns)} turns · user").wait_for()
        main = page.locator("[data-testid='stMain']")
        for turn in turns:
            main.get_by_role("heading", name=re.compile(
                rf"^#{turn.ordinal} · {turn.started_at:%Y-%m-%d %H:%M}")).wait_for()
        expanders = main.locator("[data-testid='stExpander']").filter(
            has_text=re.compile(r"Steps \(\d+\)"))
        labels = [re.search(r"Steps \((\d+)\)", expanders.nth(i).inner_text())
                  for i in range(expanders.count())]
        assert [int(m[1]) for m in labels if m is not None] == [
            len(names) for names in steps if names]
        text = main.inner_text()
        for names in steps:
            for name in names:
                assert name in text


def test_replay_renders_a_code_panel_and_a_badge(server: str, tmp_path: Path) -> None:
    with _browser() as page:
        page.goto(f"{server}/replay?conversation={KNOWN_CONVERSATION}&turn=t-0001")
        page.get_by_role("heading", name="Conversations & Replay").wait_for()
        page.get_by_text("tz docs").wait_for()
        # Highlighted code is split into token spans: read the code blocks' own text, once the
        # output's block is drawn too (Streamlit draws a run's elements one by one).
        page.wait_for_function(
            "([code, output]) => { const texts = [...document.querySelectorAll("
            "\"[data-testid='stCode']\")].map(c => c.innerText.trim()); "
            "return texts.includes(code) && texts.includes(output); }",
            arg=[PANEL_CODE, PANEL_OUTPUT])
        codes = page.locator("[data-testid='stCode']")
        texts = [codes.nth(i).inner_text().strip() for i in range(codes.count())]
        assert PANEL_CODE in texts and PANEL_OUTPUT in texts  # the panel: code, then output
        page.get_by_text("cost · $0.0100 · 200 tokens").wait_for()
        page.get_by_text("tz docs").wait_for()
        assert page.get_by_role("link", name="tz docs").get_attribute("href") == (
            "https://example.com/tz")
        page.locator("[data-testid='stImage'] img").first.wait_for()
        page.screenshot(path=tmp_path / "replay-events.png", full_page=True)


def test_a_purge_refreshes_the_retention_page(tmp_path: Path) -> None:
    lake = seed(tmp_path / "lake", demo_turns=0)
    with _streamlit(lake.settings.lake, tmp_path / "server.log") as url, _browser() as page:
        page.goto(f"{url}/retention")
        page.get_by_role("heading", name="Retention").wait_for()
        # (a disabled Streamlit button has no accessible name: find it by its text)
        button = page.locator("button", has_text="Purge expired rows")
        button.wait_for()
        assert button.is_disabled()
        _settled(page)
        page.get_by_text("I understand").click()
        page.wait_for_function("() => [...document.querySelectorAll('button')].some("
                               "b => b.innerText.includes('Purge expired rows') && !b.disabled)")
        button.click()
        page.get_by_text("Purged").wait_for(timeout=120_000)
        page.get_by_text("there is nothing to purge").wait_for()
        # Streamlit leaves the previous run's elements up until the rerun has replaced them.
        page.locator("button", has_text="Purge expired rows").wait_for(state="detached")
        page.get_by_text("I understand").wait_for(state="detached")
        page.get_by_text("No purge or erase has run").wait_for(state="detached")


def test_a_cold_start_shows_the_loading_state_and_the_first_search_answers(
        tmp_path: Path) -> None:
    # The packaged model, embedded by ONNX Runtime; the workbench runs it on PyTorch (the same
    # identity), whose import and load take seconds: long enough to see the loading state.
    lake = seed(tmp_path / "lake", demo_turns=0, model=None)
    with _streamlit(lake.settings.lake, tmp_path / "server.log", model=None,
                    env={"TURNLAKE_EMBEDDING_RUNTIME": "torch"}) as url, _browser() as page:
        page.goto(url)
        page.get_by_role("heading", name="Search").wait_for()
        page.get_by_text("Loading the model, tables and indexes in the background").wait_for()
        _search(page, QUERY)  # asked while the model loads: answered once it has
        _as_cards(page, timeout=MODEL_WAIT_MS)
        page.get_by_text("1. Quokka workbook").wait_for(timeout=MODEL_WAIT_MS)
        page.get_by_text("Service ready").wait_for(timeout=MODEL_WAIT_MS)
        page.get_by_text("Loading the model, tables and indexes").wait_for(state="detached")


def test_sign_in_bounds_every_page_to_the_keys_principal(tmp_path: Path) -> None:
    from lake.keys import KeyStore

    lake = seed(tmp_path / "lake", demo_turns=30)
    keys = KeyStore(lake.settings.lake)
    analyst = keys.create(tenant=TENANT, role="analyst")[1]
    user = keys.create(tenant=TENANT, role="user", user_id=ANA)[1]
    others = ("globex", "initech")
    with _streamlit(lake.settings.lake, tmp_path / "server.log",
                    env={"TURNLAKE_WORKBENCH_AUTH": ""}) as url, _browser() as page:
        for path, _ in PAGES:  # before sign-in: the form, nothing of the lake
            page.goto(f"{url}/{path}?tenant=globex")
            page.get_by_role("heading", name="Sign in").wait_for()
            body = page.locator("body").inner_text()
            assert not [t for t in (TENANT, *others) if t in body.replace("tenant=", "")]
        page.get_by_label("API key", exact=True).fill(analyst)
        _settled(page)
        page.get_by_role("button", name="Sign in with key").click()
        page.get_by_text(f"Reading as analyst of {TENANT}").wait_for()
        # .streamlit/config.toml: no Deploy button (nor the developer menu) on localhost
        assert page.get_by_role("button", name="Deploy").count() == 0
        assert page.get_by_text("Deploy", exact=True).count() == 0
        sidebar = page.locator("[data-testid='stSidebar']")
        for _, title in (*PAGES[1:], PAGES[0]):
            _settled(page)  # click a page whose run has ended: CI lost clicks sent mid-run
            sidebar.get_by_role("link", name=title).click()
            page.get_by_role("heading", name=title).wait_for()
            page.wait_for_selector("[data-testid='stStatusWidget']", state="detached")
            body = page.locator("body").inner_text()
            assert not [t for t in others if t in body], title
            assert "Purge expired rows" not in body and "Rebuild" not in body, title
        _search(page, QUERY)
        _as_cards(page)
        page.get_by_text("1. Quokka workbook").wait_for()
        assert not [t for t in others if t in page.locator("body").inner_text()]
        page.screenshot(path=tmp_path / "signed-in.png")
        # Every hit's export: the key's tenant on every row, no other tenant's id anywhere.
        for fmt in ("CSV", "JSONL"):
            with page.expect_download() as info:
                _settled(page)
                page.get_by_role("button", name=re.compile(f"Export {fmt}")).click()
            exported = Path(info.value.path()).read_text()
            assert QUERY.split()[0] in exported.lower(), fmt
            assert not [t for t in others if t in exported], fmt
        rows = [json.loads(line) for line in exported.splitlines()]
        assert rows and {r["tenant"] for r in rows} == {TENANT}
        _settled(page)
        sidebar.get_by_role("button", name="Sign out").click()
        page.get_by_role("heading", name="Sign in").wait_for()
        page.get_by_label("API key", exact=True).fill(user)
        _settled(page)
        page.get_by_role("button", name="Sign in with key").click()
        page.get_by_text(f"Reading as user {ANA} of {TENANT}").wait_for()
        # Ben's conversation matches every word; a user key of Ana's never finds it.
        _search(page, "zanzibar budget secret numbers")
        page.get_by_text("turns for “zanzibar").or_(
            page.get_by_text("No turn matches")).or_(
            page.get_by_text("Nothing in this scope")).first.wait_for()
        body = page.locator("body").inner_text()
        assert "Zanzibar budget" not in body and "View as user" not in body
        _settled(page)  # click a page whose run has ended: CI lost clicks sent mid-run
        sidebar.get_by_role("link", name="Conversations & Replay").click()
        page.get_by_role("heading", name="Conversations & Replay").wait_for()
        page.get_by_text("Conversations 1–").wait_for()
        assert "Zanzibar" not in page.locator("body").inner_text()
    assert (tmp_path / "signed-in.png").stat().st_size > 10_000


def test_sign_in_through_an_openid_connect_provider_and_out(tmp_path: Path) -> None:
    """st.login against a real OpenID provider on 127.0.0.1 (oidc-provider-mock): the
    provider's form, the code exchange, the member's principal, then sign-out."""
    mock = pytest.importorskip("oidc_provider_mock")
    httpx = pytest.importorskip("httpx")
    from lake.members import MemberStore

    lake = seed(tmp_path / "lake", demo_turns=10, index=False)
    email = "ana@example.com"
    MemberStore(lake.settings.lake).add(email, tenant=TENANT, role="user", user_id=ANA)
    port = free_port()
    with mock.run_server_in_thread() as provider:
        issuer = f"http://127.0.0.1:{provider.server_port}"
        answer = httpx.put(f"{issuer}/users/{email}", timeout=10,
                           json={"email": email, "email_verified": True, "name": "Ana"})
        assert answer.status_code == 204
        secrets = tmp_path / "secrets.toml"
        secrets.write_text(
            "[auth]\n"
            f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
            f'cookie_secret = "{"c" * 32}"\n'
            'client_id = "turnlake-workbench"\nclient_secret = "not-a-secret"\n'
            f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n'
            'provider_label = "the test provider"\n')
        env = {"TURNLAKE_WORKBENCH_AUTH": "", "STREAMLIT_SECRETS_FILES": str(secrets),
               # authlib refuses plain http to any host but localhost; the provider is on
               # 127.0.0.1 and this is a test
               "AUTHLIB_INSECURE_TRANSPORT": "1"}
        with _streamlit(lake.settings.lake, tmp_path / "server.log", env=env,
                        port=port) as url, _browser() as page:
            # Loopback only: the provider's pages link a stylesheet on a CDN, whose lookup
            # would otherwise hold their load event.
            page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"),
                       lambda route: route.abort())
            page.goto(f"{url}/replay")
            page.get_by_role("heading", name="Sign in").wait_for()
            _settled(page)
            page.get_by_role("button", name="Sign in with the test provider").click()
            # The provider's own authorization form, then back through /oauth2callback.
            page.wait_for_url(re.compile(rf"^{re.escape(issuer)}/"))
            page.get_by_placeholder("sub").fill(email)
            page.get_by_role("button", name="Authorize").click()
            page.wait_for_url(re.compile(rf"^{re.escape(url)}/"))
            page.get_by_text(f"Reading as user {ANA} of {TENANT}").wait_for()
            sidebar = page.locator("[data-testid='stSidebar']")
            sidebar.get_by_text(email).wait_for()
            assert page.get_by_role("heading", name="Sign in").count() == 0
            _settled(page)
            sidebar.get_by_role("button", name="Sign out").click()
            # st.logout ends the provider's session too (its end-session form), then back.
            page.wait_for_url(re.compile(rf"^{re.escape(issuer)}/oauth2/end_session"))
            page.get_by_role("button", name="End session").click()
            page.wait_for_url(re.compile(rf"^{re.escape(url)}/"))
            page.get_by_role("heading", name="Sign in").wait_for()
            page.get_by_role("button", name="Sign in with the test provider").wait_for()
            page.goto(f"{url}/replay")  # the sign-in is gone, not just hidden
            page.get_by_role("heading", name="Sign in").wait_for()
            assert page.get_by_text(f"Reading as user {ANA}").count() == 0
