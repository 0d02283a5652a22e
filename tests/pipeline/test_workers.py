"""The ingest's process settings: the allocator setting is made by entry points only."""

from __future__ import annotations

import os
import subprocess
import sys

SET_THEN_LOAD = ("import os\nfrom pipeline.workers import keep_freed_pages\n"
                 "keep_freed_pages()\nimport lake.store\n"
                 "print(os.environ.get('_RJEM_MALLOC_CONF', ''))\n")


def _run(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env},
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_allocators_keep_freed_pages_unless_the_user_said_otherwise() -> None:
    # polars puts its own defaults first; later options win in jemalloc's parsing.
    assert _run(SET_THEN_LOAD).endswith("dirty_decay_ms:30000,muzzy_decay_ms:30000")
    theirs = _run(SET_THEN_LOAD, _RJEM_MALLOC_CONF="narenas:2")
    assert theirs.endswith("narenas:2") and "30000" not in theirs
    polars_first = _run("import polars\n" + SET_THEN_LOAD)
    assert polars_first.endswith(",dirty_decay_ms:30000,muzzy_decay_ms:30000")


def test_the_command_line_sets_it_before_loading_deltalake() -> None:
    code = ("import os, sys\nimport pipeline.cli\n"
            "print(os.environ.get('_RJEM_MALLOC_CONF', ''))\n")
    assert "dirty_decay_ms:30000" in _run(code)
