"""Search in a lake of many tenants: what one user's search pays for the other tenants.

Run: ``.venv/bin/python -m bench.tenants_bench [tenants]`` (default 300). The demo's turns
(30 a tenant) are spread over ``tenants`` tenants by conversation, four months each: about a
thousand small partitions, with the scale bench's text-like vectors. Before it searches, a
search checks that the indexes it reads are current (lake.index.status). Figures:

* ``search_p50_ms``: user-scope hybrid search (k=10, snippets) p50, the lake at rest and
  the searched partitions opened by a search before.
* ``check``: that check as a search makes it, over the searching tenant's index pointers
  (``StatusCache.of_tenant``), against the same check over the whole lake's
  (``StatusCache.get``, what every search made before); medians of each and their ratio.
* ``after_write``: another tenant records a turn (a real ingest commit; its index is left
  stale, a writer ahead of its indexer), then a search runs: its time, against a re-read of
  every partition's status (``partition_statuses``, what the first search after any write
  paid before). The two are alternated, each after its own write; medians and their ratio.
* ``live_index_step_ms``: a live writer (pipeline.live.LiveWriter) records one turn of some
  tenant, then indexes it; the index step's median (a delta segment, or past the compaction
  thresholds a rebuild of that small partition).

Query embedding is excluded (the bench embedder draws vectors); everything is on one core.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.scale import NOW, bench_embedder, make_queries
from lake.embedding.rows import with_embeddings
from lake.index.status import StatusCache, partition_statuses
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.demo import generate_lines
from pipeline.index_build import build_indexes
from pipeline.ingest import Ingestor
from pipeline.live import LiveWriter

TURNS_PER_TENANT = 30
_VECTORS = "clustered"


def spread_lines(tenants: int, *, seed: int = 7) -> list[str]:
    """The demo's records, each conversation moved to one of ``tenants`` tenants."""
    lines = []
    for line in generate_lines(users=tenants, turns=tenants * TURNS_PER_TENANT, seed=seed,
                               now=NOW):
        record = json.loads(line)
        record["tenant"] = f"t{zlib.crc32(record['conversation_id'].encode()) % tenants:04d}"
        lines.append(json.dumps(record))
    return lines


def bench_tenants(tenants: int = 300, queries: int = 200, writes: int = 12) -> dict[str, Any]:
    """The figures of the module notes, on a lake built afresh in a temporary folder."""
    embedder = bench_embedder(_VECTORS, 5)

    def hook(table: pa.Table) -> pa.Table:
        return with_embeddings(table, embedder.encode([""] * table.num_rows), embedder.name,
                               "done")

    with tempfile.TemporaryDirectory(prefix="turnlake-tenants-") as tmp:
        settings = Settings(lake=Path(tmp) / "lake", embedding_model=embedder.name,
                            ingest_batch_turns=50_000)
        lines = spread_lines(tenants)
        Ingestor(settings, rows_hook=hook).ingest_records(lines)
        store = LakeStore(settings.lake)
        t = time.perf_counter()
        build_indexes(store, model=embedder.name)
        build_s = time.perf_counter() - t
        partitions = len(partition_statuses(store))
        asked = make_queries(store, queries)
        service = SearchService(LakeStore(settings.lake),
                                embedder=bench_embedder(_VECTORS, 5))

        def search(tenant: str, user: str, query: str) -> float:
            started = time.perf_counter()
            service.search(SearchRequest(query, Principal(tenant, user), k=10,
                                         snippets="both", as_of=NOW))
            return _ms(started)

        for q in asked:  # every searched tenant's partitions opened once
            search(*q)
        idle = [search(*q) for q in asked]

        cache = StatusCache(LakeStore(settings.lake))
        cache.get()
        for tenant, _, _ in asked[:5]:
            cache.of_tenant(tenant)
        one = [_timed(lambda tenant=tenant: cache.of_tenant(tenant)) for tenant, _, _ in asked]
        whole = [_timed(cache.get) for _ in asked]

        writer = Ingestor(settings, rows_hook=hook)
        searched, reread = [], []
        for i in range(2 * writes):
            tenant, user, query = asked[i % len(asked)]
            record = json.loads(next(line for line in lines
                                     if json.loads(line)["tenant"] != tenant))
            record["turn_id"] = f"t-bench-{i:04d}"
            writer.ingest_records([json.dumps(record)])
            if i % 2 == 0:
                searched.append(search(tenant, user, query))
            else:
                reread.append(_timed(lambda: partition_statuses(LakeStore(settings.lake))))
        live = LiveWriter(settings, embedder=embedder)
        steps = []
        for i in range(writes):
            record = json.loads(lines[(i * 7919) % len(lines)])
            record["turn_id"] = f"t-live-{i:04d}"
            touched = live.ingest([record]).ingest.partitions
            steps.append(_timed(lambda touched=touched: live.index(touched)))
    check_one, check_whole = statistics.median(one), statistics.median(whole)
    after, full = statistics.median(searched), statistics.median(reread)
    return {
        "tenants": tenants, "partitions": partitions, "turns": len(lines),
        "build_s": round(build_s, 1),
        "search_p50_ms": round(statistics.median(idle), 2),
        "check": {"one_tenant_ms": round(check_one, 3), "whole_lake_ms": round(check_whole, 3),
                  "ratio": round(check_whole / check_one, 1)},
        "after_write": {"search_ms": round(after, 1), "whole_lake_reread_ms": round(full, 1),
                        "ratio": round(full / after, 1), "writes": writes},
        "live_index_step_ms": round(statistics.median(steps), 1),
    }


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return _ms(started)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


if __name__ == "__main__":
    given = sys.argv[1] if len(sys.argv) > 1 else "300"
    if not given.isdigit() or int(given) < 1:
        sys.exit(f"tenants must be a whole number of at least 1, not {given!r}")
    print(json.dumps(bench_tenants(int(given)), indent=2))
