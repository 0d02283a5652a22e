"""`turnlake hook claude-code --server URL --key KEY` against a real `turnlake serve`."""

from __future__ import annotations

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
