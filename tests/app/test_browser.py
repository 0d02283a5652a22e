"""The workbench in a real browser: `streamlit run` on a seeded lake, driven by Chromium.

Uses Debian's Chromium (never a downloaded browser); skipped only when /usr/bin/chromium is
absent (`apt-get install -y chromium`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.store import LakeStore
from tests.app.workbench_lake import (
    FILE_BYTES,
    FILE_REF,
    KNOWN_CONVERSATION,
    QUERY,
    TENANT,
    SeededLake,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking"]
WAIT_MS = 30_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"streamlit did not come up in 60 s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def server(seeded: SeededLake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`streamlit run app/main.py` on a free port against the seeded lake; its base URL."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium "
                    "(apt-get install -y chromium)")
    port = _free_port()
    env = {**os.environ, "TURNLAKE_LAKE": str(seeded.settings.lake),
           "TURNLAKE_EMBEDDING_MODEL": "hashing-64"}
    env.pop("TURNLAKE_TENANTS", None)
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"),
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--server.headless", "true", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_search_replay_download_and_every_page(server: str, seeded: SeededLake,
                                               tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900},
                                    accept_downloads=True)
            page.set_default_timeout(WAIT_MS)
            page.goto(server)
            page.get_by_role("heading", name="Search").wait_for()
            page.get_by_label("Query").fill(QUERY)
            page.get_by_role("button", name="Search", exact=True).click()
            page.get_by_text("1. Quokka workbook").wait_for()
            page.screenshot(path=tmp_path / "search.png")

            page.get_by_role("button", name="Open in Replay").first.click()
            page.get_by_role("heading", name="Conversations & Replay").wait_for()
            download_button = page.get_by_role("button", name="Download quokka.csv")
            download_button.wait_for()
            page.wait_for_url(f"**/replay?conversation={KNOWN_CONVERSATION}&turn=t-0001")
            page.screenshot(path=tmp_path / "replay.png")
            with page.expect_download() as info:
                download_button.click()
            got = Path(info.value.path()).read_bytes()
            _, resolved = TurnMaterializer(LakeStore(seeded.settings.lake)).resolve(
                Principal(TENANT, analyst=True), FILE_REF)
            assert got == resolved == FILE_BYTES
            assert info.value.suggested_filename == "quokka.csv"

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
        finally:
            browser.close()
    for name in ("search", "replay", "overview", "retention", "index_health"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000
