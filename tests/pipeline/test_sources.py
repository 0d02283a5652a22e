"""Reading record files: line by line, or in runs of lines left as read."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pytest

from pipeline import sources
from pipeline.prepare import PackedLines
from pipeline.sources import (
    FileSpan,
    LineRun,
    SourceLine,
    SourceProblem,
    read_lines,
    read_runs,
    read_spans,
)

BODY = b'{"a": 1}\n\n  {"b": 2}  \r\n\t\n{"c": 3}\n{"d": 4}\n{"e": 5}\n{"f": 6}\n{"g": 7}'


def _runs(path: Path, size: int) -> list[LineRun]:
    runs = list(read_runs(path, size))
    assert all(isinstance(run, LineRun) for run in runs)
    return [run for run in runs if isinstance(run, LineRun)]


def test_lines_are_numbered_stripped_and_blank_ones_dropped(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(BODY)
    assert list(read_lines(path)) == [
        SourceLine(path, 1, b'{"a": 1}'), SourceLine(path, 3, b'{"b": 2}'),
        SourceLine(path, 5, b'{"c": 3}'), SourceLine(path, 6, b'{"d": 4}'),
        SourceLine(path, 7, b'{"e": 5}'), SourceLine(path, 8, b'{"f": 6}'),
        SourceLine(path, 9, b'{"g": 7}')]


def test_runs_hold_the_lines_exactly_as_read(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(BODY)
    runs = _runs(path, 4)
    assert [(run.first, len(run.lines)) for run in runs] == [(1, 4), (5, 4), (9, 1)]
    assert b"".join(line for run in runs for line in run.lines) == BODY
    assert [item for run in runs for item in run.items()] == list(read_lines(path))


def _truncated_gzip(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl.gz"
    body = b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i % 97)) for i in range(400))
    path.write_bytes(gzip.compress(body)[:-300])
    return path


def test_a_truncated_gzip_keeps_every_line_read_before_the_error(tmp_path: Path) -> None:
    path = _truncated_gzip(tmp_path)
    readable: list[bytes] = []
    try:
        with gzip.open(path, "rb") as fh:
            readable.extend(raw.strip() for raw in fh)
    except EOFError:
        pass
    assert readable
    # Runs of 7 fail part-way through one: its lines are read again one at a time.
    parts = list(read_runs(path, 7))
    *runs, problem = parts
    assert isinstance(problem, SourceProblem)
    assert problem.line == len(readable) + 1
    assert f"past line {len(readable)}" in problem.reason
    lines = [item.raw for run in runs if isinstance(run, LineRun) for item in run.items()]
    assert lines == readable
    assert [item.raw for item in read_lines(path) if isinstance(item, SourceLine)] == readable


def test_an_unreadable_file_is_one_problem_at_line_one(tmp_path: Path) -> None:
    path = tmp_path / "missing.jsonl"
    [problem] = list(read_runs(path, 10))
    assert isinstance(problem, SourceProblem)
    assert (problem.line, problem.reason[:34]) == (1, "file could not be read past line 0")


def test_packed_runs_give_back_the_lines_read_lines_gives(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(BODY)
    b.write_bytes(b"\n\n{}\n")
    problem = SourceProblem(b, 4, "file could not be read past line 3: truncated")
    packed = pickle.loads(pickle.dumps(PackedLines.of_runs([*_runs(a, 5), *_runs(b, 5),
                                                            problem])))
    assert len(packed) == 9 + 3 + 1  # blank lines count: they keep the numbering
    assert packed.items() == [*read_lines(a), *read_lines(b), problem]


def _located(path: Path, size: int) -> list[SourceLine | SourceProblem]:
    """The lines read_spans gives, spans read as a worker reads them."""
    items: list[SourceLine | SourceProblem] = []
    for part in read_spans(path, size):
        if isinstance(part, SourceProblem):
            items.append(part)
        else:
            items += part.items()
    return items


@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n", b"\n\n  \n"])
def test_spans_give_the_lines_read_lines_gives(tmp_path: Path, ending: bytes,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "SPAN_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "_SCAN_BLOCK", 64)  # spans straddle blocks
    path = tmp_path / "in.jsonl"
    path.write_bytes(BODY + b'\n{"lone": "\r"}\n' * 3 + BODY + ending)
    for size in (1, 2, 4, 9, 100):
        parts = list(read_spans(path, size))
        spans = [p for p in parts if isinstance(p, FileSpan)]
        assert [s.first for s in spans] == list(range(1, size * len(spans) + 1, size))
        assert all(isinstance(p, FileSpan) for p in parts[:-1])
        assert _located(path, size) == list(read_lines(path))


def test_small_and_gzipped_files_are_read_not_located(tmp_path: Path) -> None:
    small, packed = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    small.write_bytes(BODY)
    packed.write_bytes(gzip.compress(BODY * 2000))
    assert all(isinstance(p, LineRun) for p in read_spans(small, 2))
    assert all(isinstance(p, LineRun) for p in read_spans(packed, 2))


def test_a_span_of_a_file_that_shrank_ends_with_a_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "SPAN_MIN_BYTES", 0)
    path = tmp_path / "in.jsonl"
    path.write_bytes(BODY + b"\n")
    first, second, *_ = read_spans(path, 4)
    assert isinstance(first, FileSpan) and isinstance(second, FileSpan)
    path.write_bytes(BODY[:BODY.index(b"{\"d\"") + 3])
    *lines, problem = second.items()
    assert [line.raw for line in lines if isinstance(line, SourceLine)] == [b'{"c": 3}', b'{"d']
    assert isinstance(problem, SourceProblem)
    assert problem.line == 7 and "file changed while being read" in problem.reason
    path.unlink()
    [gone] = first.items()
    assert isinstance(gone, SourceProblem)
    assert gone.line == 1 and "could not be read from line 1" in gone.reason
