"""The TypeScript client and its Vercel AI SDK adapter (clients/typescript), tested by their
own node test suite against a real ``turnlake serve`` that the suite starts and stops; this
test runs it, so that ``make test`` covers the TypeScript package too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
TIMEOUT_S = 900

pytestmark = pytest.mark.slow


def _npm() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed: the TypeScript client's tests need them "
                    "(Node 18 or newer)")
    return npm


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    # The suite's server runs with this interpreter, so it serves this checkout's code.
    env = {**os.environ, "TURNLAKE_PYTHON": sys.executable, "CI": "1", "NO_COLOR": "1"}
    return subprocess.run(argv, cwd=PACKAGE, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


def test_typescript_client_suite() -> None:
    """``npm test``: types check, the build, and the vitest suite (every operation, typed
    errors, retries and timeouts, the generated types against the served OpenAPI document,
    the ESM and CommonJS builds, the adapter with the AI SDK's mock model)."""
    npm = _npm()
    if not (PACKAGE / "node_modules").is_dir():
        installed = _run([npm, "ci", "--no-audit", "--no-fund"])
        assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    tested = _run([npm, "test"])
    assert tested.returncode == 0, tested.stdout[-6000:] + tested.stderr[-3000:]
    assert "Test Files" in tested.stdout and " failed" not in tested.stdout, tested.stdout[-3000:]
