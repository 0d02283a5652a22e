"""Service benchmark: a real ``turnlake serve`` on loopback under recording and search load.

Run: ``.venv/bin/python -m bench.serve [seconds] [--embed] [--no-index] [--no-spool]
[--max-lag=S] [--per-request=N]`` (default 15 s, without embeddings, indexes built after
commits, recordings answered from the spool with the server's lag bound, 50 turns a request).
8 recording clients post N-turn requests and 4 searching clients post searches, for a bounded
time; a probe samples acknowledged turns and polls search until each is found. Printed:
turns/s recorded, ack p50/p95, ack→searchable p50/p95, search p50/p95 idle and under load;
idle is measured twice, on the seeded lake before the load and on the grown lake after it
(once the last acknowledged turn is searchable), which is the one the load figure compares to.
The probe's time until searchable ends when the search that found the turn answers, so under
load it holds that search's own time; the server's histogram of ack to index publication
gives the share of commits published within 1 s.
Last, the four searchers run alone on the grown lake for up to 10 s: under load, a search
waits for the other three as well as for the recording, and this figure tells the two apart.
Clients run as threads of this process, so on a small machine they compete with the server
for the cores: the figures are the whole loop's, client included.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lake.keys import KeyStore

RECORDERS = 8
SEARCHERS = 4
PER_REQUEST = 50
SEED_TURNS = 2_000
WORDS = ("invoice", "deploy", "forecast", "timeout", "schema", "refund", "latency", "backup",
         "migration", "report", "cluster", "token")
ROOT = Path(__file__).resolve().parent.parent


def _record(n: int, client: int) -> dict[str, Any]:
    start = datetime(2026, 11, 1, 9, tzinfo=UTC) + timedelta(seconds=n)
    word = WORDS[n % len(WORDS)]
    marker = f"mk{client}x{n}"
    return {
        "schema": "turnlake.turn.v1", "tenant": "acme", "app": "bench", "agent": "bench",
        "user_id": f"u-{(n // 20) % 40}", "conversation_id": f"c-{client}-{n // 20}",
        "turn_id": f"t-{n}", "writer": "minimal", "started_at": start.isoformat(),
        "ended_at": (start + timedelta(seconds=5)).isoformat(),
        "submissions": [{"text": f"{marker} how do I fix the {word} problem in staging",
                         "event_type": "prompt", "batch": 0, "arrived_at": start.isoformat()}],
        "completion": {"text": f"{marker} check the {word} settings and retry the job",
                       "at": (start + timedelta(seconds=4)).isoformat()},
        "ttl_days": 36_500}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_for(threads: list[threading.Thread], stop: threading.Event, seconds: float) -> float:
    """Start ``threads``, let them run ``seconds``, set ``stop`` and join them (each given two
    minutes to finish); the ``time.perf_counter()`` they were started at."""
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    return started


def wait_until_healthy(url: str, seconds: float = 180) -> None:
    """Poll ``GET /healthz`` until the server answers; RuntimeError past ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError(f"the bench server at {url} did not start within {seconds:.0f} s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Ask the server to stop (SIGINT, as Ctrl-C), then kill it if it takes over a minute."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def _pct(values: list[float], q: float, scale: float = 1000.0) -> float | None:
    return round(float(np.percentile(values, q)) * scale, 1) if values else None


class _Load:
    """What the clients measured."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acks: list[float] = []
        self.turns = 0
        self.searches: list[float] = []
        self.visible: list[float] = []
        self.sample: list[tuple[str, float]] = []  # (marker, ack time) to probe
        self.last: str | None = None  # the marker of the last acknowledged request
        self.errors: list[str] = []


def recorded_requests(url: str, key: str, client: int, stop: threading.Event,
                      per_request: int) -> Iterator[tuple[httpx.Response, float, float, int]]:
    """``client``'s requests of ``per_request`` turns (bench records), posted one after
    another until ``stop``: each answer, its send and answer times, and the number of the
    request's last turn."""
    n = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                      timeout=120) as http:
        while not stop.is_set():
            body = {"turns": [_record(n + i, client) for i in range(per_request)]}
            sent = time.perf_counter()
            answer = http.post("/v1/turns", json=body)
            n += per_request
            yield answer, sent, time.perf_counter(), n - 1


def all_accepted(answer: httpx.Response, turns: int) -> bool:
    """Whether ``answer`` accepted all ``turns`` turns of its request."""
    return answer.status_code == 200 and answer.json()["accepted"] == turns


def _recorder(url: str, key: str, client: int, stop: threading.Event, load: _Load,
              per_request: int) -> None:
    for answer, sent, acked, last in recorded_requests(url, key, client, stop, per_request):
        with load.lock:
            if not all_accepted(answer, per_request):
                load.errors.append(answer.text[:300])
                return
            load.acks.append(acked - sent)
            load.turns += per_request
            load.last = f"mk{client}x{last}"
            if len(load.acks) % 4 == 0:
                load.sample.append((load.last, acked))


def _searcher(url: str, key: str, seed: int, stop: threading.Event, load: _Load) -> None:
    rng = np.random.default_rng(seed)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                      timeout=120) as http:
        while not stop.is_set():
            query = " ".join(rng.choice(WORDS, 2))
            t = time.perf_counter()
            answer = http.post("/v1/search", json={"query": f"{query} problem",
                                                   "scope": "tenant"})
            took = time.perf_counter() - t
            with load.lock:
                if answer.status_code != 200:
                    load.errors.append(answer.text[:300])
                    return
                load.searches.append(took)


def _probe(url: str, key: str, stop: threading.Event, load: _Load) -> None:
    """Poll search for sampled acknowledged turns: the time from ack to first found."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                      timeout=120) as http:
        while not stop.is_set():
            with load.lock:
                item = load.sample.pop() if load.sample else None
            if item is None:
                time.sleep(0.05)
                continue
            marker, acked = item
            deadline = time.perf_counter() + 60
            while time.perf_counter() < deadline:
                hits = http.post("/v1/search", json={
                    "query": marker, "scope": "tenant", "k": 1, "no_semantic": True,
                    "no_trigram": True}).json()["hits"]
                if hits and marker in hits[0]["text"]:
                    with load.lock:
                        load.visible.append(time.perf_counter() - acked)
                    break
                time.sleep(0.02)
            with load.lock:
                load.sample.clear()  # probe the newest turns, not a backlog


def _search_latency(url: str, key: str, n: int) -> list[float]:
    took = []
    rng = np.random.default_rng(7)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                      timeout=120) as http:
        for _ in range(n):
            query = " ".join(rng.choice(WORDS, 2))
            t = time.perf_counter()
            assert http.post("/v1/search", json={"query": f"{query} problem",
                                                 "scope": "tenant"}).status_code == 200
            took.append(time.perf_counter() - t)
    return took


def bench_serve(seconds: float = 15.0, *, embed: bool = False, index: bool = True,
                workers: int = 1, per_request: int = PER_REQUEST,
                spool: bool = True, max_lag: float | None = None) -> dict[str, Any]:
    """Run the load for ``seconds`` against a fresh lake; the figures as a dict. With
    ``index=False`` the server builds no index (recording alone; nothing becomes searchable);
    ``per_request`` is the number of turns each recording request carries; ``spool=False``
    has the server answer each recording once it is committed (``--no-spool``); ``max_lag``
    is its ``--max-lag`` (None: the server's default)."""
    if per_request < 1:
        raise ValueError(f"per_request must be at least 1, not {per_request}")
    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    lake = root / "lake"
    keys = KeyStore(lake)
    recorder = keys.create(tenant="acme", role="recorder")[1]
    analyst = keys.create(tenant="acme", role="analyst")[1]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "pipeline.cli", "serve", "--lake", str(lake), "--port",
            str(port), *([] if embed else ["--no-embed"]), *([] if index else ["--no-index"]),
            *([] if spool else ["--no-spool"]),
            *([] if max_lag is None else ["--max-lag", str(max_lag)]),
            "--workers", str(workers)]
    # the server's log: an internal error's traceback is reported with the figures
    server_log = root / "server.log"
    with server_log.open("wb") as log:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_until_healthy(url)
        deadline = time.monotonic() + 180
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {recorder}"},
                          timeout=300) as http:
            for start in range(0, SEED_TURNS, 500):
                http.post("/v1/turns", json={"turns": [_record(start + i, 99)
                                                        for i in range(500)]})
        idle_probe = _Load()
        idle_probe.sample.append((f"mk99x{SEED_TURNS - 1}", time.perf_counter()))
        stop = threading.Event()
        waiter = threading.Thread(target=_probe, args=(url, analyst, stop, idle_probe))
        waiter.start()
        while index and not idle_probe.visible and time.monotonic() < deadline + 60:
            time.sleep(0.05)
        stop.set()
        waiter.join()
        idle = _search_latency(url, analyst, 60)
        load, stop = _Load(), threading.Event()
        threads = [threading.Thread(target=_recorder,
                                    args=(url, recorder, c, stop, load, per_request))
                   for c in range(RECORDERS)]
        threads += [threading.Thread(target=_searcher, args=(url, analyst, s, stop, load))
                    for s in range(SEARCHERS)]
        if index:
            threads.append(threading.Thread(target=_probe, args=(url, analyst, stop, load)))
        before = httpx.get(f"{url}/metrics", timeout=10).text
        started = run_for(threads, stop, seconds)
        elapsed = time.perf_counter() - started
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        # The same searches without the load, once the indexer has caught up: the lake grew
        # several times over during the load, so the idle figure before it searched less.
        caught_up = _Load()
        if index and load.last is not None:
            caught_up.sample.append((load.last, time.perf_counter()))
            stop = threading.Event()
            waiter = threading.Thread(target=_probe, args=(url, analyst, stop, caught_up))
            waiter.start()
            until = time.monotonic() + 120
            while not caught_up.visible and time.monotonic() < until:
                time.sleep(0.05)
            stop.set()
            waiter.join()
        idle_after = _search_latency(url, analyst, 60)
        # The same four searchers with nobody recording: what concurrency alone costs a
        # search, apart from what the recording costs it.
        alone, stop = _Load(), threading.Event()
        threads = [threading.Thread(target=_searcher, args=(url, analyst, s, stop, alone))
                   for s in range(SEARCHERS)]
        for thread in threads:
            thread.start()
        time.sleep(min(seconds, 10.0))
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        stop_server(proc)
    batch = _histogram_mean(metrics, "turnlake_commit_turns", since=before)
    published = _histogram_share(metrics, "turnlake_ack_to_searchable_seconds", 1.0,
                                 since=before)
    return {
        "seconds": round(elapsed, 1), "embed": embed, "index": index, "spool": spool,
        "max_lag_s": max_lag,
        "workers": workers,
        "recorders": RECORDERS,
        "searchers": SEARCHERS, "turns_per_request": per_request,
        "turns": load.turns, "turns_per_s": round(load.turns / elapsed),
        "ack_p50_ms": _pct(load.acks, 50), "ack_p95_ms": _pct(load.acks, 95),
        "ack_to_searchable_p50_s": _pct(load.visible, 50, 1.0),
        "ack_to_searchable_p95_s": _pct(load.visible, 95, 1.0),
        "ack_to_searchable_samples": len(load.visible),
        # The server's own clock: of the load's commits, the share whose index was published
        # within 1 s of their answer (the probe's figure adds a search's time under load).
        "commits_published_within_1s": published,
        "search_idle_p50_ms": _pct(idle, 50), "search_idle_p95_ms": _pct(idle, 95),
        "search_idle_after_p50_ms": _pct(idle_after, 50),
        "search_idle_after_p95_ms": _pct(idle_after, 95),
        "indexer_caught_up": bool(caught_up.visible),
        "search_load_p50_ms": _pct(load.searches, 50),
        "search_load_p95_ms": _pct(load.searches, 95),
        "searches_under_load": len(load.searches),
        "search_searchers_alone_p50_ms": _pct(alone.searches, 50),
        "search_searchers_alone_p95_ms": _pct(alone.searches, 95),
        "mean_turns_per_commit": batch, "errors": load.errors[:3],
        **({"server_tracebacks": _tracebacks(server_log)} if load.errors else {}),
    }


def _tracebacks(log: Path, keep: int = 3) -> list[str]:
    """The last ``keep`` tracebacks of a server log, each as its last 25 lines."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    found = [block for block in text.split("Traceback (most recent call last):")[1:]]
    return ["\n".join(block.strip().splitlines()[-25:]) for block in found[-keep:]]


def _histogram_share(text: str, name: str, le: float, *, since: str = "") -> float | None:
    """The share of a Prometheus histogram's observations at most ``le`` (a bucket bound),
    of those made after the exposition ``since``."""
    def counts(exposition: str) -> tuple[float, float]:
        under = total = 0.0
        for line in exposition.splitlines():
            if line.startswith(f'{name}_bucket{{le="{le}"}} '):
                under = float(line.split()[1])
            elif line.startswith(f"{name}_count "):
                total = float(line.split()[1])
        return under, total

    (under, total), (under_then, total_then) = counts(text), counts(since)
    return round((under - under_then) / (total - total_then), 3) if total > total_then \
        else None


def _histogram_mean(text: str, name: str, *, since: str = "") -> float | None:
    """The mean of a Prometheus histogram in exposition text, of the observations made after
    the exposition ``since`` when given (the seeding's commits are not the load's)."""
    def totals(exposition: str) -> dict[str, float]:
        values = {"_sum": 0.0, "_count": 0.0}
        for line in exposition.splitlines():
            for part in values:
                if line.startswith(f"{name}{part} "):
                    values[part] = float(line.split()[1])
        return values

    now, then = totals(text), totals(since)
    count = now["_count"] - then["_count"]
    return round((now["_sum"] - then["_sum"]) / count, 1) if count else None


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    sizes = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--per-request=")]
    if sizes and not sizes[-1].isdigit():
        sys.exit(f"--per-request takes a whole number of turns, not {sizes[-1]!r}")
    lags = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--max-lag=")]
    try:
        lag = float(lags[-1]) if lags else None
    except ValueError:
        sys.exit(f"--max-lag takes a number of seconds, not {lags[-1]!r}")
    print(json.dumps(bench_serve(float(args[0]) if args else 15.0, embed="--embed" in sys.argv,
                                 index="--no-index" not in sys.argv,
                                 spool="--no-spool" not in sys.argv, max_lag=lag,
                                 per_request=int(sizes[-1]) if sizes else PER_REQUEST),
                     indent=2))
