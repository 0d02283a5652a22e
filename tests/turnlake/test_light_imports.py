"""The client imports and runs without the server's packages: a host that ``pip install``\\ s
turnlake gets httpx and pydantic, nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "polars", "deltalake", "faiss", "streamlit", "fastapi", "starlette",
         "numpy", "pyarrow", "tantivy", "sentence_transformers", "onnxruntime", "mcp",
         "uvicorn", "typer", "orjson")

# Run in a fresh interpreter where importing any heavy package fails, as it would where none
# is installed: import the public API and record a turn in server mode (no server: it waits
# in the outbox), then report which top-level packages were imported.
_PROBE = """
import importlib.abc, json, sys
HEAVY = set(json.loads(sys.argv[1]))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
import turnlake
from turnlake import AsyncClient, Client, Recorder, Retry
from turnlake.outbox import Outbox

recorder = Recorder(url="http://127.0.0.1:9", key="k", outbox=sys.argv[2])
recorder._server.client.retry = Retry(attempts=1)
turn = recorder.begin("acme", "app", "agent", "u-ana", "c-1", "t-1")
turn.submit("hello")
turn.complete("hi")
Client("http://127.0.0.1:9"); AsyncClient("http://127.0.0.1:9")
print(json.dumps({"waiting": len(Outbox(sys.argv[2]).waiting()),
                  "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_the_client_imports_and_records_without_the_server_packages(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(HEAVY),
                           str(tmp_path / "outbox")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["waiting"] == 1
    assert not set(report["loaded"]) & set(HEAVY)
    assert {"httpx", "pydantic", "turnlake"} <= set(report["loaded"])


_ENTRY = """
import importlib.abc, json, sys
HEAVY = set(json.loads(sys.argv[1]))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
from pipeline.entry import main
sys.argv = ["turnlake", "search", "x"]
main()
"""


def test_the_command_line_without_the_server_says_what_to_install() -> None:
    done = subprocess.run([sys.executable, "-c", _ENTRY, json.dumps(HEAVY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "pip install 'turnlake[server]'" in done.stderr
    assert "Traceback" not in done.stderr
