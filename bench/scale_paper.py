"""How the design scales to 10^9 rows, on paper: arithmetic from figures measured on the 1M lake.

``python -m bench.scale_paper`` reads the 1M-row bench lake's index manifests and table sizes
plus the measured latencies and build times in ``bench/results/results-full.json``, and writes
``bench/results/scale-1e9.md``. Every assumption is a named constant below; every derived
figure shows its arithmetic, so a reader can redo it with other assumptions.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lake.index.manifest import list_partitions, read_current
from lake.index.opened import COLUMN_BYTES_PER_ROW
from lake.index.semantic import EXACT_MAX_ROWS

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
LAKE_1M = BENCH / ".cache" / "scale-1000000"

# -- assumptions (not measured) ------------------------------------------------------------
TARGET_ROWS = 10**9
TENANTS = 1_000
MONTHS = 36                  # three years of history kept
BIGGEST_TENANT_SHARE = 0.05  # skew: the largest tenant holds 5 % of all rows
NODE_RAM_GIB = 128           # a search node
NODE_CORES = 16
RAY_CORES = 128              # a batch cluster
EMBED_PER_CORE_S = 250       # MiniLM sentences/s per CPU core (this machine, short texts)


@dataclass(frozen=True)
class Measured:
    """Figures read from the 1M-row bench lake and its benchmark run."""

    rows: int
    partitions: int
    partitions_per_tenant: float
    index_bytes_per_row: dict[str, float]
    table_bytes_per_row: float
    file_bytes_per_row: float
    build_s: float
    ingest_s: float
    user_p50_ms: float
    user_p95_ms: float
    tenant_p50_ms: float
    ray: dict[str, Any]
    # the semantic indexes' 8-bit codes (what a search holds in memory of the vectors; 0 for
    # a lake of float inverted files, which hold all 1,536 bytes)
    code_bytes_per_row: float = 0.0


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def measure(lake: Path = LAKE_1M, results: Path | dict[str, Any] = RESULTS / "results-full.json"
            ) -> Measured:
    """Read the measured figures (the 1M lake must have been built by ``make bench-full``);
    ``results`` is the full run's results, or the file they were saved to."""
    parts = list_partitions(lake)
    if not parts:
        raise FileNotFoundError(f"no indexed 1M-row lake at {lake}; run `make bench-full`")
    rows = 0
    index_bytes: dict[str, int] = {}
    for tenant, month in parts:
        current = read_current(lake, tenant, month)
        assert current is not None
        rows += current[1].row_count
        for name, size in current[1].bytes.items():
            index_bytes[name] = index_bytes.get(name, 0) + size
    codes = sum(p.stat().st_size for p in (lake / "indexes").rglob("semantic/*.faiss")
                if json.loads((p.parent / "semantic.json").read_text()).get("codes"))
    full = results if isinstance(results, dict) else json.loads(results.read_text())
    scale = full["scale_1m"]
    tenants = {t for t, _ in parts}
    return Measured(
        rows=rows, partitions=len(parts), partitions_per_tenant=len(parts) / len(tenants),
        index_bytes_per_row={k: v / rows for k, v in sorted(index_bytes.items())},
        table_bytes_per_row=_folder_bytes(lake / "tables") / rows,
        file_bytes_per_row=_folder_bytes(lake / "objects") / rows,
        build_s=float(scale["index_build_s"]), ingest_s=float(scale["ingest_s"]),
        user_p50_ms=float(scale["user/hybrid"]["p50_ms"]),
        user_p95_ms=float(scale["user/hybrid"]["p95_ms"]),
        tenant_p50_ms=float(scale["tenant/hybrid"]["p50_ms"]),
        ray=full.get("ray_build_1m") or full.get("ray_build_100k") or {},
        code_bytes_per_row=codes / rows)


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n < 1e12 else f"{n / 1e12:,.2f} TB"


def _held(m: Measured, vec: float) -> str:
    """What a search holds of the vectors, in words."""
    if not m.code_bytes_per_row:
        return f"Flat vectors must sit in RAM ({vec:,.0f} B/row)"
    return (f"Vectors are held as 8-bit codes ({m.code_bytes_per_row:,.0f} B/row, memory-mapped)"
            ", the float rows read from disk only for the rows a search scores exactly (a "
            "scope's, or the candidates it re-scores)")


def paper(m: Measured) -> str:
    """The Markdown section: partitions, index sizes, memory per node, fan-out, batch time."""
    n = TARGET_ROWS
    per_row = sum(m.index_bytes_per_row.values())
    sizes = ", ".join(f"{k} {v:,.0f}" for k, v in m.index_bytes_per_row.items())
    parts = TENANTS * MONTHS
    avg_part = n / parts
    big_part = n * BIGGEST_TENANT_SHARE / MONTHS
    vec = m.index_bytes_per_row.get("semantic", 0.0)
    per_part_ms = m.user_p50_ms / m.partitions_per_tenant
    build_per_row_s = m.build_s / m.rows
    total_build_core_s = build_per_row_s * n
    big_part_build_s = build_per_row_s * big_part
    embed_core_s = n / EMBED_PER_CORE_S
    node_bytes = NODE_RAM_GIB * 2**30 * 0.75  # a quarter left to the OS, Python and caches
    hot_months = 3
    # what a search holds per row: the vectors' codes (or floats) and the row columns
    ram_per_row = (m.code_bytes_per_row or vec) + COLUMN_BYTES_PER_ROW
    hot_bytes = ram_per_row * n * hot_months / MONTHS
    ray_line = ""
    if m.ray:
        one = m.ray.get("ray_1_worker", {}).get("build_s")
        two = m.ray.get("ray_2_workers", {}).get("build_s")
        if one and two:
            ray_line = (f" On this machine the partition-parallel build of the "
                        f"{m.ray.get('rows', 0):,}-row lake took {one:.0f} s with one Ray worker "
                        f"and {two:.0f} s with two ({one / two:.2f}×): a two-core box has no "
                        "spare core for the second worker, but on a cluster tasks scale with "
                        "cores until the largest partition is the critical path.")
    lines = [
        "## Scaling to 10^9 rows (on paper)",
        "",
        f"Measured on the 1M-row lake ({m.rows:,} rows, {m.partitions} tenant × month "
        f"partitions): index artifacts take {per_row:,.0f} bytes per row ({sizes}); the Delta "
        f"tables {m.table_bytes_per_row:,.0f} bytes per row (the 384-d float vector is "
        f"1,536 of them) and hosted files {m.file_bytes_per_row:,.0f}. Assumed for 10^9 rows: "
        f"{TENANTS:,} tenants, {MONTHS} months kept, the largest tenant holding "
        f"{BIGGEST_TENANT_SHARE:.0%} of the rows.",
        "",
        f"- **Partitions.** {TENANTS:,} × {MONTHS} = {parts:,} partitions of "
        f"10^9 / {parts:,} ≈ {avg_part:,.0f} rows on average; the largest tenant's are "
        f"10^9 × {BIGGEST_TENANT_SHARE} / {MONTHS} ≈ {big_part:,.0f} rows each. Partitions stay "
        "the unit of build, cache and fan-out; none is larger than one node's memory.",
        f"- **Index size.** {per_row:,.0f} B × 10^9 ≈ {_gb(per_row * n)} of artifacts (vectors "
        f"{_gb(vec * n)}), plus {_gb(m.table_bytes_per_row * n)} of Delta tables and "
        f"{_gb(m.file_bytes_per_row * n)} of hosted files on the object store. The largest "
        f"partition's build is {big_part:,.0f} × {per_row:,.0f} B ≈ {_gb(big_part * per_row)}.",
        f"- **Memory per search node.** {_held(m, vec)} plus the row columns "
        f"({COLUMN_BYTES_PER_ROW} B/row): {ram_per_row:,.0f} B/row; rows, trigram and tantivy "
        f"files are memory-mapped and paged on demand, and a memory budget closes the least "
        f"recently used partitions. A {NODE_RAM_GIB} GiB node with three quarters usable holds "
        f"≈ {node_bytes / ram_per_row / 1e6:,.0f}M rows in memory (its disk holds the "
        f"{per_row:,.0f} B/row of artifacts). Keeping the last {hot_months} months hot needs "
        f"{ram_per_row:,.0f} B × 10^9 × {hot_months}/{MONTHS} ≈ {_gb(hot_bytes)}, i.e. "
        f"{math.ceil(hot_bytes / node_bytes)} node(s), sharded by tenant; older "
        "months load from the object store into the build-id cache on first use. Partitions "
        f"past {EXACT_MAX_ROWS:,} rows get an inverted file when its calibrated recall holds "
        "(real embeddings; random vectors fall back to flat), which keeps per-query vector "
        "work to the few lists probed (about 1/√rows of the rows each) instead of a scan of "
        "every row.",
        f"- **Fan-out.** A query reads every partition of its tenant in the requested time "
        f"range. Measured: user scope at 1M rows is {m.user_p50_ms:.1f} ms p50 over "
        f"{m.partitions_per_tenant:.0f} partitions ≈ {per_part_ms:.1f} ms per partition. "
        f"Without a time range a tenant's {MONTHS} months cost {MONTHS} × {per_part_ms:.1f} ≈ "
        f"{MONTHS * per_part_ms:,.0f} ms on one core, or ≈ {MONTHS * per_part_ms / NODE_CORES:,.0f}"
        f" ms spread over {NODE_CORES} cores; so the service must search partitions in "
        "parallel and merge a tenant's cold months into quarter or year partitions (36 → "
        "≈ 10 partitions) before this size. Tenant scope measured "
        f"{m.tenant_p50_ms:.0f} ms p50 at 1M rows; it grows with the tenant's row count, not "
        "with the lake's, because no call crosses tenants.",
        f"- **Batch jobs.** Index builds measured {m.build_s:.0f} s for {m.rows:,} rows on one "
        f"process ≈ {build_per_row_s * 1e6:,.0f} µs per row → {total_build_core_s / 3600:,.0f} "
        f"core-hours for 10^9 rows, ≈ {total_build_core_s / RAY_CORES / 3600:,.1f} h on "
        f"{RAY_CORES} Ray cores, bounded below by the largest partition "
        f"({big_part_build_s / 60:,.0f} min as one task).{ray_line} Embedding at "
        f"{EMBED_PER_CORE_S} sentences/s per core is {embed_core_s / 3600:,.0f} core-hours "
        f"(≈ {embed_core_s / RAY_CORES / 3600:,.0f} h on {RAY_CORES} cores); that is the "
        "cost that argues for GPUs, and incremental builds mean only changed partitions "
        "(normally the current month) are rebuilt after the first load.",
    ]
    return "\n".join(lines) + "\n"


TEN_MILLION = RESULTS / "scale-10000000.json"  # written by python -m bench.scale_10m
_TEN_MILLION_HEADING = "### Measured at ten million rows"


def ten_million_section(figures: dict[str, Any]) -> str:
    """The paper's paragraph of the ten-million-row run (bench.scale_10m's JSON): what it
    measured, and the same per-row figures carried to 10^9 rows."""
    rows = figures["rows"]
    ingest_s = figures.get("ingest_s")  # None: a resumed build, whose ingest was not timed
    build_s = (ingest_s or 0.0) + figures["index_build_s"]
    lake_bytes = figures["disk_mb"]["lake"] * 2**20
    per_row = lake_bytes / rows
    index_us = figures["index_build_s"] / rows * 1e6
    rss = max(figures["user"]["peak_rss_mb"], figures["tenant"]["peak_rss_mb"])
    return "\n".join([
        _TEN_MILLION_HEADING,
        "",
        f"`python -m bench.scale_10m` on {figures.get('cpu', 'this machine')} "
        f"({figures.get('cores', '?')} cores): {rows:,} rows built in {build_s / 60:,.0f} min "
        f"(ingest {'not timed' if ingest_s is None else f'{ingest_s:,.0f} s'}, index build "
        f"{figures['index_build_s']:,.0f} s "
        f"≈ {index_us:,.0f} µs per row → {index_us * TARGET_ROWS / 1e6 / 3600:,.0f} core-hours "
        f"of index build for 10^9 rows). Hybrid search p50 / p95: user scope "
        f"{figures['user']['p50_ms']:.1f} / {figures['user']['p95_ms']:.1f} ms, tenant scope "
        f"{figures['tenant']['p50_ms']:.1f} / {figures['tenant']['p95_ms']:.1f} ms; a search "
        f"process's peak RSS {rss:,} MB (target ≤ 6 GB). The lake takes "
        f"{lake_bytes / 1e9:,.1f} GB on disk ({per_row:,.0f} B per row: "
        f"{_gb(per_row * TARGET_ROWS)} at 10^9 rows).",
        "",
    ])


def with_ten_million(text: str, figures: dict[str, Any]) -> str:
    """``text`` (the paper) with its ten-million-row paragraph put in, or replaced."""
    kept = text.split(_TEN_MILLION_HEADING)[0].rstrip("\n") + "\n\n"
    return kept + ten_million_section(figures)


def write(results: Path | dict[str, Any] = RESULTS / "results-full.json") -> dict[str, Any]:
    """Write bench/results/scale-1e9.md (with the ten-million-row run's paragraph when
    bench/results/scale-10000000.json is there); returns its headline figures."""
    m = measure(results=results)
    text = paper(m)
    if TEN_MILLION.exists():
        text = with_ten_million(text, json.loads(TEN_MILLION.read_text()))
    (RESULTS / "scale-1e9.md").write_text(text)
    return {"index_bytes_per_row": round(sum(m.index_bytes_per_row.values())),
            "table_bytes_per_row": round(m.table_bytes_per_row),
            "report": "bench/results/scale-1e9.md"}


def main(argv: list[str] | None = None) -> None:
    """Write bench/results/scale-1e9.md and print it; ``--ten-million`` only puts the
    ten-million-row run's paragraph into the paper already written."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.scale_paper")
    parser.add_argument("--ten-million", action="store_true",
                        help=f"add {TEN_MILLION.name}'s figures to the existing paper")
    args = parser.parse_args(argv)
    paper_file = RESULTS / "scale-1e9.md"
    if args.ten_million:
        if not TEN_MILLION.exists():
            raise SystemExit(f"error: no {TEN_MILLION}: run python -m bench.scale_10m first")
        paper_file.write_text(with_ten_million(paper_file.read_text(),
                                               json.loads(TEN_MILLION.read_text())))
    else:
        write()
    print(paper_file.read_text())


if __name__ == "__main__":
    main()
