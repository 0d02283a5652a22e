"""A Claude Code session replayed the way Claude Code writes it, with the real hook process
run at each turn's end (lake mode): every turn a plain import finds is captured as that import
gives it, embedded and indexed, with no conflict, and nothing lands in the project folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.store import LakeStore
from lake.tables import Table
from pipeline.importers import iter_claude_code
from tests.pipeline.importers.claude_session import SessionWriter, hook_payload, replay

SESSION = "5e55a0b1-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
ROOT = Path(__file__).resolve().parents[3]


def hook_env(home: Path) -> dict[str, str]:
    """The hook's environment: a HOME of its own (so its cache folder is there), the hashing
    embedder, offline."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TURNLAKE_LAKE", "TURNLAKE_KEY", "TURNLAKE_RECORDER_KEY", "XDG_CACHE_HOME",
                        "TURNLAKE_HOOK_LOG")}
    env.update(HOME=str(home), TURNLAKE_EMBEDDING_MODEL="hashing-64", HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT))
    return env


def session_in(tmp_path: Path) -> tuple[SessionWriter, Path, Path]:
    """A session writer for a project at tmp_path/project (holding one file of its own), its
    transcript under HOME's ~/.claude/projects; (writer, project, home)."""
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("billing service\n")
    transcript = (home / ".claude" / "projects" / str(project).replace("/", "-")
                  / f"{SESSION}.jsonl")
    return SessionWriter(transcript, SESSION, str(project)), project, home


def run_hook(writer: SessionWriter, project: Path, home: Path, event: str,
             *args: str, key: str | None = None) -> str:
    """Run ``turnlake hook claude-code`` as Claude Code does: stdin JSON, the project as the
    working folder; the log's last line."""
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "hook", "claude-code",
                           "--tenant", "acme", "--user", "u-dev", *args],
                          input=hook_payload(writer, event).encode(), cwd=project,
                          env={**hook_env(home), **({"TURNLAKE_RECORDER_KEY": key} if key else {})},
                          capture_output=True, timeout=300)
    log = home / ".cache" / "turnlake" / "hook-claude-code.log"
    last = log.read_text().splitlines()[-1] if log.exists() else ""
    assert done.returncode == 0, (done.stderr.decode(), log.read_text() if log.exists() else "")
    return last


def plain_import(transcript: Path) -> dict[str, dict[str, object]]:
    return {r.turn_id: json.loads(r.to_json())
            for r in iter_claude_code([transcript], tenant="acme", user_id="u-dev")}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_replayed_session_is_captured_whole_searchable_and_without_conflict(
        tmp_path: Path) -> None:
    writer, project, home = session_in(tmp_path)
    lake = tmp_path / "lake"
    logs: list[str] = []
    replay(writer, lambda event: logs.append(run_hook(writer, project, home, event,
                                                      "--lake", str(lake))),
           "turnlake hook claude-code")
    assert all(" 0 conflicts" in line and "problems" in line for line in logs), logs
    assert all(" 0 problems" in line for line in logs), logs
    store = LakeStore(lake)
    rows = store.read(Table.TURN_LOGS, columns=["turn_id", "payload"]).to_pylist()
    stored = {r["turn_id"]: json.loads(r["payload"]) for r in rows}
    expected = plain_import(writer.path)
    assert len(expected) == 4  # the task notification's answer belongs to the second turn
    assert stored == expected
    assert not store.exists(Table.QUARANTINE) or store.read(Table.QUARANTINE).num_rows == 0
    # Embedded and indexed by the hook's own runs: each turn is found by its own words.
    content = store.read(Table.CONTENT_ROWS, columns=["embedding_status"]).to_pylist()
    assert {r["embedding_status"] for r in content} == {"done"}
    service = SearchService(store)
    for turn_id, turn in expected.items():
        prompt = turn["submissions"][0]["text"]  # type: ignore[index]
        result = service.search(SearchRequest(query=prompt, principal=Principal(
            tenant="acme", user_id="u-dev"), min_relevance=0.0, k=4))
        assert not result.unindexed_partitions and not result.stale_partitions
        assert turn_id in [h.turn_id for h in result.hits]
    # Nothing in the project; the capture state is in HOME's cache folder.
    assert sorted(p.name for p in project.rglob("*")) == ["README.md"]
    assert list((home / ".cache" / "turnlake" / "capture" / "claude-code").glob("*.json"))
    # The lines Claude Code wrote after each of the five Stop hooks are part of the turns
    # they follow (the second turn ran two: its task notification resumed it).
    kinds = [e["data"].get("subtype") for t in stored.values()
             for e in t["context_events"] if e["kind"] == "system"]
    assert kinds.count("stop_hook_summary") == 5 and kinds.count("turn_duration") == 5


def test_a_hook_without_a_lake_refuses_to_write_into_the_project(tmp_path: Path) -> None:
    writer, project, home = session_in(tmp_path)
    writer.turn("hello", "hi", [])
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "hook", "claude-code",
                           "--tenant", "acme", "--user", "u-dev"],
                          input=hook_payload(writer, "Stop").encode(), cwd=project,
                          env=hook_env(home), capture_output=True, timeout=300)
    assert done.returncode == 1
    log = (home / ".cache" / "turnlake" / "hook-claude-code.log").read_text()
    assert "give --lake or $TURNLAKE_LAKE" in log
    assert sorted(p.name for p in project.rglob("*")) == ["README.md"]

