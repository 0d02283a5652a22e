"""What recording over HTTP costs: a real ``turnlake serve`` on loopback under recording load
alone, run by one or more checkouts of turnlake, alternated.

``python -m bench.http_ingest [--tree OLD --tree NEW] [--rounds 3] [--seconds 10]
[--clients 4] [--per-request 20]``: each run starts a server of the tree's code (``--no-embed
--no-index``: what is measured is the write path — deciding, spooling, committing — not the
model or the index) on a fresh lake, has ``--clients`` clients post ``--per-request``-turn
requests for ``--seconds``, then waits until the server has committed every answered turn.
Runs go OLD, NEW, OLD, NEW, ... (default: this tree alone).

Printed per run and pooled per tree: turns answered per second under the load, ack p50/p95,
turns committed per second (from the first request until the last commit), and the CPU seconds
the server and its child processes spent per 1000 turns over the same span (from
/proc/<pid>/stat: on a shared machine the least noisy of the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.serve import (
    _free_port,
    _record,
    all_accepted,
    recorded_requests,
    run_for,
    stop_server,
    wait_until_healthy,
)
from lake.keys import KeyStore

ROOT = Path(__file__).resolve().parent.parent
_TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its living descendants."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _uncommitted(url: str) -> int:
    backlog = httpx.get(f"{url}/healthz", timeout=30).json()["backlog"]
    return int(backlog["uncommitted_turns"]) + int(backlog["queued_requests"])


def run_once(tree: Path, *, seconds: float, clients: int, per_request: int) -> dict[str, Any]:
    """One server of ``tree``'s code on a fresh lake under the load; its figures."""
    root = Path(tempfile.mkdtemp(prefix="bench-http-ingest-"))
    lake = root / "lake"
    key = KeyStore(lake).create(tenant="acme", role="recorder")[1]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-m", "pipeline.cli", "serve", "--lake", str(lake), "--port",
            str(port), "--no-embed", "--no-index"]
    with (root / "server.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=env, cwd=tree, stdout=subprocess.DEVNULL,
                                stderr=log)
    acks: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def record(client: int) -> None:
        for answer, sent, acked, _ in recorded_requests(url, key, client, stop, per_request):
            with lock:
                if not all_accepted(answer, per_request):
                    errors.append(answer.text[:300])
                    return
                acks.append(acked - sent)

    try:
        wait_until_healthy(url)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                          timeout=120) as http:  # the first request starts the children
            http.post("/v1/turns", json={"turns": [_record(10**6, 99)]})
        while _uncommitted(url):
            time.sleep(0.05)
        cpu_before = _tree_cpu_s(proc.pid)
        threads = [threading.Thread(target=record, args=(c,)) for c in range(clients)]
        started = run_for(threads, stop, seconds)
        loaded = time.perf_counter() - started
        deadline = time.monotonic() + 300
        while _uncommitted(url) and time.monotonic() < deadline:
            time.sleep(0.02)
        committed = time.perf_counter() - started
        cpu = _tree_cpu_s(proc.pid) - cpu_before
    finally:
        stop.set()
        stop_server(proc)
    if errors:
        raise SystemExit(f"recording failed: {errors[0]}")
    turns = len(acks) * per_request
    acks.sort()
    return {"turns": turns,
            "answered_turns_per_s": round(turns / loaded, 1),
            "ack_p50_ms": round(acks[len(acks) // 2] * 1000, 1),
            "ack_p95_ms": round(acks[int(len(acks) * 0.95)] * 1000, 1),
            "committed_turns_per_s": round(turns / committed, 1),
            "cpu_s_per_1000_turns": round(cpu / turns * 1000, 3)}


def main() -> None:
    """Alternate the trees' runs; print each run and the medians per tree as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--per-request", type=int, default=20)
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree] or [ROOT]
    runs: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            got = run_once(tree, seconds=args.seconds, clients=args.clients,
                           per_request=args.per_request)
            runs[str(tree)].append(got)
            print(json.dumps({"tree": str(tree), **got}), flush=True)
    summary = {tree: {name: statistics.median(r[name] for r in got) for name in got[0]}
               for tree, got in runs.items()}
    print(json.dumps({"medians": summary}, indent=1))


if __name__ == "__main__":
    main()
