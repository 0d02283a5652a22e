"""``pip install turnlake`` alone, in a fresh virtualenv: the client records and searches a
real server with only httpx and pydantic installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from tests.turnlake.conftest import Served

ROOT = Path(__file__).resolve().parents[2]
_SOURCES = ("pyproject.toml", "README.md", "lake", "pipeline", "app", "turnlake")

# The host's program, as docs/clients/python.md shows it.
_HOST = """
import json, sys, time
from turnlake import Client, Recorder

url, key, user_key = sys.argv[1:4]
with Recorder(url=url, key=key, outbox="outbox") as recorder:
    with recorder.begin("acme", "support-desk", "react-agent", "u-ana", "c-venv", "t-1") as t:
        t.submit("the albatross export is truncated at 65536 rows")
        t.complete("Excel's old row limit: export as CSV instead.")
with Client(url, key=user_key) as client:
    for _ in range(300):
        found = [f"{h.conversation_id}/{h.turn_id}" for h in client.search("albatross").hits]
        if "c-venv/t-1" in found:
            break
        time.sleep(0.2)
    import importlib.util
    print(json.dumps({"found": "c-venv/t-1" in found,
                      "numpy": importlib.util.find_spec("numpy") is not None,
                      "fastapi": importlib.util.find_spec("fastapi") is not None}))
"""


@pytest.mark.slow
def test_the_client_alone_records_and_searches(served: Served, tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in _SOURCES:  # a copy: building in place would leave build/ in the tree
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    home = tmp_path / "venv"
    venv.create(home, with_pip=True)
    python = str(home / "bin" / "python")
    installed = subprocess.run([python, "-m", "pip", "install", "--quiet", str(source)],
                               capture_output=True, text=True, timeout=900, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    done = subprocess.run([python, "-c", _HOST, served.server.url, served.keys["recorder"],
                           served.keys["user"]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report == {"found": True, "numpy": False, "fastapi": False}
