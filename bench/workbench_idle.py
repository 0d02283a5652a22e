"""Workbench page idle times: how long each page takes, in a real Chromium, until Streamlit has
finished running it.

Run: ``.venv/bin/python -m bench.workbench_idle [turns ...] [--shots docs]`` (default 600
and 100000 demo turns; the lakes are written with the dependency-free hashing embedder, so the
model's load is not what is measured; ``--shots`` saves the first lake's pages there). For
each lake: ``streamlit run app/main.py`` on a loopback port, the Search page until the
background warm-up says the service is ready, then every page twice
(first and second visit), each from navigation until the heading is up and Streamlit's
"running" indicator has been gone for half a second. Uses Debian's Chromium at
``/usr/bin/chromium``, never a downloaded browser.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PAGES = (("", "Search"), ("replay", "Conversations & Replay"), ("overview", "Overview"),
         ("retention", "Retention"), ("index-health", "Index health"))
MODEL = "hashing-64"
SETTLED_S = 0.5
_RUNNING = "[data-testid='stStatusWidget']"


def _free_port() -> int:
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
                    wait_s: float = 120.0) -> tuple[subprocess.Popen[bytes], str]:
    """``streamlit run app/main.py`` on a free loopback port against ``lake`` (output to
    ``log``), once its health check answers: the process and its base URL. ``env`` is added
    to this process's environment, from which the lake's tenant and model choices are left
    out; the caller stops the process."""
    port = _free_port()
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


def page_idle_times(lake: Path, log: Path, shots: Path | None = None) -> dict[str, Any]:
    """Seconds from navigation to idle for every page, first and second visit; with
    ``shots``, a screenshot of every page (Search after a search) is saved there as
    ``workbench-<page>.png``."""
    from playwright.sync_api import sync_playwright

    proc, url = start_workbench(lake, log, {"TURNLAKE_EMBEDDING_MODEL": MODEL})
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(120_000)
            started = time.perf_counter()
            page.goto(url)
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
            if shots is not None:
                _screenshots(page, url, shots)
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"warm_up_s": round(warm_s, 1),
            "pages_s": {title: {"first": v[0], "second": v[1]} for title, v in visits.items()},
            "slowest_s": max(max(v) for v in visits.values())}


def _screenshots(page: Any, url: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for path, title in PAGES:
        page.goto(f"{url}/{path}")
        page.get_by_role("heading", name=title).wait_for()
        if title == "Search":
            page.get_by_label("Query").fill("forecast spreadsheet")
            page.get_by_role("button", name="Search", exact=True).click()
            page.get_by_role("button", name="Open in Replay").first.wait_for()
        _idle(page)
        slug = path or "search"
        page.screenshot(path=str(folder / f"workbench-{slug}.png"), full_page=True)


def bench_workbench_idle(sizes: tuple[int, ...] = (600, 100_000),
                         shots: Path | None = None) -> dict[str, Any]:
    """Page idle times on demo lakes of each size, in a temporary folder; screenshots of the
    first lake's pages into ``shots`` when given."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="turnlake-idle-") as tmp:
        for turns in sizes:
            lake = Path(tmp) / f"lake-{turns}"
            built = build_lake(lake, turns)
            out[f"{turns}_turns"] = {"lake_build_s": round(built, 1),
                                     **page_idle_times(lake, Path(tmp) / f"st-{turns}.log",
                                                       shots if turns == sizes[0] else None)}
            print(json.dumps({f"{turns}_turns": out[f"{turns}_turns"]}), flush=True)
    return out


def main() -> None:
    """Print the figures for the sizes named on the command line."""
    parser = argparse.ArgumentParser(description="Workbench page idle times in Chromium.")
    parser.add_argument("turns", nargs="*", type=int, default=[600, 100_000],
                        help="demo turns of each lake (default 600 and 100000)")
    parser.add_argument("--shots", type=Path, default=None,
                        help="save the first lake's pages as workbench-<page>.png here")
    args = parser.parse_args()
    print(json.dumps(bench_workbench_idle(tuple(args.turns), args.shots), indent=2))


if __name__ == "__main__":
    main()
