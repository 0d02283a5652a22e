"""`turnlake hook claude-code --server URL --key KEY` against a real `turnlake serve`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lake.errors import TurnlakeError
from lake.settings import Settings
from pipeline.importers.common import Identity
from pipeline.importers.live import ServerTarget, capture_transcript
from tests.pipeline.service.server import Server, make_keys

FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures" / "claude_code_v2"
SESSION = "c41d8e2a-7b3f-4e19-a6d2-5f0b9c8e7a13"


def test_the_hook_records_through_the_service(tmp_path: Path) -> None:
    project = tmp_path / "projects"
    shutil.copytree(FIXTURES, project)
    transcript = project / "-home-dev-search-api" / f"{SESSION}.jsonl"
    # The hook's own state lives in a lake of the hook's machine; the turns go to the server
    # (a lake of its own: the shared served lake's turns are counted by other tests).
    settings = Settings(lake=tmp_path / "hook-lake")
    identity = Identity(tenant="acme", user_id="u-dev", app="claude-code", agent="claude-code")
    served = tmp_path / "served"
    keys = make_keys(served)
    with Server(served) as server:
        target = ServerTarget(server.url, keys["recorder"])
        first = capture_transcript(settings, SESSION, transcript, identity, server=target)
        assert first.records >= 3 and first.accepted == first.records and not first.problems
        again = capture_transcript(settings, SESSION, transcript, identity, server=target)
        assert again.accepted == 0
        with server.client(keys["analyst"]) as client:
            listed = client.get("/v1/conversations", params={"user": "u-dev"})
        assert listed.status_code == 200, listed.text
        assert listed.json()
        with pytest.raises(TurnlakeError, match="403"):
            capture_transcript(settings, "other-session", transcript, identity,
                               server=ServerTarget(server.url, keys["user"]))
