"""Markdown report and PNG plots of a comparison run (bench/results/compare-<mode>.*)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# Figures measured earlier on this machine (LoCoMo rows), quoted by issue 7: what the
# harness must reproduce or explain.
REFERENCE = {
    "kdcube postgres kd-hybrid recall@5/10/25": ".455 / .560 / .694",
    "kdcube postgres semantic p50": "1.2 ms",
    "kdcube postgres kd-lexical p50 (recall .011)": "0.3 ms",
    "kdcube postgres kd-trigram p50 / p95": "95 ms / 168 ms",
    "lancedb 0.40 hybrid p50 / p95": "8.1 ms / 13.7 ms",
    "lancedb 0.40 hybrid recall@5/10/25": ".480 / .589 / .742",
}


_ELIDED = "'[...]'"
_VECTOR = re.compile(r"'\[[-0-9.e,]+\]'")


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def _lat_rows(systems: dict[str, Any], key: str | None = None) -> list[str]:
    lines = ["| system | arm | p50 ms | p95 ms | p99 ms | mean ms | n |",
             "|---|---|---|---|---|---|---|"]
    for name, sys_res in systems.items():
        for arm, v in sys_res["arms"].items():
            lat = v[key] if key else v
            lines.append(f"| {name} | {arm} | {lat['p50_ms']:.2f} | {lat['p95_ms']:.2f} | "
                         f"{lat['p99_ms']:.2f} | {lat['mean_ms']:.2f} | {lat['n']} |")
    return lines


def _ratio_rows(ratios: dict[str, Any]) -> list[str]:
    lines = ["| pair | p50 ratio | p95 ratio |", "|---|---|---|"]
    lines += [f"| {pair} | {r['p50']:.2f} | {r['p95']:.2f} |" for pair, r in ratios.items()]
    return lines


def _rss_rows(systems: dict[str, Any]) -> list[str]:
    lines = ["| system | search process peak RSS MiB | server backend peak RSS MiB |",
             "|---|---|---|"]
    for name, s in systems.items():
        backend = s.get("server_backend_peak_rss_kib")
        lines.append(f"| {name} | {s['peak_rss_kib'] / 1024:.0f} | "
                     f"{'-' if backend is None else f'{backend / 1024:.0f}'} |")
    return lines


def _build_rows(build: dict[str, Any]) -> list[str]:
    t, lance, pg = build.get("turnlake", {}), build.get("lancedb", {}), build.get("postgres", {})
    lines = ["| system | build / ingest | on disk MiB |", "|---|---|---|"]
    if "ingest_s" in t:
        lines.append(f"| turnlake | ingest of the full turn records {t['ingest_s']:.1f} s + "
                     f"index build {t['index_build_s']:.1f} s | indexes "
                     f"{_mb(t['bytes']['indexes'])}, content_rows {_mb(t['bytes']['content_rows'])}"
                     f", whole lake {_mb(t['bytes']['lake_total'])} |")
    elif "bytes" in t:
        lines.append(f"| turnlake | (prebuilt LoCoMo lake) | indexes {_mb(t['bytes']['indexes'])}"
                     f", whole lake {_mb(t['bytes']['lake_total'])} |")
    if lance:
        lines.append(f"| lancedb | load {lance['load_s']:.1f} s + vector index "
                     f"{lance['vector_index_s']:.1f} s ({lance['vector_index']}) + FTS "
                     f"{lance['fts_index_s']:.1f} s + btree {lance['btree_s']:.1f} s = "
                     f"{lance['total_s']:.1f} s | {_mb(lance['bytes'])} |")
    if pg:
        steps = " + ".join(f"{k[:-2]} {v:.1f} s" for k, v in pg.items()
                           if k.endswith("_s") and k not in ("total_s", "wall_s"))
        lines.append(f"| postgres | {steps} = {pg['total_s']:.1f} s | table+indexes "
                     f"{_mb(pg['bytes'])} (indexes {_mb(pg['index_bytes'])}), data dir "
                     f"{_mb(pg.get('data_dir_bytes'))} |")
    return lines


def _failed_rows(failed: dict[str, str]) -> list[str]:
    if not failed:
        return []
    lines = ["", "### Systems that failed here (the others still report)", "",
             "| system | step: reason |", "|---|---|"]
    lines += [f"| {name} | {reason.replace('|', '/')} |" for name, reason in failed.items()]
    return lines


def _machine_lines(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    simd = m.get("cpu_simd")
    lines = [f"CPU: {m['cpu']}; SIMD flags: {' '.join(simd) if simd else 'not recorded'} "
             "(every flag is in the JSON).", ""]
    pg = results.get("postgres", {})
    if pg.get("pgvector"):
        lines += [f"pgvector used: {pg['pgvector']}.", ""]
    for name, reason in pg.get("rejected", {}).items():
        lines += [f"pgvector build refused here: {name}: {reason}.", ""]
    return lines


def _profile_rows(profile: dict[str, Any]) -> list[str]:
    lines = [f"Profiled total: {profile['profiled_ms_per_query']:.2f} ms/query (cProfile "
             "overhead included).", "", "| stage (cumulative) | ms/query |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in profile["ms_per_query_by_stage"].items()]
    lines += ["", "| top self time | ms/query |", "|---|---|"]
    lines += [f"| `{t['function']}` | {t['ms_per_query']:.2f} |" for t in profile["top_self_time"]]
    return lines


def _recall_rows(locomo: dict[str, Any]) -> list[str]:
    lines = ["| rows | system | arm | recall@5 | recall@10 | recall@25 | p50 ms | p95 ms |",
             "|---|---|---|---|---|---|---|---|"]
    for variant, res in locomo.items():
        if not isinstance(res, dict) or "systems" not in res:
            continue
        for name, s in res["systems"].items():
            for arm, v in s["arms"].items():
                r, lat = v["recall"], v["latency"]
                lines.append(f"| {variant} ({res['rows']}) | {name} | {arm} | {r['5']:.3f} | "
                             f"{r['10']:.3f} | {r['25']:.3f} | {lat['p50_ms']:.2f} | "
                             f"{lat['p95_ms']:.2f} |")
    return lines


def plot(results: dict[str, Any], folder: Path) -> list[str]:
    """Latency by system/arm (p50 and p95) and hybrid recall by k; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.plots import latency_bars

    mode = results["mode"]
    made: list[str] = []
    sets: list[tuple[str, Any, str | None, str]] = []
    if "scale" in results:
        sets.append(("scale", results["scale"]["systems"], None,
                     f"{results['scale']['rows']} rows"))
    if "locomo" in results and "minimal" in results["locomo"]:
        sets.append(("locomo", results["locomo"]["minimal"]["systems"], "latency",
                     "LoCoMo minimal rows"))
    if not sets:
        return made
    fig, axes = plt.subplots(len(sets), 1, figsize=(12, 4 * len(sets)), squeeze=False)
    for ax, (_, systems, key, title) in zip(axes[:, 0], sets, strict=True):
        labels, p50, p95 = [], [], []
        for name, s in systems.items():
            for arm, v in s["arms"].items():
                lat = v[key] if key else v
                labels.append(f"{name}\n{arm}")
                p50.append(lat["p50_ms"])
                p95.append(lat["p95_ms"])
        latency_bars(ax, labels, p50, p95, log=True, ylabel="ms per query (log)",
                     title=f"search latency, user scope, {title} (query embedding excluded)")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    name = f"compare-{mode}-latency.png"
    fig.savefig(folder / name, dpi=100)
    plt.close(fig)
    made.append(name)
    if "locomo" in results:
        variants = [v for v in ("minimal", "rich") if v in results["locomo"]]
        fig, axes = plt.subplots(1, len(variants), figsize=(6 * len(variants), 4),
                                 sharey=True, squeeze=False)
        for ax, variant in zip(axes[0], variants, strict=True):
            for sys_name, s in results["locomo"][variant]["systems"].items():
                for arm in ("hybrid", "kd-hybrid"):
                    if arm in s["arms"]:
                        rec = s["arms"][arm]["recall"]
                        ax.plot([int(k) for k in rec], list(rec.values()), marker="o",
                                label=f"{sys_name} {arm}")
            ax.set_title(f"LoCoMo recall@k, {variant} rows")
            ax.set_xlabel("k")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[0][0].set_ylabel("recall of evidence turns")
        fig.tight_layout()
        name = f"compare-{mode}-recall.png"
        fig.savefig(folder / name, dpi=100)
        plt.close(fig)
        made.append(name)
    return made


def render(results: dict[str, Any], plots: list[str]) -> str:
    """The Markdown text."""
    scale = results.get("scale", {})
    m = results["machine"]
    lines = [f"# turnlake vs LanceDB vs Postgres ({results['mode']})", "",
             f"Run {results['started']} UTC, {results.get('wall_s', '?')} s wall. Machine: "
             f"{m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Python {m['python']}, "
             f"{m['os']}; load average {m['load_avg_at_start']} at start, "
             f"{m.get('load_avg_at_end')} at end (the box is shared).", "",
             "Versions: `" + json.dumps(m["versions"]) + "`", "", *_machine_lines(results),
             "Same rows in every system (turnlake's committed, unexpired rows of the default "
             "search roles, with their vectors), same seeded queries, same user scope, k=10 "
             "turns, candidate depth 100 per arm, warm caches (one unmeasured pass over every "
             "query before each arm is timed), one client, each system in a process of its "
             "own. Query embedding is excluded "
             "everywhere (the same precomputed vector is handed to each system). The scale "
             f"lake's vectors are {scale.get('vectors', 'random')} (bench/scale.py: random, the "
             "worst case for any vector index, or clustered, with text-like neighbours).", ""]
    if scale:
        lines += _scale_lines(scale)
    else:
        lines += ["## Latency", "", results.get("scale_skipped", "scale section not run") + "."]
    if "locomo" in results:
        lines += _locomo_lines(results["locomo"])
    elif "locomo_skipped" in results:
        lines += ["", "## LoCoMo quality", "", results["locomo_skipped"] + "."]
    lines += ["", "## Reference figures (issue 7, measured earlier on this machine)", "",
              "| figure | reference |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in REFERENCE.items()]
    lines += ["", "Interpretation and the differences are discussed in "
              "[compare-notes.md](compare-notes.md).", ""]
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _scale_lines(scale: dict[str, Any]) -> list[str]:
    """The scale section: latency, ratios, builds, RSS, plans and profile."""
    lines = [f"## Latency at {scale['rows']} rows ({scale['queries']} generated queries × "
             f"{scale['rounds']} interleaved rounds, pooled)", ""]
    lines += _lat_rows(scale["systems"])
    lines += _failed_rows(scale.get("failed", {}))
    lines += ["", "### Ratios, pair by pair (< 1: turnlake faster)", ""]
    lines += _ratio_rows(scale["ratios"])
    lines += ["", "### Build / ingest and size", "", *_build_rows(scale["build"])]
    lines += ["", "### Peak RSS of each search process", "", *_rss_rows(scale["systems"])]
    if "plans" in scale["systems"].get("postgres", {}):
        lines += ["", "### Postgres plans (first query)", ""]
        lines += [f"- **{arm}**: `{_VECTOR.sub(_ELIDED, plan)[:400]}`"
                  for arm, plan in scale["systems"]["postgres"]["plans"].items()]
    if "profile" in scale["systems"].get("turnlake", {}):
        lines += ["", "### turnlake hybrid profile (cProfile)", ""]
        lines += _profile_rows(scale["systems"]["turnlake"]["profile"])
    return lines


def _locomo_lines(loc: dict[str, Any]) -> list[str]:
    """The LoCoMo section: recall, ratios, builds and profile."""
    lines: list[str] = []
    lines += ["", f"## LoCoMo quality ({loc['questions']} questions, user scope, recency "
              "off, identical rows and MiniLM vectors)", ""]
    lines += _recall_rows(loc)
    for variant in ("minimal", "rich"):
        if variant in loc:
            lines += _failed_rows(loc[variant].get("failed", {}))
            lines += ["", f"### {variant}: ratios", "", *_ratio_rows(loc[variant]["ratios"])]
            lines += ["", f"### {variant}: build and size", ""]
            lines += _build_rows(loc[variant]["build"])
    first = next(v for v in ("minimal", "rich") if v in loc)
    if "profile" in loc[first]["systems"].get("turnlake", {}):
        lines += ["", f"### turnlake hybrid profile on LoCoMo {first} rows", ""]
        lines += _profile_rows(loc[first]["systems"]["turnlake"]["profile"])
    return lines


def write_report(results: dict[str, Any], folder: Path) -> Path:
    """Write compare-<mode>.md and its plots into folder; returns the Markdown path."""
    plots = plot(results, folder)
    path = folder / f"compare-{results['mode']}.md"
    path.write_text(render(results, plots))
    return path
