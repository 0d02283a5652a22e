"""What committing a spooled group costs with its lines prepared again, and with the rows its
decision prepared (what the service does), CPU time of one process, alternated.

``python -m bench.prepared_commit [turns_per_group] [groups] [blocks]`` (default 20, 40, 4):
on two fresh lakes, each group is decided (``Ingestor.decide``, as the service's acceptor
does), then committed either from its lines (``Ingestor.ingest_groups``: parsed, validated
and projected again, as the service did before and a recovery still does) or from the
decision's prepared group, sealed and opened as it travels between the server's children
(``Ingestor.ingest_prepared``). Blocks of ``groups`` commits alternate between the two
(ABBA...); printed: CPU ms per commit of each.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from bench.serve import _record
from lake.settings import Settings
from pipeline.ingest import Ingestor


def commit_cost(per_group: int, groups: int, blocks: int) -> dict[str, float]:
    """CPU ms per commit of a ``per_group``-turn group, from lines and prepared."""
    lakes = {name: Settings(lake=Path(tempfile.mkdtemp()) / "lake",
                            embedding_model="hashing-64") for name in ("lines", "prepared")}
    writers = {name: Ingestor(s, report_kept=True) for name, s in lakes.items()}
    deciders = {name: Ingestor(s) for name, s in lakes.items()}
    cpu = dict.fromkeys(lakes, 0.0)
    commits = dict.fromkeys(lakes, 0)
    n = 0
    for block in range(blocks):
        for name in ("lines", "prepared") if block % 2 == 0 else ("prepared", "lines"):
            for _ in range(groups):
                lines = [json.dumps(_record(n + i, block)) for i in range(per_group)]
                source = f"<g{n}>"
                n += per_group
                sealed = deciders[name].decide(lines, source=source).prepared.sealed()
                started = time.process_time()
                report = (writers[name].ingest_groups([(source, lines)]) if name == "lines"
                          else writers[name].ingest_prepared([sealed.opened()]))
                cpu[name] += time.process_time() - started
                commits[name] += 1
                assert report.accepted == per_group
    return {f"{name}_cpu_ms_per_commit": round(cpu[name] / commits[name] * 1000, 2)
            for name in lakes}


def main() -> None:
    """Print the figures for the sizes given on the command line."""
    args = [int(a) for a in sys.argv[1:4]]
    per_group, groups, blocks = (args + [20, 40, 4][len(args):])[:3]
    print(json.dumps({"turns_per_group": per_group, "commits_each": groups * blocks,
                      **commit_cost(per_group, groups, blocks)}))


if __name__ == "__main__":
    main()
