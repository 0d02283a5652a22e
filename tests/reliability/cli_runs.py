"""Running the ``turnlake`` CLI in real processes, killed on purpose or left to finish."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.reliability.lake_audit import Audit

ROOT = Path(__file__).resolve().parents[2]
KILLED = -signal.SIGKILL


def cli_env(fault: str | None) -> dict[str, str]:
    """The environment of a CLI process: hashing embedder, offline, optional fault point."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TURNLAKE_LAKE", "TURNLAKE_FAULT_AT")}
    env.update(TURNLAKE_EMBEDDING_MODEL="hashing-64", HF_HUB_OFFLINE="1")
    if fault is not None:
        env["TURNLAKE_FAULT_AT"] = fault
    return env


def cli_argv(lake: Path, args: tuple[object, ...]) -> list[str]:
    """``python -m pipeline.cli ARGS --lake LAKE``."""
    return [sys.executable, "-m", "pipeline.cli", *map(str, args), "--lake", str(lake)]


def cli(lake: Path, *args: object, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``turnlake`` in a fresh process, optionally killed at a fault point."""
    return subprocess.run(cli_argv(lake, args), env=cli_env(fault), cwd=ROOT,
                          capture_output=True, text=True, timeout=180)


def start(lake: Path, *args: object) -> subprocess.Popen[str]:
    """Start ``turnlake`` without waiting for it."""
    return subprocess.Popen(cli_argv(lake, args), env=cli_env(None), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> str:
    """Wait for a started process; fail unless it succeeded. Returns its stderr."""
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    return err


def kill_when(lake: Path, args: tuple[object, ...], ready: Callable[[int], bool],
              delay: float) -> bool:
    """Start ``turnlake``, wait until ``ready(pid)`` says it is writing, sleep ``delay`` and
    SIGKILL it; True when it was killed (False: it finished first)."""
    proc = subprocess.Popen(cli_argv(lake, args), env=cli_env(None), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while proc.poll() is None and not ready(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(delay)
    if proc.poll() is not None:
        assert proc.returncode == 0
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return True


def holds_writer_lock(lake: Path) -> Callable[[int], bool]:
    """``ready`` for :func:`kill_when`: the process has taken the writer lock."""
    def ready(pid: int) -> bool:
        lock = lake / "_locks" / "writer.lock"
        return lock.exists() and f"pid {pid})" in lock.read_text(errors="replace")
    return ready


def clean(audit: Audit) -> Audit:
    """Fail with the audit's findings unless the lake keeps every promise."""
    assert audit.problems == [], "\n".join(audit.problems)
    return audit
