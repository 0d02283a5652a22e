"""docs/clients/python.md, langchain.md and llamaindex.md run as written: their Python
blocks, in order, against a real server. (openai-agents.md calls OpenAI's API; its code runs
offline with a scripted model in test_openai_agents.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.pipeline.service.server import wait_until
from tests.turnlake.conftest import Served
from turnlake import Client

PAGES = Path(__file__).resolve().parents[2] / "docs" / "clients"
PAGE = PAGES / "python.md"


def python_blocks(text: str) -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_python_client_page_runs(served: Served, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TURNLAKE_URL", served.server.url)
    monkeypatch.setenv("TURNLAKE_KEY", served.keys["user"])
    monkeypatch.setenv("TURNLAKE_RECORDER_KEY", served.keys["recorder"])
    monkeypatch.setenv("TURNLAKE_OUTBOX", str(tmp_path / "outbox"))
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    namespace: dict[str, object] = {"__name__": "docs_example"}
    for n, block in enumerate(blocks):
        exec(compile(block, f"{PAGE.name} block {n + 1}", "exec"), namespace)
        if n == 0:  # the page says: searchable a moment after it is recorded
            with Client(served.server.url, key=served.keys["user"]) as client:
                assert wait_until(lambda c=client: any(  # type: ignore[misc]
                    h.conversation_id == "c-42" for h in c.search(
                        "forecast off by an hour").hits), timeout_s=60)
    printed = capsys.readouterr().out
    assert "c-42 t-1" in printed
    assert "2 ['accepted', 'accepted']" in printed
    assert "403 forbidden" in printed
    assert (tmp_path / "forecast.csv").read_bytes() == b"month,hours\n3,12\n"
    # The adapter pages find the turn the client page recorded.
    for name in ("langchain.md", "llamaindex.md"):
        page: dict[str, object] = {"__name__": "docs_example"}
        for n, block in enumerate(python_blocks((PAGES / name).read_text(encoding="utf-8"))):
            exec(compile(block, f"{name} block {n + 1}", "exec"), page)
        printed = capsys.readouterr().out
        assert "c-42/t-1" in printed and "User: the forecast sheet is off by an hour" in printed
