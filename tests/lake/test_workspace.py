"""Workspace pull: files and attachments land in DIR, unsafely placed ones never do."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from lake.errors import QueryError, WorkspaceError
from lake.search.access import Principal
from lake.settings import Settings
from lake.store import LakeStore
from lake.workspace import MANIFEST, PullReport, WorkspacePuller, clean
from pipeline.ingest import Ingestor
from tests.factories import BASE_TIME, make_record, rich_record, write_jsonl

ANA = Principal("acme", "u-ana")
BEN = Principal("acme", "u-ben")
ANALYST = Principal("acme", analyst=True)
AS_OF = BASE_TIME + timedelta(days=2)
CSV = b"month,hours\n3,12\n"
BRIEF = b"the brief the user uploaded\n"
REF = "conv:fi:conv_c-1.turn_t-0002.files/forecast.csv"
BRIEF_REF = "conv:fi:conv_c-1.turn_t-0002.files/uploads/brief.txt"
SHORT_REF = "conv:fi:conv_c-short.turn_t-0005.files/old.txt"
BEN_REF = "conv:fi:conv_c-ben.turn_t-0004.files/secret.txt"


def _hosted(path: str, data: bytes) -> dict[str, str]:
    return {"path": path, "mime": "text/plain", "content_b64": base64.b64encode(data).decode()}


@pytest.fixture
def puller(settings: Settings, tmp_path: Path) -> WorkspacePuller:
    rich = rich_record(2)
    rich["hosted_files"].append(_hosted("files/uploads/brief.txt", BRIEF))
    rich["attachments"].append({"name": "brief.txt", "mime": "text/plain",
                                "size": len(BRIEF), "ref": BRIEF_REF})
    records = [
        rich,
        make_record(4, user="u-ben", conversation="c-ben",
                    hosted_files=[_hosted("files/secret.txt", b"ben only")]),
        make_record(5, conversation="c-short", ttl_days=1, at=BASE_TIME - timedelta(days=5),
                    hosted_files=[_hosted("files/old.txt", b"old")]),
    ]
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", records)])
    return WorkspacePuller(LakeStore(settings.lake))


def _by_ref(report: PullReport) -> dict[str | None, str]:
    return {item.ref: item.status for item in report.items}


def test_pull_a_turn_writes_files_attachments_and_manifest(puller: WorkspacePuller,
                                                           tmp_path: Path) -> None:
    work = tmp_path / "work"
    report = puller.pull(ANA, ["c-1/t-0002"], work, as_of=AS_OF)
    assert (work / "files" / "forecast.csv").read_bytes() == CSV
    assert (work / "files" / "uploads" / "brief.txt").read_bytes() == BRIEF
    assert (work / "user.attachments" / "brief.txt").read_bytes() == BRIEF
    statuses = {(i.kind, i.path): i.status for i in report.items}
    assert statuses[("file", "files/forecast.csv")] == "pulled"
    assert statuses[("attachment", "user.attachments/brief.txt")] == "pulled"
    # The attachments without hosted bytes are reported, not silently skipped.
    assert statuses[("attachment", "user.attachments/march.xlsx")] == "not_hosted"
    assert report.ok
    manifest = json.loads((work / MANIFEST).read_text())
    entry = next(f for f in manifest["files"] if f["path"] == "files/forecast.csv")
    assert entry["ref"] == REF and entry["sha256"] == hashlib.sha256(CSV).hexdigest()
    assert entry["expires_at"].startswith("2027-03")


def test_pull_again_is_unchanged_and_clean_removes_only_what_it_wrote(
        puller: WorkspacePuller, tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "files").mkdir(parents=True)
    (work / "files" / "mine.txt").write_text("the agent's own file")
    (work / "notes.md").write_text("not pull's")
    puller.pull(ANA, [REF, BRIEF_REF], work, as_of=AS_OF)
    again = puller.pull(ANA, [REF], work, as_of=AS_OF)
    assert _by_ref(again) == {REF: "unchanged"}
    done = clean(work)
    assert sorted(done.removed) == ["files/forecast.csv", "files/uploads/brief.txt"]
    assert done.folders_removed == ["files/uploads"]  # files/ was there before the pull
    assert sorted(p.name for p in work.rglob("*")) == ["files", "mine.txt", "notes.md"]
    with pytest.raises(WorkspaceError, match=r"no \.turnlake-pull\.json"):
        clean(work)


def test_clean_keeps_a_file_changed_since_the_pull(puller: WorkspacePuller,
                                                   tmp_path: Path) -> None:
    work = tmp_path / "work"
    puller.pull(ANA, [REF], work, as_of=AS_OF)
    (work / "files" / "forecast.csv").write_text("edited by the agent")
    done = clean(work)
    assert done.kept == ["files/forecast.csv"] and done.removed == []
    assert (work / "files" / "forecast.csv").read_text() == "edited by the agent"
    assert not (work / MANIFEST).exists()


def test_never_overwrites_a_file_it_did_not_write(puller: WorkspacePuller,
                                                  tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "files").mkdir(parents=True)
    (work / "files" / "forecast.csv").write_text("the user's own forecast")
    report = puller.pull(ANA, [REF, BRIEF_REF], work, as_of=AS_OF)
    assert _by_ref(report) == {REF: "conflict", BRIEF_REF: "pulled"}
    assert (work / "files" / "forecast.csv").read_text() == "the user's own forecast"
    # A file pull wrote and the user changed since is not overwritten either.
    (work / "files" / "uploads" / "brief.txt").write_text("changed")
    assert _by_ref(puller.pull(ANA, [BRIEF_REF], work, as_of=AS_OF)) == {
        BRIEF_REF: "conflict"}
    assert (work / "files" / "uploads" / "brief.txt").read_text() == "changed"


def test_symlinks_in_the_workspace_are_refused(puller: WorkspacePuller,
                                               tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(outside, work / "files")
    report = puller.pull(ANA, [REF], work, as_of=AS_OF)
    assert _by_ref(report) == {REF: "unsafe"}
    assert "symlink" in report.items[0].message
    assert list(outside.iterdir()) == []
    # A symlinked file is never written through either.
    (work / "files").unlink()
    (work / "files").mkdir()
    target = outside / "victim.txt"
    target.write_text("keep me")
    os.symlink(target, work / "files" / "forecast.csv")
    assert _by_ref(puller.pull(ANA, [REF], work, as_of=AS_OF)) == {REF: "unsafe"}
    assert target.read_text() == "keep me"


def test_a_manifest_that_points_outside_is_refused(puller: WorkspacePuller,
                                                   tmp_path: Path) -> None:
    work = tmp_path / "work"
    puller.pull(ANA, [REF], work, as_of=AS_OF)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    doc = json.loads((work / MANIFEST).read_text())
    doc["files"][0]["path"] = "files/../../victim.txt"
    (work / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(WorkspaceError, match="not a valid pull manifest"):
        clean(work)
    assert victim.read_text() == "keep me"


def test_expired_and_refused_refs_are_reported_and_the_rest_pulled(
        puller: WorkspacePuller, tmp_path: Path) -> None:
    work = tmp_path / "work"
    report = puller.pull(ANA, [SHORT_REF, BEN_REF, REF, "c-ben/t-0004", "c-nope/t-1"],
                         work, as_of=AS_OF)
    by_target = {(i.target, i.ref): i for i in report.items}
    assert by_target[(SHORT_REF, SHORT_REF)].status == "expired"
    assert by_target[(REF, REF)].status == "pulled"
    refused = by_target[(BEN_REF, BEN_REF)]
    missing = puller.pull(ANA, ["conv:fi:conv_c-ben.turn_t-0004.files/nothing.txt"], work,
                          as_of=AS_OF).items[0]
    # Another user's ref and a ref that names nothing get the same answer.
    assert refused.status == missing.status == "refused"
    assert (refused.message.replace(BEN_REF, "R")
            == missing.message.replace(missing.ref or "", "R"))
    other_turn = by_target[("c-ben/t-0004", None)]
    no_turn = by_target[("c-nope/t-1", None)]
    assert other_turn.status == no_turn.status == "refused"
    assert (other_turn.message.replace("c-ben/t-0004", "X")
            == no_turn.message.replace("c-nope/t-1", "X"))
    assert (work / "files" / "forecast.csv").read_bytes() == CSV
    assert not (work / "files" / "secret.txt").exists()
    # An analyst of the tenant may pull Ben's file.
    assert _by_ref(puller.pull(ANALYST, [BEN_REF], tmp_path / "a", as_of=AS_OF)) == {
        BEN_REF: "pulled"}


def test_bad_targets_are_reported_per_target(puller: WorkspacePuller, tmp_path: Path) -> None:
    report = puller.pull(ANA, ["../etc/passwd", "conv:fi:conv_c-1.turn_t-0002.files/../x",
                               "conv:ar:conv_c-1.turn_t-0002.submissions", REF],
                         tmp_path / "w", as_of=AS_OF)
    assert [i.status for i in report.items] == ["invalid", "invalid", "invalid", "pulled"]
    with pytest.raises(QueryError):
        puller.pull(ANA, [], tmp_path / "w")


def test_two_refs_for_one_path_in_one_pull(puller: WorkspacePuller, settings: Settings,
                                           tmp_path: Path) -> None:
    other = make_record(7, hosted_files=[_hosted("files/forecast.csv", b"another one")])
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "more.jsonl", [other])])
    second = "conv:fi:conv_c-1.turn_t-0007.files/forecast.csv"
    report = puller.pull(ANA, [REF, second], tmp_path / "w", as_of=AS_OF)
    assert _by_ref(report) == {REF: "pulled", second: "conflict"}
    assert (tmp_path / "w" / "files" / "forecast.csv").read_bytes() == CSV
