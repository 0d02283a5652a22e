"""Ingest through worker processes behaves exactly as in-process ingest."""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from lake.errors import LakeError
from lake.filestore import PACKED_FILE_BYTES, FileStore
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import CHUNK_LINES, PARALLEL_MIN_LINES, Ingestor
from pipeline.prepare import PackedLines, prepare_packed
from pipeline.sources import SourceLine, SourceProblem
from tests.factories import make_record, write_jsonl


def _hosted(text: str) -> list[dict[str, str]]:
    return [{"path": "files/notes.md", "mime": "text/markdown",
             "content_b64": base64.b64encode(text.encode()).decode()}]


def _stored(settings: Settings, conversation: str, turn: str) -> bytes:
    """The bytes the catalog names for a turn's notes.md."""
    rows = LakeStore(settings.lake).read(
        Table.FILES, columns=["storage_key"],
        filter=(ds.field("conversation_id") == conversation) & (ds.field("turn_id") == turn))
    [key] = rows["storage_key"].to_pylist()
    return FileStore(settings.lake).get(key)


def _object_bytes(settings: Settings) -> bytes:
    """Everything stored under objects/, concatenated."""
    return b"".join(p.read_bytes() for p in sorted((settings.lake / "objects").rglob("*"))
                    if p.is_file())


def test_foreign_turns_and_duplicates_are_handled_alike_with_and_without_workers(
        tmp_path: Path) -> None:
    records: list[dict[str, object] | str] = [
        make_record(i % 400, conversation=f"c-{i // 400}", user=f"u-{i // 400}")
        for i in range(PARALLEL_MIN_LINES + 10)]
    intruder = make_record(900, conversation="c-3", user="u-intruder")
    records.insert(5000, intruder)  # a turn of another user in c-3, whose owner is u-3
    # turn 1 again, with a hosted file it did not have: a conflict, and its file not stored
    records.append(make_record(1, conversation="c-0", user="u-0",
                               hosted_files=_hosted("first")))
    records.append(make_record(2, conversation="c-0", user="u-0"))  # a duplicate of turn 2
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
    [(source, line, reason, raw), (_, changed_line, changed_reason, _)] = sorted(reasons)
    assert (source, line) == (str(path), 5001)
    assert "belongs to another user" in reason and "u-intruder" in reason
    assert json.loads(raw) == intruder
    assert changed_line == len(records) - 1 and "conflict" in changed_reason
    assert "hosted_files" in changed_reason
    assert sorted(stored_rows)[0] == (5001, reason, raw)


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
    assert _stored(settings, "c-x", "t-0000") == b"original"
    assert _stored(settings, "c-x", "t-0001") == b"kept"
    # The workers staged every copy: the refused one shared a pack with "kept", and was
    # blanked before that pack was stored; what no batch moved into place went with the run.
    assert b"changed" not in _object_bytes(settings)
    assert not (settings.lake / "_staging").exists()


def test_bytes_a_crashed_run_staged_are_swept_by_the_next_writer(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake")
    left = settings.lake / "_staging" / "0123abcd"
    left.mkdir(parents=True)
    (left / "4242-0").write_bytes(b"staged by a killed worker")
    records = [make_record(i, conversation=f"c-{i // 300}",
                           hosted_files=_hosted(f"n{i}") if i % 1000 == 0 else [])
               for i in range(PARALLEL_MIN_LINES)]
    report = Ingestor(settings, workers=2).ingest_paths(
        [write_jsonl(tmp_path / "in.jsonl", records)])
    assert report.files_stored == PARALLEL_MIN_LINES // 1000
    assert not (settings.lake / "_staging").exists()
    assert _stored(settings, "c-10", "t-3000") == b"n3000"
    # Small files are packed: one pack per chunk of input, nothing loose.
    stored = sorted(p for p in (settings.lake / "objects").rglob("*") if p.is_file())
    assert len(stored) == PARALLEL_MIN_LINES // CHUNK_LINES
    assert {p.parent.name for p in stored} == {"@packs"}
    assert b"staged by a killed worker" not in _object_bytes(settings)


def test_packed_lines_come_back_as_read(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    items: list[SourceLine | SourceProblem] = [
        SourceLine(a, 1, b'{"x": 1}'), SourceLine(b, 1, b"\xff"), SourceLine(a, 3, b"{}"),
        SourceProblem(b, 2, "file could not be read past line 1: truncated")]
    packed = pickle.loads(pickle.dumps(PackedLines.of(items)))
    assert packed.paths == [a, b]
    assert packed.items() == items
    assert [type(i) for i in packed.items()] == [type(i) for i in items]


def _loaded_by(module: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of ``candidates`` a fresh interpreter has loaded after importing ``module``."""
    code = (f"import sys, {module}; "
            f"print(' '.join(m for m in {candidates!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def test_workers_import_neither_the_search_service_nor_the_table_writer() -> None:
    # A worker imports pipeline.prepare on start (once per ingest and worker): what it pulls
    # in is start-up time on every large ingest. (lake.search.defaults, a few constants the
    # record's tables share with the light client, may come along.)
    assert _loaded_by("pipeline.prepare", (
        "deltalake", "polars", "pyarrow.dataset", "faiss", "tantivy", "lake.search.service",
        "lake.search.generators", "lake.search.fusion", "lake.store", "lake.batches")) == []


def _preload_under(tmp_path: Path, *argv: str) -> list[str]:
    """worker_preload() as a program run as ``python ARGV`` sees it (modules in tmp_path)."""
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    return list(json.loads(out.stdout))


@pytest.mark.parametrize("layout", ["script", "module", "package"])
def test_the_workers_fork_server_preloads_the_main_module_once(tmp_path: Path,
                                                               layout: str) -> None:
    # Otherwise multiprocessing imports the main module into every worker: for the CLI, a
    # second of imports per worker on every large ingest.
    probe = ("import json\nfrom pipeline.workers import worker_preload\n"
             "if __name__ == '__main__':\n    print(json.dumps(worker_preload()))\n")
    if layout == "package":
        (tmp_path / "probe").mkdir()
        (tmp_path / "probe" / "__init__.py").write_text("")
        (tmp_path / "probe" / "__main__.py").write_text(probe)
    else:
        (tmp_path / "probe.py").write_text(probe)
    argv = {"script": ("probe.py",), "module": ("-m", "probe"), "package": ("-m", "probe")}
    expected = {"script": ["__main__", "pipeline.prepare"],
                "module": ["probe", "pipeline.prepare"],
                # A package's __main__ is never imported by workers, nor preloaded.
                "package": ["pipeline.prepare"]}
    assert _preload_under(tmp_path, *argv[layout]) == expected[layout]


def test_a_worker_prepares_chunks_without_importing_pandas(tmp_path: Path) -> None:
    # pyarrow would import it on a process's first array: 0.2 CPU-seconds per worker.
    path = write_jsonl(tmp_path / "in.jsonl", [make_record(i) for i in range(3)])
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from lake.settings import Settings\n"
        "from pipeline.prepare import prepare_chunk\n"
        "from pipeline.workers import block_pandas_import\n"
        "from pipeline.sources import read_lines\n"
        "block_pandas_import()\n"
        f"chunk = prepare_chunk(list(read_lines(Path({str(path)!r}))), "
        f"Settings(lake=Path({str(tmp_path / 'lake')!r})))\n"
        "try:\n    import pandas\nexcept ImportError:\n    refused = True\n"
        "else:\n    refused = False\n"
        "print(chunk.turns, 'pandas' in sys.modules, refused)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["3", "False", "True"]


def test_a_process_that_already_has_pandas_keeps_it() -> None:
    code = ("import pandas, sys\nfrom pipeline.workers import block_pandas_import\n"
            "block_pandas_import()\nimport pandas.api.types\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "ok"


def test_the_console_scripts_main_module_imports_no_command_line() -> None:
    # The fork server preloads it: it must not pull the whole CLI into every ingest's server.
    assert _loaded_by("pipeline.entry", ("pipeline.cli", "typer", "polars", "deltalake")) == []


def test_a_worker_stages_hosted_bytes_instead_of_returning_them(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake")
    record = make_record(0, conversation="c-x", hosted_files=_hosted("staged"))
    items: list[SourceLine | SourceProblem] = [
        SourceLine(tmp_path / "in.jsonl", 1, json.dumps(record).encode())]
    files = FileStore(settings.lake)
    with files.staging() as folder:
        assert folder is not None
        chunk = prepare_packed(PackedLines.of(items), settings, folder)
        [(turn, pending)] = chunk.pending
        assert (turn, pending.data) == (0, b"")
        assert re.fullmatch(r"@packs/[0-9a-f]{32}\.pack#0\+6", pending.key)
        assert pending.staged is not None and pending.staged.startswith(folder)
        assert Path(pending.staged).read_bytes() == b"staged"
        # The rows come back in a staged Arrow file, mapped and removed when unspilled.
        assert chunk.tables == {} and chunk.spilled is not None
        spilled = Path(chunk.spilled)
        assert spilled.is_relative_to(folder)
        chunk.unspill()
        assert not spilled.exists() and chunk.spilled is None
        [key] = chunk.tables[Table.FILES]["storage_key"].to_pylist()
        assert key == pending.key
        # A pack needs no folders of the turn's.
        assert not (settings.lake / "objects" / "acme").exists()


def test_an_unreadable_spilled_chunk_is_a_lake_error_naming_its_file(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake")
    items: list[SourceLine | SourceProblem] = [
        SourceLine(tmp_path / "in.jsonl", 1, json.dumps(make_record(0)).encode())]
    with FileStore(settings.lake).staging() as folder:
        assert folder is not None
        chunk = prepare_packed(PackedLines.of(items), settings, folder)
        assert chunk.spilled is not None
        Path(chunk.spilled).write_bytes(b"not arrow")
        with pytest.raises(LakeError, match=re.escape(chunk.spilled)):
            chunk.unspill()


def test_a_worker_stages_a_large_file_on_its_own(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake")
    big = b"x" * (PACKED_FILE_BYTES + 1)
    record = make_record(0, conversation="c-x", hosted_files=[
        {"path": "files/big.bin", "mime": "application/octet-stream",
         "content_b64": base64.b64encode(big).decode()}, *_hosted("small")])
    items: list[SourceLine | SourceProblem] = [
        SourceLine(tmp_path / "in.jsonl", 1, json.dumps(record).encode())]
    with FileStore(settings.lake).staging() as folder:
        assert folder is not None
        chunk = prepare_packed(PackedLines.of(items), settings, folder)
        [(_, large), (_, small)] = chunk.pending
        assert large.key == "acme/c-x/t-0000/files/big.bin"
        assert large.staged is not None and Path(large.staged).read_bytes() == big
        assert small.key.startswith("@packs/")
        # The large file's folders are made ahead, as its commit only moves it.
        assert (settings.lake / "objects" / "acme" / "c-x" / "t-0000" / "files").is_dir()
