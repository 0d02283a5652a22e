"""`turnlake hook claude-code --server URL --key KEY` against a real `turnlake serve`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lake.errors import TurnlakeError
from pipeline.importers.common import Identity
from pipeline.importers.live import ServerTarget, capture_transcript
from tests.pipeline.service.server import Server, make_keys

FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures" / "claude_code_v2"
SESSION = "c41d8e2a-7b3f-4e19-a6d2-5f0b9c8e7a13"


def test_the_hook_records_through_the_service(tmp_path: Path) -> None:
    project = tmp_path / "projects"
    shutil.copytree(FIXTURES, project)
    transcript = project / "-home-dev-search-api" / f"{SESSION}.jsonl"
    # The hook's own state lives in the cache folder of the hook's machine; the turns go to
    # the server, and no lake is needed on the hook's side.
    state = tmp_path / "cache"
    identity = Identity(tenant="acme", user_id="u-dev", app="claude-code", agent="claude-code")
    served = tmp_path / "served"
    keys = make_keys(served)
    with Server(served) as server:
        target = ServerTarget(server.url, keys["recorder"])
        first = capture_transcript(None, SESSION, transcript, identity, server=target,
                                   final=True, state_dir=state)
        assert first.records >= 3 and first.accepted == first.records and not first.problems
        again = capture_transcript(None, SESSION, transcript, identity, server=target,
                                   final=True, state_dir=state)
        assert again.accepted == 0
        with server.client(keys["analyst"]) as client:
            listed = client.get("/v1/conversations", params={"user": "u-dev"})
        assert listed.status_code == 200, listed.text
        assert listed.json()
        with pytest.raises(TurnlakeError, match="403"):
            capture_transcript(None, "other-session", transcript, identity, final=True,
                               server=ServerTarget(server.url, keys["user"]), state_dir=state)


def test_a_replayed_session_reaches_the_server_whole_and_without_conflict(
        tmp_path: Path) -> None:
    from lake.store import LakeStore
    from lake.tables import Table
    from tests.pipeline.importers.claude_session import replay
    from tests.pipeline.importers.test_live_replay import plain_import, run_hook, session_in
    from tests.pipeline.service.server import wait_until

    writer, project, home = session_in(tmp_path)
    served = tmp_path / "served"
    keys = make_keys(served)
    logs: list[str] = []
    with Server(served) as server:
        # The key comes from the environment the hook runs in, never from its command line.
        replay(writer, lambda event: logs.append(run_hook(
            writer, project, home, event, "--server", server.url, key=keys["recorder"])),
            "turnlake hook claude-code --server URL")
        assert all(" 0 problems" in line for line in logs), logs
        expected = plain_import(writer.path)
        with server.client(keys["analyst"]) as client:
            def all_found() -> bool:
                for turn in expected.values():
                    answer = client.post("/v1/search", json={
                        "query": turn["submissions"][0]["text"],  # type: ignore[index]
                        "user": "u-dev", "k": 4, "min_relevance": 0})
                    if turn["turn_id"] not in [h["turn_id"] for h in answer.json()["hits"]]:
                        return False
                return True
            assert wait_until(all_found, timeout_s=120)
    store = LakeStore(served)
    rows = store.read(Table.TURN_LOGS, columns=["turn_id", "payload"]).to_pylist()
    assert {r["turn_id"]: json.loads(r["payload"]) for r in rows} == expected
    assert not store.exists(Table.QUARANTINE) or store.read(Table.QUARANTINE).num_rows == 0
    content = store.read(Table.CONTENT_ROWS, columns=["embedding_status"]).to_pylist()
    assert {r["embedding_status"] for r in content} == {"done"}
    assert sorted(p.name for p in project.rglob("*")) == ["README.md"]
    assert not (project / "data").exists()
