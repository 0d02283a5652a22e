"""The ChatGPT importer on an export with code interpreter runs, browsing, uploads and a
generated chart, split in conversations-NNN.json shards (fixture written by hand)."""

from __future__ import annotations

import base64
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lake.records import TurnRecord
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.importers import ImportResult, iter_chatgpt
from pipeline.ingest import Ingestor
from pipeline.jobs import run_ingest

FOLDER = Path(__file__).parent / "fixtures" / "chatgpt_code"
REVENUE = "67a0c3d1-5e2f-800c-9a1b-2c3d4e5f6a70"
GIL = "67a0d9e2-7f3a-800c-8b2c-3d4e5f6a7b81"
AS_OF = datetime(2025, 3, 1, tzinfo=UTC)  # the export is from February 2025


@pytest.fixture
def export_zip(tmp_path: Path) -> Path:
    """The export as ChatGPT ships it: one zip, shards and files at its root."""
    path = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for member in sorted(FOLDER.iterdir()):
            archive.write(member, member.name)
    return path


def _import(path: Path) -> ImportResult:
    return iter_chatgpt(path, tenant="acme", user_id="u-ana").collect()


def _turns(result: ImportResult) -> dict[str, TurnRecord]:
    return {r.turn_id: r for r in result.records}


def test_every_shard_of_the_zip_is_read_in_order(export_zip: Path) -> None:
    result = _import(export_zip)
    assert [(r.conversation_id, r.turn_id) for r in result.records] == [
        (REVENUE, "u-3"), (REVENUE, "u-10"), (GIL, "u-b1")]
    assert result.problems == []


def test_code_and_its_output_become_steps_and_a_code_panel_each(export_zip: Path) -> None:
    first = _turns(_import(export_zip))["u-3"]
    assert [(s.name, s.status) for s in first.steps] == [
        ("python", "started"), ("python", "completed"), ("python", "started"),
        ("python", "completed")]
    assert first.steps[0].detail == (
        "import pandas as pd\ndf = pd.read_csv('/mnt/data/revenue_2024.csv')\ndf.head()")
    panels = [e.data for e in first.events if e.type == "panel.code"]
    assert panels[0] == {
        "code": "import pandas as pd\ndf = pd.read_csv('/mnt/data/revenue_2024.csv')\ndf.head()",
        "language": "python", "status": "completed",
        "output": "     month  revenue\n0  2024-01    41200\n1  2024-02    39800"}
    assert panels[1]["output"] == "5"


def test_a_failed_run_is_a_failed_step_and_panel(export_zip: Path) -> None:
    second = _turns(_import(export_zip))["u-10"]
    assert [(s.name, s.status, s.detail) for s in second.steps][1] == (
        "python", "failed", "KeyError: 'month'")
    (panel,) = [e.data for e in second.events if e.type == "panel.code"]
    assert (panel["status"], panel["output"]) == ("failed", "KeyError: 'month'")
    # The hidden retry note is not an answer; the visible one after it is.
    assert second.completion.text.startswith("The data covers 2024 only")


def test_every_visible_answer_is_in_the_completion_in_order(export_zip: Path) -> None:
    first = _turns(_import(export_zip))["u-3"]
    assert first.completion.text.startswith(
        "Let me load the file first.\n\nJune (2024-06) dropped the most")
    assert [e for e in first.events if e.type == "assistant.message"] == []


def test_browsing_is_a_tool_step(export_zip: Path) -> None:
    gil = _turns(_import(export_zip))["u-b1"]
    assert [(s.name, s.status, s.detail) for s in gil.steps] == [
        ("web.run", "started", '{"search_query": [{"q": "Python 3.13 free-threaded GIL"}]}'),
        ("web.run", "completed",
         "What's New In Python 3.13 https://docs.python.org/3.13/whatsnew/3.13.html")]


def test_uploaded_and_generated_files_are_hosted_with_their_turn(export_zip: Path) -> None:
    first = _turns(_import(export_zip))["u-3"]
    assert [(a.name, a.mime) for a in first.attachments] == [
        ("revenue_2024.csv", "text/csv"), ("output-1.png", "image/png")]
    hosted = {h.path: base64.b64decode(h.content_b64 or "") for h in first.hosted_files}
    assert hosted["files/revenue_2024.csv"] == (
        FOLDER / "file-Q7rT2mLx9bVn3kP1-revenue_2024.csv").read_bytes()
    assert hosted["files/output-1.png"].startswith(b"\x89PNG")


def test_hidden_and_context_nodes_are_counted(export_zip: Path) -> None:
    result = _import(export_zip)
    assert result.skipped == {"system message": 1, "hidden message": 1,
                              "custom instructions (user_editable_context)": 1}
    assert result.counted == {"code run": 3, "code panel": 3, "file hosted from the export": 2,
                              "assistant message joined to the answer": 1,
                              "tool call (web.run)": 1, "tool message (web.run)": 1}


def test_an_unzipped_shard_finds_the_files_beside_it() -> None:
    result = _import(FOLDER / "conversations-000.json")
    assert [r.turn_id for r in result.records] == ["u-3", "u-10"]
    assert len(result.records[0].hosted_files) == 2


def test_into_the_lake_replay_has_code_panels_and_files(settings: Settings,
                                                        export_zip: Path) -> None:
    report = Ingestor(settings).ingest_records(iter_chatgpt(export_zip, tenant="acme",
                                                            user_id="u-ana"))
    assert (report.accepted, report.files_stored, report.quarantined) == (3, 2, [])
    turn = TurnMaterializer(LakeStore(settings.lake)).turn(
        Principal(tenant="acme", user_id="u-ana"), REVENUE, "u-3", as_of=AS_OF)
    assert [e["type"] for e in turn.events].count("panel.code") == 2
    assert sorted(f.path for f in turn.files) == ["files/output-1.png",
                                                  "files/revenue_2024.csv"]
    again = Ingestor(settings).ingest_records(iter_chatgpt(export_zip, tenant="acme",
                                                           user_id="u-ana"))
    assert (again.accepted, again.duplicates, again.conflicts) == (0, 3, [])


def test_a_re_export_that_changed_a_turn_supersedes_it(settings: Settings, tmp_path: Path,
                                                       export_zip: Path) -> None:
    Ingestor(settings).ingest_records(iter_chatgpt(export_zip, tenant="acme", user_id="u-ana"))
    changed = tmp_path / "changed"
    changed.mkdir()
    for member in FOLDER.iterdir():
        data = member.read_bytes()
        if member.name == "conversations-001.json":  # a regenerated answer on the branch
            data = data.replace(b"in which the GIL can be disabled",
                                b"where the GIL is optional")
        (changed / member.name).write_bytes(data)
    report = run_ingest(settings, records=iter_chatgpt(  # type: ignore[arg-type]
        changed / "conversations-001.json", tenant="acme", user_id="u-ana"),
        embed=False, index=False, replace=True).ingest
    assert (report.accepted, report.replaced) == (1, 1)
    turn = TurnMaterializer(LakeStore(settings.lake)).turn(
        Principal(tenant="acme", user_id="u-ana"), GIL, "u-b1", as_of=AS_OF)
    assert turn.completion["text"].endswith("where the GIL is optional.")
