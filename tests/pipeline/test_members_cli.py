"""``turnlake members add|list|remove`` on a real lake folder."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from lake.members import MemberStore
from pipeline.cli import app


def test_members_add_list_remove(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    runner = CliRunner()
    added = runner.invoke(app, ["members", "add", "ana@example.com", "--tenant", "acme",
                                "--role", "user", "--user", "u-ana", "--lake", str(lake)])
    assert added.exit_code == 0, added.output
    assert "added member ana@example.com: user of tenant acme, user u-ana" in added.output
    updated = runner.invoke(app, ["members", "add", "ana@example.com", "--tenant", "acme",
                                  "--role", "analyst", "--lake", str(lake)])
    assert "updated member ana@example.com: analyst of tenant acme" in updated.output
    listed = runner.invoke(app, ["members", "list", "--lake", str(lake)])
    assert listed.exit_code == 0 and "ana@example.com" in listed.output
    assert "analyst" in listed.output
    removed = runner.invoke(app, ["members", "remove", "ana@example.com", "--lake", str(lake)])
    assert removed.exit_code == 0 and "removed member ana@example.com" in removed.output
    assert MemberStore(lake).list() == []


def test_members_refuses_bad_input_without_a_traceback(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    runner = CliRunner()
    bad = runner.invoke(app, ["members", "add", "ana", "--tenant", "acme", "--role",
                              "analyst", "--lake", str(lake)])
    assert bad.exit_code == 2 and "not an email" in bad.output
    assert "Traceback" not in bad.output
    gone = runner.invoke(app, ["members", "remove", "x@example.com", "--lake", str(lake)])
    assert gone.exit_code == 2 and "no member" in gone.output
    missing = runner.invoke(app, ["members", "list", "--lake", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no lake" in missing.output
