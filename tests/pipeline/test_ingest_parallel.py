"""Ingest through worker processes behaves exactly as in-process ingest."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from factories import make_record, write_jsonl

from lake.filestore import FileStore
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import PARALLEL_MIN_LINES, Ingestor


def _hosted(text: str) -> list[dict[str, str]]:
    return [{"path": "files/notes.md", "mime": "text/markdown",
             "content_b64": base64.b64encode(text.encode()).decode()}]


def test_foreign_turns_and_duplicates_are_handled_alike_with_and_without_workers(
        tmp_path: Path) -> None:
    records: list[dict[str, object] | str] = [
        make_record(i % 400, conversation=f"c-{i // 400}", user=f"u-{i // 400}")
        for i in range(PARALLEL_MIN_LINES + 10)]
    intruder = make_record(900, conversation="c-3", user="u-intruder")
    records.insert(5000, intruder)  # a turn of another user in c-3, whose owner is u-3
    records.append(make_record(1, conversation="c-0", user="u-0",
                               hosted_files=_hosted("first")))  # a duplicate of turn 1
    path = write_jsonl(tmp_path / "in.jsonl", records)
    outcomes = []
    for workers in (1, 2):
        settings = Settings(lake=tmp_path / f"lake-{workers}")
        report = Ingestor(settings, workers=workers).ingest_paths([path])
        reasons = [(q.source_file, q.line, q.reason, q.raw) for q in report.quarantined]
        stored = LakeStore(settings.lake).read(Table.QUARANTINE).to_pylist()
        outcomes.append((report.accepted, report.duplicates, reasons,
                         [(r["line"], r["reason"], r["raw"]) for r in stored]))
    assert outcomes[0] == outcomes[1]
    accepted, duplicates, reasons, stored_rows = outcomes[0]
    assert (accepted, duplicates) == (PARALLEL_MIN_LINES + 10, 1)
    [(source, line, reason, raw)] = reasons
    assert (source, line) == (str(path), 5001)
    assert "belongs to another user" in reason and "u-intruder" in reason
    assert json.loads(raw) == intruder
    assert stored_rows == [(5001, reason, raw)]


def test_a_duplicate_turn_never_rewrites_the_stored_bytes(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake")
    original = make_record(0, conversation="c-x", hosted_files=_hosted("original"))
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "a.jsonl", [original])])
    # A large input (prepared by workers) repeats that turn with other bytes, and repeats a
    # new turn inside itself: the first copy of each wins.
    again = make_record(0, conversation="c-x", hosted_files=_hosted("changed"))
    fresh = make_record(1, conversation="c-x", hosted_files=_hosted("kept"))
    fresh_again = make_record(1, conversation="c-x", hosted_files=_hosted("ignored"))
    filler = [make_record(i, conversation=f"c-{i // 300}") for i in range(PARALLEL_MIN_LINES)]
    path = write_jsonl(tmp_path / "b.jsonl", [again, fresh, *filler, fresh_again])
    report = Ingestor(settings, workers=2).ingest_paths([path])
    assert (report.accepted, report.duplicates, report.files_stored) == (
        PARALLEL_MIN_LINES + 1, 2, 1)
    files = FileStore(settings.lake)
    assert files.get("acme/c-x/t-0000/files/notes.md") == b"original"
    assert files.get("acme/c-x/t-0001/files/notes.md") == b"kept"
