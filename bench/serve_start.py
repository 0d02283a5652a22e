"""Service benchmark of the live path's edges: a restart after ``kill -9``, the first turn after
a start, and other keys' turns while one key sends maximum-size turns.

Run: ``.venv/bin/python -m bench.serve_start [seconds] [--embed] [--long-bytes N]`` (default
20 s of long-text load, without embeddings; ``--long-bytes 0``: step 3 without the long turns,
the control its other-key figures compare with). Steps, each against a real ``turnlake serve``
on loopback:

1. 4 clients record one turn a request for 3 s; the server is killed with SIGKILL while its
   spool holds acknowledged turns not yet committed. A new server starts on the same lake:
   ``restart_to_ready_s`` is the time from its start to ``/readyz`` answering 200 (recovery,
   the recovered partitions' index step, warming), ``startup_s`` the same as the server
   counts it (``/readyz``'s ``seconds``, the interpreter's start left out),
   ``recovered_groups`` what it committed,
   and ``acked_found_at_ready`` the share of a sample of acknowledged turns that one search
   each finds at once (the promise: 1.0).
2. Right at readiness one turn is recorded and search is polled until it is found
   (``first_turn_to_searchable_s``), then ten more one after another
   (``later_turns_to_searchable_p50_s``).
3. For ``seconds``, one key sends turns whose answer is as large as the body limit allows
   (9 MB), one after another, while another key records a short turn every half second
   (not waiting for it to be found) and search is polled for each until found:
   ``other_key_to_searchable_p50_s``/``p95_s`` (from the answer),
   ``other_key_answer_p50_s``/``p95_s`` (from sending to the answer: the writer's fair share
   holds no key behind another's backlog), ``other_key_sent_to_found_*`` and the share
   found within 2 s of sending (``other_key_found_within_2s``), the search latency meanwhile
   (``search_during_long_p50_ms``/``p95_ms``) and how many long turns were accepted.
   Meanwhile the lake's live index manifests are polled: the segments published during the
   load (``index_segments_published``), the new bases among them (rebases and full builds:
   ``index_bases_published``, their summed build seconds ``index_base_build_s``) and the
   megabytes of text those segments hold, read from each segment's own rows file
   (``index_text_mb``, ``index_base_text_mb``): how much text the index steps indexed, and
   indexed again, to keep the other key's turns searchable.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.compute as pc
import pyarrow.feather as feather

from bench.serve import ROOT, _free_port, stop_server, wait_until_healthy
from lake.index.manifest import MANIFEST_FILE, list_partitions, read_current
from lake.keys import KeyStore

LONG_BYTES = 9_000_000


def _turn(n: int, key: str, text: str | None = None) -> dict[str, Any]:
    start = datetime(2026, 11, 1, 9, tzinfo=UTC) + timedelta(seconds=n)
    marker = f"mk{key}x{n}"
    return {
        "schema": "turnlake.turn.v1", "tenant": "acme", "app": "bench", "agent": "bench",
        "user_id": f"u-{key}", "conversation_id": f"c-{key}", "turn_id": f"t-{n}",
        "writer": "minimal", "started_at": start.isoformat(),
        "ended_at": (start + timedelta(seconds=5)).isoformat(),
        "submissions": [{"text": f"{marker} where did the deploy fail", "event_type": "prompt",
                         "batch": 0, "arrived_at": start.isoformat()}],
        "completion": {"text": text or f"{marker} the deploy failed on the schema migration",
                       "at": (start + timedelta(seconds=4)).isoformat()},
        "ttl_days": 36_500}


def _long_text(rng: random.Random, limit: int = LONG_BYTES) -> str:
    words = ("deploy", "schema", "latency", "cluster", "invoice", "refund", "backup", "token",
             "report", "forecast", "timeout", "migration")
    out, size = [], 0
    while size < limit:
        word = f"{rng.choice(words)}{rng.randrange(1000)}"
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


class _Server:
    def __init__(self, lake: Path, embed: bool, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "pipeline.cli", "serve", "--lake", str(lake), "--port",
                str(self.port), *([] if embed else ["--no-embed"])]
        self.started = time.perf_counter()
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out)

    def wait_ready(self, seconds: float = 600) -> float:
        """Seconds from the start to ``/readyz`` 200."""
        wait_until_healthy(self.url)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                return time.perf_counter() - self.started
            time.sleep(0.05)
        raise RuntimeError(f"the bench server at {self.url} was not ready in {seconds:.0f} s")


def _found(http: httpx.Client, marker: str) -> bool:
    hits = http.post("/v1/search", json={"query": marker, "scope": "tenant", "k": 1}
                     ).json()["hits"]
    return bool(hits) and marker in json.dumps(hits[0])


def _lag(recorder: httpx.Client, analyst: httpx.Client, n: int, key: str,
         limit_s: float = 120, answered: list[float] | None = None) -> float | None:
    """Record one short turn, then poll search: seconds from the answer to found (and the
    seconds from sending to the answer appended to ``answered``)."""
    sent = time.perf_counter()
    answer = recorder.post("/v1/turns", json=_turn(n, key))
    answer.raise_for_status()
    acked = time.perf_counter()
    if answered is not None:
        answered.append(acked - sent)
    while time.perf_counter() - acked < limit_s:
        if _found(analyst, f"mk{key}x{n}"):
            return time.perf_counter() - acked
        time.sleep(0.02)
    return None


def bench_serve_start(seconds: float = 20.0, *, embed: bool = False,
                      long_bytes: int = LONG_BYTES) -> dict[str, Any]:
    """Run the three steps against a fresh lake; the figures as a dict. ``long_bytes``: the
    size of the big key's answers in step 3 (0: it sends nothing, a control that measures
    the other key's lag under the same prober and searches without the long turns)."""
    root = Path(tempfile.mkdtemp(prefix="bench-serve-start-"))
    lake, log = root / "lake", root / "server.log"
    keys = KeyStore(lake)
    recorder = keys.create(tenant="acme", role="recorder")[1]
    analyst = keys.create(tenant="acme", role="analyst")[1]
    big = keys.create(tenant="acme", role="recorder")[1]
    out: dict[str, Any] = {"embed": embed, "long_bytes": long_bytes}

    first = _Server(lake, embed, log)
    first.wait_ready()
    acked: list[str] = []
    lock, stop = threading.Lock(), threading.Event()

    def record(client: int) -> None:
        with httpx.Client(base_url=first.url, timeout=60,
                          headers={"Authorization": f"Bearer {recorder}"}) as http:
            for n in range(client * 100_000, client * 100_000 + 50_000):
                if stop.is_set():
                    return
                try:
                    if http.post("/v1/turns", json=_turn(n, "k")).status_code == 200:
                        with lock:
                            acked.append(f"mkkx{n}")
                except httpx.TransportError:
                    return

    clients = [threading.Thread(target=record, args=(c,)) for c in range(4)]
    for thread in clients:
        thread.start()
    time.sleep(3.0)
    first.proc.kill()
    stop.set()
    for thread in clients:
        thread.join(60)
    first.proc.wait(60)

    server = _Server(lake, embed, log)
    try:
        out["restart_to_ready_s"] = round(server.wait_ready(), 2)
        ready = httpx.get(f"{server.url}/readyz").json()["readiness"]
        out["acked_before_kill"] = len(acked)
        out["recovered_groups"] = ready["recovered_groups"]
        out["startup_s"] = ready["seconds"]  # the server's own count: recovery to ready
        with httpx.Client(base_url=server.url, timeout=120,
                          headers={"Authorization": f"Bearer {analyst}"}) as search, \
                httpx.Client(base_url=server.url, timeout=300,
                             headers={"Authorization": f"Bearer {recorder}"}) as rec:
            sample = acked[-50:]
            out["acked_found_at_ready"] = round(
                sum(_found(search, m) for m in sample) / max(len(sample), 1), 3)
            out["first_turn_to_searchable_s"] = _round(_lag(rec, search, 900_000, "f"))
            later = [_lag(rec, search, 900_001 + i, "f") for i in range(10)]
            out["later_turns_to_searchable_p50_s"] = _round(
                float(np.median([x for x in later if x is not None])) if any(later) else None)
            out.update(_long_load(server.url, recorder, big, analyst, seconds, lake,
                                  long_bytes))
    finally:
        stop_server(server.proc)
    return out


class _IndexWatch:
    """Polls a lake's live index manifests: each segment that goes live after the first look
    (a delta, a deferred segment, a merge, a new base), with the bytes of text it holds, read
    from the segment's rows file (whatever the manifests of the code under test record)."""

    def __init__(self, lake: Path) -> None:
        self.lake = lake
        self.seen: set[tuple[str, str, str]] = set()
        self.bases: list[tuple[int, float]] = []  # (text bytes, build seconds)
        self.segments: list[int] = []  # text bytes of every segment, bases included
        self.unread = 0  # segments replaced before they could be read
        self._look(count=False)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._look(count=True)
            time.sleep(0.2)
        self._look(count=True)

    def _look(self, *, count: bool) -> None:
        for part in list_partitions(self.lake):
            try:
                current = read_current(self.lake, *part)
            except Exception:  # a build replaced mid-read: the next look sees the newer
                continue
            if current is None:
                continue
            folder, manifest = current
            for i, segment in enumerate(manifest.live_segments):
                key = (*part, segment)
                if key in self.seen:
                    continue
                self.seen.add(key)
                if count:
                    self._count(folder.parent / segment, base=i == 0)

    def _count(self, segment: Path, *, base: bool) -> None:
        try:
            texts = feather.read_table(segment / "rows.arrow", columns=["text"]).column("text")
            size = int(pc.sum(pc.binary_length(texts)).as_py() or 0)
            seconds = float(json.loads((segment / MANIFEST_FILE).read_text())["build_seconds"])
        except (OSError, ValueError, KeyError):
            self.unread += 1
            return
        self.segments.append(size)
        if base:
            self.bases.append((size, seconds))

    def figures(self) -> dict[str, Any]:
        return {"index_segments_published": len(self.segments) + self.unread,
                "index_bases_published": len(self.bases),
                "index_text_mb": round(sum(self.segments) / 1e6, 1),
                "index_base_text_mb": round(sum(b for b, _ in self.bases) / 1e6, 1),
                "index_base_build_s": round(sum(s for _, s in self.bases), 1)}


def _long_load(url: str, recorder: str, big: str, analyst: str, seconds: float,
               lake: Path, long_bytes: int) -> dict[str, Any]:
    """The key ``big`` sends 9 MB turns back to back while ``recorder`` records a short turn
    every half second (without waiting for it to be found) and a prober polls search for
    each until found: many samples of the other key's lag, whether or not a long turn was
    in the way."""
    stop = threading.Event()
    long_answers: list[int] = []

    def send_long() -> None:
        if long_bytes <= 0:
            return
        rng = random.Random(3)
        with httpx.Client(base_url=url, timeout=900,
                          headers={"Authorization": f"Bearer {big}"}) as http:
            n = 800_000
            while not stop.is_set():
                body = _turn(n, "big", _long_text(rng, long_bytes))
                long_answers.append(http.post("/v1/turns", json=body).status_code)
                n += 1

    lock = threading.Lock()
    pending: dict[str, tuple[float, float]] = {}  # marker: (sent, answered)
    lags: list[float] = []  # answer -> found
    totals: list[float] = []  # sent -> found
    answers: list[float] = []  # sent -> answer

    def record_short() -> None:
        with httpx.Client(base_url=url, timeout=300,
                          headers={"Authorization": f"Bearer {recorder}"}) as http:
            n = 700_000
            while not stop.is_set():
                sent = time.perf_counter()
                http.post("/v1/turns", json=_turn(n, "o")).raise_for_status()
                acked = time.perf_counter()
                with lock:
                    answers.append(acked - sent)
                    pending[f"mkox{n}"] = (sent, acked)
                n += 1
                time.sleep(max(0.0, 0.5 - (time.perf_counter() - sent)))

    def probe() -> None:
        with httpx.Client(base_url=url, timeout=300,
                          headers={"Authorization": f"Bearer {analyst}"}) as http:
            while not stop.is_set() or pending:
                with lock:
                    oldest = min(pending, key=lambda m: pending[m][0], default=None)
                if oldest is None:
                    time.sleep(0.02)
                    continue
                if _found(http, oldest):
                    now = time.perf_counter()
                    with lock:
                        sent, acked = pending.pop(oldest)
                        lags.append(now - acked)
                        totals.append(now - sent)
                elif stop.is_set() and time.perf_counter() - pending[oldest][1] > 120:
                    with lock:
                        pending.pop(oldest)  # never found: counted as missed
                else:
                    time.sleep(0.02)

    watch = _IndexWatch(lake)
    threads = [threading.Thread(target=send_long), threading.Thread(target=record_short),
               threading.Thread(target=probe), threading.Thread(target=watch.run, args=(stop,))]
    for thread in threads:
        thread.start()
    searches: list[float] = []
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=300,
                      headers={"Authorization": f"Bearer {analyst}"}) as search:
        while time.monotonic() < deadline:
            t = time.perf_counter()
            search.post("/v1/search", json={"query": "schema migration", "scope": "tenant"})
            searches.append(time.perf_counter() - t)
            time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(900)
    return {"long_turns_answered": len(long_answers),
            "long_turns_accepted": sum(1 for s in long_answers if s == 200),
            "other_key_turns": len(answers), "other_key_found": len(lags),
            "other_key_to_searchable_p50_s": _round(_q(lags, 50)),
            "other_key_to_searchable_p95_s": _round(_q(lags, 95)),
            "other_key_answer_p50_s": _round(_q(answers, 50)),
            "other_key_answer_p95_s": _round(_q(answers, 95)),
            "other_key_sent_to_found_p50_s": _round(_q(totals, 50)),
            "other_key_sent_to_found_p95_s": _round(_q(totals, 95)),
            "other_key_found_within_2s": _round(
                sum(1 for t in totals if t <= 2.0) / max(len(totals), 1)),
            "search_during_long_p50_ms": _round(_q(searches, 50), 1000),
            "search_during_long_p95_ms": _round(_q(searches, 95), 1000),
            **watch.figures()}


def _q(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _round(value: float | None, scale: float = 1.0) -> float | None:
    return None if value is None else round(value * scale, 3)


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.serve_start [seconds] [--embed] [--long-bytes N]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.serve_start")
    parser.add_argument("seconds", type=float, nargs="?", default=20.0,
                        help="seconds of the long-text load (step 3)")
    parser.add_argument("--embed", action="store_true", help="with the MiniLM model")
    parser.add_argument("--long-bytes", type=int, default=LONG_BYTES,
                        help="the big key's answer size; 0 sends none (a control run)")
    args = parser.parse_args(argv)
    print(json.dumps(bench_serve_start(args.seconds, embed=args.embed,
                                       long_bytes=args.long_bytes), indent=2))


if __name__ == "__main__":
    main()
