"""``POST /v1/pull`` writes below the workspace only: never through a symlink, never into a
file, never outside."""

from __future__ import annotations

from pathlib import Path

from lake.errors import WorkspaceError
from pipeline.service.errors import status_of
from tests.pipeline.service.conftest import Served
from tests.pipeline.service.server import Server


def test_into_through_a_symlink_or_a_file_is_a_400_naming_into(served: Served,
                                                                tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "link").symlink_to(outside)
    (workspace / "real").mkdir()
    (workspace / "real" / "inner").symlink_to(outside)
    (workspace / "afile").write_text("not a folder")
    with Server(served.lake, "--workspace", str(workspace)) as server, \
            server.client(served.keys["user"]) as client:
        for into in ("link", "link/sub", "real/inner/deeper", "afile", "afile/deeper",
                     "../outside"):
            answer = client.post("/v1/pull", json={"targets": [served.own_ref],
                                                   "into": into})
            assert answer.status_code == 400, (into, answer.text)
            error = answer.json()["error"]
            assert error["field"] == "into" and into in error["message"], error
        # A new folder below a real one is still fine.
        fine = client.post("/v1/pull", json={"targets": [served.own_ref], "into": "real/job"})
        assert fine.status_code == 200 and fine.json()["ok"], fine.text
    assert list(outside.iterdir()) == []
    assert (workspace / "afile").read_text() == "not a folder"
    assert (workspace / "real" / "job" / ".turnlake-pull.json").is_file()


def test_an_unusable_workspace_is_a_400_not_a_500() -> None:
    assert status_of(WorkspaceError("cannot use ws/x as a workspace")) == (
        400, "invalid_workspace")
