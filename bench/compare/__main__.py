"""`python -m bench.compare --quick|--full`: turnlake vs LanceDB vs Postgres on the same rows.

Quick: 100k generated rows (latency) plus LoCoMo (recall). Full: 1M generated rows. Writes
bench/results/compare-<mode>.json, compare-<mode>.md and compare-<mode>-*.png.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(f"terminated by signal {signum}")


def main() -> None:
    """Parse options, run (or re-render a saved run), save the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.compare")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="100k rows (default)")
    size.add_argument("--full", action="store_true", help="1M rows")
    parser.add_argument("--queries", type=int, default=300, help="generated scale queries")
    parser.add_argument("--rounds", type=int, default=2,
                        help="latency rounds per system, interleaved, samples pooled")
    parser.add_argument("--variants", nargs="+", default=["minimal", "rich"],
                        choices=["minimal", "rich"], help="LoCoMo lakes to score")
    parser.add_argument("--no-locomo", action="store_true", help="skip the recall runs")
    parser.add_argument("--vectors", choices=["random", "clustered"], default="random",
                        help="the scale lake's vectors (bench/scale.py): random, the worst case "
                             "for any vector index, or clustered, text-like; reports of "
                             "clustered runs are named compare-<size>-clustered")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep LanceDB/Postgres builds in this folder and reuse them")
    parser.add_argument("--report-only", type=Path, default=None,
                        help="re-render the report from a saved results JSON")
    args = parser.parse_args()
    if args.queries < 20 or args.rounds < 1:
        parser.error("--queries must be >= 20 and --rounds >= 1")
    from bench.compare.report import write_report

    # a terminated run must still leave through the context managers that stop Postgres
    signal.signal(signal.SIGTERM, _exit_on_term)

    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.report_only is not None:
        results = json.loads(args.report_only.read_text())
    else:
        from bench.compare.runner import run

        mode = "full" if args.full else "quick"
        t = time.perf_counter()
        results = run(mode, rounds=args.rounds, n_queries=args.queries,
                      variants=args.variants, skip_locomo=args.no_locomo,
                      work_dir=args.work, vectors=args.vectors)
        results["wall_s"] = round(time.perf_counter() - t, 1)
        (RESULTS / f"compare-{results['mode']}.json").write_text(json.dumps(results, indent=1))
    path = write_report(results, RESULTS)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
