"""pipeline.workers: the ingest's process settings act only when called."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline import workers

OURS = "dirty_decay_ms:30000,muzzy_decay_ms:30000"


@pytest.mark.parametrize(("before", "after"), [
    (None, OURS),
    ("dirty_decay_ms:500,muzzy_decay_ms:1000", f"dirty_decay_ms:500,muzzy_decay_ms:1000,{OURS}"),
    ("narenas:2", "narenas:2"),  # the user's own value is left alone
])
def test_keep_freed_pages_respects_a_users_value(monkeypatch: pytest.MonkeyPatch,
                                                 before: str | None, after: str) -> None:
    if before is None:
        monkeypatch.delenv("_RJEM_MALLOC_CONF", raising=False)
    else:
        monkeypatch.setenv("_RJEM_MALLOC_CONF", before)
    workers.keep_freed_pages()
    assert os.environ["_RJEM_MALLOC_CONF"] == after


def test_importing_workers_changes_nothing() -> None:
    code = ("import gc, json, os, sys\nbefore = dict(os.environ), list(sys.meta_path)\n"
            "import pipeline.workers\n"
            "print(json.dumps([(dict(os.environ), list(sys.meta_path)) == before, "
            "gc.isenabled()]))")
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip() == "[true, true]"


def test_the_cli_entry_points_set_the_allocator_before_deltalake_loads() -> None:
    code = ("import os, sys\nimport pipeline.entry\n"
            "sys.argv = ['turnlake', '--help']\n"
            "try:\n    pipeline.entry.main()\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('_RJEM_MALLOC_CONF'))\n")
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip().splitlines()[-1].endswith(OURS)


def test_cyclic_gc_paused_restores_the_collector() -> None:
    assert workers.gc.isenabled()
    with workers.cyclic_gc_paused():
        assert not workers.gc.isenabled()
    assert workers.gc.isenabled()
