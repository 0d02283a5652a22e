"""Segment benchmark: warm record-until-searchable, incremental vs full build, compaction.

Run: ``.venv/bin/python -m bench.segments_bench [small_turns large_turns]`` (default 500 and
10000 turns, two rows each, one month partition). Embeddings come from the hashing embedder
(no model download; the embedding cost is not what is measured here). Figures:

* ``record``: a warm :class:`pipeline.live.LiveWriter` records one turn at a time, then a warm
  search service searches for the turn's own word until it is found; p50 / p95 per size and
  their ratio (large / small). Compactions triggered on the way are counted and included.
* ``incremental``: a 1 % append indexed as a delta segment, against a full build of the same
  partition, as a ratio.
* ``compaction``: tenant-scope search p50 over a partition with many single-turn delta
  segments, before and after ``compact_indexes``; ``compaction_thresholds``: the same after
  single-turn appends under the settings' compaction thresholds (an untended live lake).
* ``dedupe_read``: a warm writer's deduplication read after single-turn appends, the plain
  filtered TurnLog read against pipeline.known_turns.KnownTurns.
* ``cli_one_turn``: wall time of ``turnlake ingest --no-embed one.jsonl`` (a new process each
  time, start-up, delta segment and any compaction it triggers included) into the large lake
  and into a 10-turn lake, alternated; medians and their ratio. Taken on the bulk-built lake
  (plus the record figure's 40 turns), and again as ``cli_one_turn_untended`` after every
  other figure's single-turn appends (hundreds of small files, as before `turnlake
  maintain`): a new process has no kept view, so it reads the conversation's TurnLogs by a
  filtered scan over every file.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lake.embedding.hashing import HashingEmbedder
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.index_build import build_indexes, compact_indexes
from pipeline.jobs import run_ingest
from pipeline.live import LiveWriter

START = datetime(2026, 3, 1, tzinfo=UTC)
MODEL = "hashing-64"
_VOCAB = [f"w{a}{b}{c}" for a in "bcdfghk" for b in "aeiou" for c in "lmnprst"]  # 245 words


def _user(n: int) -> str:
    return f"u-{(n // 10) % 50}"  # ten turns a conversation, one user per conversation


def _record(n: int, rng: random.Random, marker: str | None = None) -> str:
    words = " ".join(rng.choice(_VOCAB) for _ in range(12))
    at = START + timedelta(seconds=20 * n)  # 100k turns still fit in one month
    return json.dumps({
        "schema": "turnlake.turn.v1", "tenant": "acme", "app": "desk", "agent": "bot",
        "user_id": _user(n), "conversation_id": f"c-{n // 10}", "turn_id": f"t-{n:06d}",
        "writer": "minimal", "started_at": at.isoformat(),
        "ended_at": (at + timedelta(seconds=20)).isoformat(),
        "submissions": [{"text": f"{words} {marker or ''}".strip(), "event_type": "prompt",
                         "batch": 0, "arrived_at": at.isoformat()}],
        "completion": {"text": f"answer {words[:40]}", "at": (at + timedelta(seconds=10))
                       .isoformat()}})


def _lake(root: Path, turns: int, seed: int = 1) -> Settings:
    settings = Settings(lake=root, embedding_model=MODEL)
    rng = random.Random(seed)
    run_ingest(settings, records=[_record(n, rng) for n in range(turns)],
               embedder=HashingEmbedder(64))
    return settings


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def record_until_searchable(settings: Settings, turns: int, first: int) -> dict[str, Any]:
    """Warm writer and service: per turn, the time until a search for it finds it."""
    writer = LiveWriter(settings, HashingEmbedder(64))
    service = SearchService(LakeStore(settings.lake), embedder=HashingEmbedder(64))
    rng = random.Random(7)
    waits: list[float] = []
    compactions = 0
    for i in range(turns + 1):  # the first turn warms up the writer and service
        n = first + i
        marker = f"zq{n}x"
        started = time.perf_counter()
        report = writer.record([_record(n, rng, marker)])
        if report.ingest.accepted != 1:
            raise RuntimeError(f"turn {n} was not accepted: {report.ingest.quarantined}")
        compactions += len(report.build.compacted) if report.build else 0
        for _ in range(50):
            result = service.search(SearchRequest(marker, Principal("acme", _user(n)),
                                                  as_of=START + timedelta(days=40)))
            if any(h.turn_id == f"t-{n:06d}" for h in result.hits):
                break
        else:
            raise RuntimeError(f"turn {n} not searchable after recording")
        if i:
            waits.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(_pct(waits, 0.5), 1), "p95_ms": round(_pct(waits, 0.95), 1),
            "turns": turns, "compactions": compactions}


def incremental_vs_full(settings: Settings, turns: int, first: int) -> dict[str, Any]:
    """A 1 % append as a delta segment against a full build of the partition."""
    rng = random.Random(11)
    extra = max(1, turns // 100)
    run_ingest(settings, records=[_record(first + n, rng) for n in range(extra)],
               embedder=HashingEmbedder(64), index=False)
    store = LakeStore(settings.lake)
    t = time.perf_counter()
    delta = build_indexes(store, model=MODEL, compaction=None)
    delta_s = time.perf_counter() - t
    assert delta.appended, "the append was not indexed as a delta segment"
    t = time.perf_counter()
    build_indexes(store, model=MODEL, full=True)
    full_s = time.perf_counter() - t
    return {"append_turns": extra, "delta_s": round(delta_s, 3), "full_s": round(full_s, 3),
            "ratio": round(delta_s / full_s, 3)}


def _search_p50(service: SearchService, queries: list[str]) -> float:
    times = []
    for q in queries:
        t = time.perf_counter()
        service.search(SearchRequest(q, Principal("acme", analyst=True), scope="tenant",
                                     as_of=START + timedelta(days=40)))
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def compaction_effect(settings: Settings, appends: int, first: int, *,
                      thresholds: bool = False) -> dict[str, Any]:
    """Search p50 after ``appends`` single-turn appends, then after compaction: with every
    append a delta segment of its own (compaction off), or with the settings' thresholds
    (``thresholds``: what an untended live lake looks like)."""
    rng = random.Random(5)
    live = settings if thresholds else settings.with_(index_compact_segments=10**9,
                                                      index_compact_ratio=1e9)
    writer = LiveWriter(live, HashingEmbedder(64))
    for i in range(appends):
        writer.record([_record(first + i, rng)])
    store = LakeStore(settings.lake)
    manifest = partition_statuses(store)[("acme", "2026-03")].manifest
    segments = len(manifest.live_segments) if manifest is not None else 0
    queries = [" ".join(rng.sample(_VOCAB, 2)) for _ in range(60)]
    service = SearchService(store, embedder=HashingEmbedder(64))
    _search_p50(service, queries[:10])  # warm: open the segments
    before = _search_p50(service, queries)
    compact_indexes(store, model=MODEL)
    service = SearchService(store, embedder=HashingEmbedder(64))
    _search_p50(service, queries[:10])
    after = _search_p50(service, queries)
    return {"appends": appends, "segments_before": segments,
            "search_p50_ms_before": round(before, 2),
            "search_p50_ms_after": round(after, 2), "ratio": round(before / after, 2)}


def dedupe_read(settings: Settings, appends: int, first: int, probes: int = 30
                ) -> dict[str, Any]:
    """The deduplication read of a warm writer after ``appends`` single-turn ingests (a file
    per commit, as a live lake gets before `turnlake maintain`): the plain filtered read of
    the conversation's TurnLogs against pipeline.known_turns.KnownTurns, p50 over ``probes``
    further turns."""
    from lake.timelines import conversation_filter
    from pipeline.known_turns import COLUMNS, KnownTurns

    writer = LiveWriter(settings, HashingEmbedder(64), embed=False)
    rng = random.Random(3)
    for n in range(first, first + appends):
        writer.ingest([_record(n, rng)])
    store = LakeStore(settings.lake)
    record = json.loads(_record(first + appends, rng))
    asked = {(record["tenant"], record["conversation_id"])}
    known = KnownTurns(store)
    known.read(asked)
    plain, kept = [], []
    for n in range(first + appends, first + appends + probes):
        writer.ingest([_record(n, rng)])
        t = time.perf_counter()
        store.read(Table.TURN_LOGS, columns=list(COLUMNS), filter=conversation_filter(asked))
        plain.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        known.read(asked)
        kept.append((time.perf_counter() - t) * 1000)
    return {"turn_log_files": len(store.data_files(Table.TURN_LOGS)),
            "plain_read_p50_ms": round(statistics.median(plain), 1),
            "kept_view_p50_ms": round(statistics.median(kept), 1),
            "ratio": round(statistics.median(kept) / statistics.median(plain), 3)}


def cli_one_turn(large: Settings, root: Path, first: int, tries: int = 7) -> dict[str, Any]:
    """``turnlake ingest`` of one new turn per process into ``large`` and into a 10-turn lake
    made under ``root``, taken in turn so that drift in the machine's speed hits both."""
    root.mkdir(parents=True, exist_ok=True)
    small = _lake(root / "ten-turns", 10)
    env = {**os.environ, "TURNLAKE_EMBEDDING_MODEL": MODEL}
    rng = random.Random(13)
    waits: dict[str, list[float]] = {"large": [], "small": []}
    for i in range(tries):
        for name, settings in (("large", large), ("small", small)):
            line = root / f"one-{name}-{i}.jsonl"
            line.write_text(_record(first + i, rng) + "\n")
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pipeline.cli", "ingest", "--no-embed",
                                   "--lake", str(settings.lake), str(line)],
                                  env=env, capture_output=True, text=True, timeout=600)
            waits[name].append(time.perf_counter() - started)
            if done.returncode != 0:
                raise RuntimeError(f"turnlake ingest failed: {done.stderr[-2000:]}")
    large_s, small_s = statistics.median(waits["large"]), statistics.median(waits["small"])
    return {"tries": tries, "large_p50_s": round(large_s, 2), "ten_turns_p50_s": round(small_s, 2),
            "ratio": round(large_s / small_s, 2)}


def bench_segments(small: int = 500, large: int = 10_000, record_turns: int = 40,
                   appends: int = 100, live_appends: int = 200) -> dict[str, Any]:
    """Every figure of this module, on fresh lakes in a temporary folder."""
    out: dict[str, Any] = {"small_rows": 2 * small, "large_rows": 2 * large}
    with tempfile.TemporaryDirectory(prefix="turnlake-segments-") as tmp:
        for name, turns in (("small", small), ("large", large)):
            settings = _lake(Path(tmp) / name, turns)
            out[f"record_{name}"] = record_until_searchable(settings, record_turns, turns)
            print(f"record_{name}: {out[f'record_{name}']}", flush=True)
            if name == "large":
                out["cli_one_turn"] = cli_one_turn(settings, Path(tmp), turns + 500)
                print(f"cli_one_turn: {out['cli_one_turn']}", flush=True)
                out["incremental_1pct"] = incremental_vs_full(settings, turns, turns + 1000)
                print(f"incremental_1pct: {out['incremental_1pct']}", flush=True)
                out["compaction"] = compaction_effect(settings, appends,
                                                      turns + 2000 + turns // 100)
                print(f"compaction: {out['compaction']}", flush=True)
                out["compaction_thresholds"] = compaction_effect(
                    settings, live_appends, turns + 3000 + appends + turns // 100,
                    thresholds=True)
                out["dedupe_read"] = dedupe_read(
                    settings, live_appends, turns + 4000 + appends + live_appends)
                print(f"dedupe_read: {out['dedupe_read']}", flush=True)
                out["cli_one_turn_untended"] = cli_one_turn(
                    settings, Path(tmp) / "untended", turns + 5000 + appends + 2 * live_appends)
                out["cli_one_turn_untended"]["turn_log_files"] = len(
                    LakeStore(settings.lake).data_files(Table.TURN_LOGS))
                print(f"cli_one_turn_untended: {out['cli_one_turn_untended']}", flush=True)
    out["record_p50_ratio"] = round(out["record_large"]["p50_ms"]
                                    / out["record_small"]["p50_ms"], 2)
    return out


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:3]] or [500, 10_000]
    print(json.dumps(bench_segments(*sizes), indent=2))
