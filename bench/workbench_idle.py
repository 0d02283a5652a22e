"""Workbench page idle times: how long each page takes, in a real Chromium, until Streamlit has
finished running it.

Run: ``.venv/bin/python -m bench.workbench_idle [turns ...]`` (default 600 and 100000 demo
turns; the lakes are written with the dependency-free hashing embedder, so the model's load is
not what is measured). For each lake: a cold start (``streamlit run app/main.py`` on a loopback
port, the browser sent there as soon as the server answers: seconds until the first page shows
anything, and until its heading is up), then the Search page until the background warm-up
says the service is ready, then every page twice (first and second visit), each from
navigation (a page load of its URL: a new Streamlit session each time) until the heading is up
and Streamlit's "running" indicator has been gone for half a second; then four searches twice,
each by its URL until its results are up and the page idle (with the search's own time on the
server, from the results' caption); then every page twice again as a person moves between
them, by its sidebar link in the same session. The CPU model
and the load averages before and after are printed with the figures. Uses Debian's Chromium
at ``/usr/bin/chromium``, never a downloaded browser.

``--lake PATH`` times an existing lake instead of building one: ``.venv/bin/python -m
bench.workbench_idle --lake /tmp/lake-100k``. The workbench searches with the hashing embedder,
as the bench's lakes are written; ``--model packaged`` times a lake written with the packaged
all-MiniLM-L6-v2 (``turnlake demo`` without ``TURNLAKE_EMBEDDING_MODEL``), whose load and
query encoding then count.

``--shots docs --shots-lake data/lake`` instead saves the docs' screenshots
(``workbench-<page>.png``) of an existing lake, read with the lake's own model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from bench.machine import machine

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PAGES = (("", "Search"), ("replay", "Conversations & Replay"), ("overview", "Overview"),
         ("retention", "Retention"), ("index-health", "Index health"))
MODEL = "hashing-64"
PACKAGED = "packaged"  # --model's name for the packaged all-MiniLM-L6-v2 (no model setting)
SETTLED_S = 0.5
# Searches timed by URL (every setting is in it), words the demo's conversations use.
SEARCHES = ("forecast spreadsheet", "why did the deploy fail", "invoice totals for march",
            "reset my password")
_CAPTION = re.compile(r"turns for .* in (\d+) ms")
_RUNNING = "[data-testid='stStatusWidget']"


def free_port() -> int:
    """A loopback port nothing listens on (a server started next may take it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_lake(root: Path, turns: int) -> float:
    """A demo lake of ``turns`` turns (hashing embedder, indexes built); seconds it took."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline.cli", "demo", "--lake", str(root),
                    "--users", str(max(12, turns // 500)), "--turns", str(turns)],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "TURNLAKE_EMBEDDING_MODEL": MODEL})
    return time.perf_counter() - started


def start_workbench(lake: Path | str, log: Path, env: dict[str, str] | None = None,
                    wait_s: float = 120.0, port: int | None = None
                    ) -> tuple[subprocess.Popen[bytes], str]:
    """``streamlit run app/main.py`` on a loopback port (``port``, else a free one) against
    ``lake`` (output to ``log``), once its health check answers: the process and its base
    URL. ``env`` is added to this process's environment, from which the lake's tenant and
    model choices are left out; the caller stops the process."""
    port = port or free_port()
    # The local demo mode (no sign-in) unless ``env`` says otherwise.
    full = {**os.environ, "TURNLAKE_LAKE": str(lake), "HF_HUB_OFFLINE": "1",
            "TURNLAKE_WORKBENCH_AUTH": "local"}
    full.pop("TURNLAKE_TENANTS", None)
    full.pop("TURNLAKE_EMBEDDING_MODEL", None)
    full.update(env or {})
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"),
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--server.headless", "true", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"], cwd=ROOT, env=full, stdout=out,
            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"streamlit did not come up in {wait_s:.0f} s:\n{log.read_text()}")


def _idle(page: Any) -> None:
    """Wait until Streamlit's running indicator has been gone for SETTLED_S seconds."""
    quiet_since = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if page.locator(_RUNNING).count():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLED_S:
            return
        time.sleep(0.05)
    raise RuntimeError("the page never went idle in 120 s")


_DRAWN = ("() => { const m = document.querySelector(\"[data-testid='stMain']\"); "
          "return m !== null && m.innerText.trim().length > 0; }")


def page_idle_times(lake: Path, log: Path, model: str = MODEL) -> dict[str, Any]:
    """Seconds of a cold start until the first page shows something and until its heading is
    up; then from navigation to idle for every page, first and second visit (with the
    machine's load before and after). ``model`` is the one ``lake`` was written with
    (:data:`PACKAGED`: the packaged MiniLM)."""
    from playwright.sync_api import sync_playwright

    before = machine()

    proc, url = start_workbench(
        lake, log, {} if model == PACKAGED else {"TURNLAKE_EMBEDDING_MODEL": model})
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(120_000)
            started = time.perf_counter()
            page.goto(url)  # the server's first page: nothing imported or read yet
            page.wait_for_function(_DRAWN, polling=50)
            drawn_s = time.perf_counter() - started
            page.get_by_role("heading", name="Search").wait_for()
            heading_s = time.perf_counter() - started
            page.get_by_text("Service ready").wait_for()
            warm_s = time.perf_counter() - started
            visits: dict[str, list[float]] = {}
            for _ in range(2):
                for path, title in PAGES:
                    t = time.perf_counter()
                    page.goto(f"{url}/{path}")
                    page.get_by_role("heading", name=title).wait_for()
                    _idle(page)
                    # The settling wait is not the page's time.
                    visits.setdefault(title, []).append(
                        round(time.perf_counter() - t - SETTLED_S, 2))
            # A search by its URL: until the results' caption is up and the page is idle;
            # the caption says the search's own time on the server.
            searches: dict[str, list[float]] = {}
            server_ms: dict[str, list[int]] = {}
            for _ in range(2):
                for query in SEARCHES:
                    t = time.perf_counter()
                    page.goto(f"{url}/?{urllib.parse.urlencode({'q': query, 'scope': 'tenant'})}")
                    caption = page.get_by_text(_CAPTION)
                    caption.wait_for()
                    _idle(page)
                    searches.setdefault(query, []).append(
                        round(time.perf_counter() - t - SETTLED_S, 2))
                    found = _CAPTION.search(caption.inner_text())
                    server_ms.setdefault(query, []).append(int(found.group(1)) if found else -1)
            # As a person moves between pages: a sidebar link, the same browser session.
            clicks: dict[str, list[float]] = {}
            sidebar = page.locator("[data-testid='stSidebar']")
            for _ in range(2):
                for _, title in (*PAGES[1:], PAGES[0]):
                    t = time.perf_counter()
                    sidebar.get_by_role("link", name=title).click()
                    page.get_by_role("heading", name=title).wait_for()
                    _idle(page)
                    clicks.setdefault(title, []).append(
                        round(time.perf_counter() - t - SETTLED_S, 2))
            browser.close()
    finally:
        _stop(proc)
    return {"cold_start_drawn_s": round(drawn_s, 2), "cold_start_heading_s": round(heading_s, 2),
            "warm_up_s": round(warm_s, 1),
            "pages_s": {title: {"first": v[0], "second": v[1]} for title, v in visits.items()},
            "slowest_s": max(max(v) for v in visits.values()),
            "searches_s": {q: {"first": v[0], "second": v[1], "server_ms": server_ms[q]}
                           for q, v in searches.items()},
            "slowest_search_s": max(max(v) for v in searches.values()),
            "sidebar_clicks_s": {title: {"first": v[0], "second": v[1]}
                                 for title, v in clicks.items()},
            "slowest_click_s": max(max(v) for v in clicks.values()),
            "machine_before": before, "load_after": machine()["load"]}


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# The docs' screenshots: page path, heading, window height (Streamlit scrolls inside the page,
# so a screenshot shows the window only) and what to do before the picture.
SHOTS = (("?q=forecast+spreadsheet&scope=tenant&k=12", "Search", 1500),
         ("?q=forecast+spreadsheet&scope=tenant&layout=Cards&k=3", "Search", 1500),
         ("replay?view=conversation&conversation=c-acme-0017&turn=t-0253",
          "Conversations & Replay", 1700), ("overview", "Overview", 1300),
         ("retention", "Retention", 1300), ("index-health", "Index health", 1100))


def save_screenshots(lake: Path | str, folder: Path, log: Path) -> list[Path]:
    """``workbench-<page>.png`` of every page of ``lake`` (its own model), in ``folder``:
    Search as a table and as cards (one breakdown open), Replay's whole conversation (of the
    600-turn demo lake's c-acme-0017), and the other pages."""
    from playwright.sync_api import sync_playwright

    folder.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    proc, url = start_workbench(lake, log)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(180_000)
            page.goto(url)
            page.get_by_text("Service ready").wait_for()
            for path, title, height in SHOTS:
                page.set_viewport_size({"width": 1400, "height": height})
                page.goto(f"{url}/{path}")
                page.get_by_role("heading", name=title).wait_for()
                name = path.split("?")[0] or "search"
                if "layout=Cards" in path:
                    page.get_by_role("button", name="Open in Replay").first.wait_for()
                    page.get_by_text("Ranks per generator and addresses").first.click()
                    name = "search-cards"
                elif title == "Search":
                    page.get_by_text("turns for").wait_for()
                _idle(page)
                time.sleep(1.0)  # charts finish drawing after the run
                saved.append(folder / f"workbench-{name}.png")
                page.screenshot(path=str(saved[-1]))
            browser.close()
    finally:
        _stop(proc)
    return saved


def bench_workbench_idle(sizes: tuple[int, ...] = (600, 100_000)) -> dict[str, Any]:
    """Cold start and page idle times on demo lakes of each size, in a temporary folder."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="turnlake-idle-") as tmp:
        for turns in sizes:
            lake = Path(tmp) / f"lake-{turns}"
            built = build_lake(lake, turns)
            out[f"{turns}_turns"] = {"lake_build_s": round(built, 1),
                                     **page_idle_times(lake, Path(tmp) / f"st-{turns}.log")}
            print(json.dumps({f"{turns}_turns": out[f"{turns}_turns"]}), flush=True)
    return out


def main() -> None:
    """Print the figures for the sizes named on the command line, or save screenshots."""
    parser = argparse.ArgumentParser(description="Workbench page idle times in Chromium.")
    parser.add_argument("turns", nargs="*", type=int, default=[600, 100_000],
                        help="demo turns of each lake (default 600 and 100000)")
    parser.add_argument("--lake", type=Path, default=None,
                        help="time this existing lake instead of building")
    parser.add_argument("--model", default=MODEL,
                        help=f"the model --lake was written with: {MODEL} (default) or "
                             f"{PACKAGED} (all-MiniLM-L6-v2)")
    parser.add_argument("--shots", type=Path, default=None,
                        help="save workbench-<page>.png of --shots-lake here (no timings)")
    parser.add_argument("--shots-lake", default="data/lake",
                        help="the lake the screenshots show (default data/lake)")
    args = parser.parse_args()
    if args.shots is not None:
        with tempfile.TemporaryDirectory(prefix="turnlake-shots-") as tmp:
            for path in save_screenshots(args.shots_lake, args.shots, Path(tmp) / "st.log"):
                print(path)
        return
    if args.lake is not None:
        with tempfile.TemporaryDirectory(prefix="turnlake-idle-") as tmp:
            figures = {str(args.lake): {"model": args.model, **page_idle_times(
                args.lake, Path(tmp) / "st.log", args.model)}}
        print(json.dumps(figures, indent=2))
        return
    print(json.dumps(bench_workbench_idle(tuple(args.turns)), indent=2))


if __name__ == "__main__":
    main()
