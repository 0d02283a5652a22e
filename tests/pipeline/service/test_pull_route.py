"""``POST /v1/pull`` of a server started with ``--workspace``: a turn's files land below it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.pipeline.service.conftest import Served
from tests.pipeline.service.server import Server


def test_pull_needs_a_workspace(served: Served) -> None:
    with served.server.client(served.keys["user"]) as client:
        answer = client.post("/v1/pull", json={"targets": ["c-1/t-0000"]})
    assert answer.status_code == 400
    assert "--workspace" in answer.json()["error"]["message"]


def test_pull_writes_the_keys_files_and_refuses_the_rest(served: Served,
                                                         tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with Server(served.lake, "--workspace", str(workspace)) as server, \
            server.client(served.keys["user"]) as client:
        answer = client.post("/v1/pull", json={
            "targets": [served.own_ref, served.other_ref], "into": "job"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        statuses = {item["target"]: item["status"] for item in body["items"]}
        assert statuses == {served.own_ref: "pulled", served.other_ref: "refused"}
        assert not body["ok"]
        manifest = json.loads((workspace / "job" / ".turnlake-pull.json").read_text())
        assert manifest and any((workspace / "job" / "files").rglob("*"))
        # Paths relative to the workspace: the server's own folders are not the caller's.
        assert (body["into"], body["manifest"]) == ("job", "job/.turnlake-pull.json")
        assert str(workspace) not in answer.text
        refused = client.post("/v1/pull", json={"targets": [served.other_ref],
                                                "into": "nothing"})
        assert refused.status_code == 200 and not refused.json()["ok"], refused.text
        assert not (workspace / "nothing").exists()  # nothing to write: no folder made
        assert str(workspace) not in refused.text
        escape = client.post("/v1/pull", json={"targets": ["c-1/t-0000"], "into": "../out"})
        assert escape.status_code in (400, 422)
        assert not (tmp_path / "out").exists()
        recorder = client.post("/v1/pull", json={"targets": ["c-1/t-0000"]},
                               headers={"Authorization": f"Bearer {served.keys['recorder']}"})
        assert recorder.status_code == 403
