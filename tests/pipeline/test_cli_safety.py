"""The command line prints data literally, refuses lakes that are not there, says what it
skipped and reads record files as the README promises (tester findings)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import sources
from pipeline.cli import app
from pipeline.commands import common
from pipeline.sources import BOM, FileSpan, SourceLine, discover, read_lines, read_spans
from tests.factories import make_record, write_jsonl

AS_OF = "2026-03-11T00:00:00+00:00"
# Rich tags that do not match (a crash when read as markup), ones that do (a silent change)
# and an emoji code.
NASTY = "a[0][/i] and [bold red]loud[/] [bold]x :smile: f(x: list[int]) -> dict[str, int]"
PRINCIPAL = ["--tenant", "acme", "--user", "u-ana"]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_LAKE", str(tmp_path / "lake"))
    # Wide consoles, so that table cells are not wrapped and the text can be looked for.
    monkeypatch.setattr(common.out, "_width", 400)
    monkeypatch.setattr(common.console, "_width", 400)
    return CliRunner()


def _ok(runner: CliRunner, args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def _fails(runner: CliRunner, args: list[str], code: int = 2) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not a traceback
    return result.output


@pytest.fixture
def nasty_lake(runner: CliRunner, tmp_path: Path) -> Path:
    bad = make_record(1)
    bad["[/oops] :smile:"] = 1  # quarantined: its reason names the unknown field
    path: Path = write_jsonl(tmp_path / "[bold]in.jsonl",
                       [make_record(0, prompt=NASTY, answer=f"answer {NASTY}"), bad])
    report = _ok(runner, ["ingest", str(path), "--no-embed"])
    assert "[/oops] :smile:: Extra inputs" in report and "[bold]in.jsonl:2" in report
    return path


def test_lake_text_prints_literally(runner: CliRunner, nasty_lake: Path) -> None:
    found = _ok(runner, ["search", "loud", *PRINCIPAL, "--as-of", AS_OF, "--min-relevance",
                         "0", "--no-semantic"])
    listed = _ok(runner, ["catalog", *PRINCIPAL, "--conversation", "c-1"])
    shown = _ok(runner, ["turn", "show", "c-1", "t-0000", *PRINCIPAL])
    for output in (found, shown):
        assert NASTY in output
    assert NASTY[:60] in listed
    for output in (found, listed, shown):
        assert "😄" not in output
    assert f"assistant: answer {NASTY}" in shown
    quarantined = _ok(runner, ["quarantine"])
    assert "[/oops] :smile:: Extra inputs" in quarantined and "[bold]in.jsonl" in quarantined


def test_user_input_in_errors_prints_literally(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "lake").mkdir()
    output = _fails(runner, ["retention", "apply", "--rule", "acme:a:b"])
    assert "'acme:a:b'" in output and "🅰" not in output
    output = _fails(runner, ["search", "x", *PRINCIPAL, "--since", "[/]:smile:"])
    assert "[/]:smile:" in output


def test_queries_file_not_utf8(runner: CliRunner, nasty_lake: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_bytes(b'\xff\xfe{"id":1}\n')
    output = _fails(runner, ["search", "--queries", str(queries)])
    assert "not UTF-8" in output and "q.jsonl" in output


NO_LAKE_COMMANDS = [
    ["search", "foo", "--tenant", "acme", "--user", "u-dev"],
    ["search", "--queries", "q.jsonl"],
    ["catalog", *PRINCIPAL, "--conversation", "c-1"],
    ["turn", "show", "c-1", "t-0000", *PRINCIPAL],
    ["ref", "resolve", "conv:fi:conv_c-1.turn_t-0000.files/x.csv", *PRINCIPAL, "--out", "x"],
    ["quarantine"],
    ["index", "status"],
    ["index", "build"],
    ["index", "compact"],
    ["embed", "--backfill"],
    ["maintain", "--dry-run"],
    ["retention", "purge", "--dry-run"],
    ["retention", "apply", "--dry-run"],
    ["erase", "--tenant", "acme", "--user", "u-ana", "--dry-run"],
    ["keys", "list"],
    ["keys", "revoke", "k"],
    ["pull", "c-1/t-0000", "--into", "ws", *PRINCIPAL],
    ["mcp", "--key", "tlk_x_y"],  # a key lives in its lake: no lake, no key
]


@pytest.mark.parametrize("args", NO_LAKE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_reading_commands_need_a_lake(runner: CliRunner, tmp_path: Path,
                                      args: list[str]) -> None:
    missing = tmp_path / "nonexistent"
    output = _fails(runner, [*args, "--lake", str(missing)])
    assert f"error: no lake at {missing} (" in output
    assert not missing.exists()  # nothing was created there either


def test_lake_that_is_a_file(runner: CliRunner, tmp_path: Path) -> None:
    afile = tmp_path / "lake.txt"
    afile.write_text("not a lake")
    for args in (["quarantine"], ["ingest", str(afile)]):
        assert "is a file" in _fails(runner, [*args, "--lake", str(afile)])


def test_writing_commands_start_a_new_lake(runner: CliRunner, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    _ok(runner, ["keys", "create", "--tenant", "acme", "--role", "recorder", "--lake",
                 str(fresh / "a")])
    _ok(runner, ["retention", "apply", "--rule", "acme=30", "--lake", str(fresh / "b")])
    assert (fresh / "b" / "policy.json").is_file()


@pytest.mark.parametrize("role", ["analyst", "admin"])
def test_keys_create_refuses_user_that_would_not_narrow(runner: CliRunner, tmp_path: Path,
                                                        role: str) -> None:
    lake = str(tmp_path / "keys")
    output = _fails(runner, ["keys", "create", "--tenant", "acme", "--role", role,
                             "--user", "u-ana", "--lake", lake])
    assert "--user" in output and "created key" not in output
    made = _ok(runner, ["keys", "create", "--tenant", "acme", "--role", "user", "--user",
                        "u-ana", "--lake", lake])
    assert "user of tenant acme, user u-ana" in made


def test_erase_of_nothing_says_so(runner: CliRunner, nasty_lake: Path) -> None:
    for target in (["--user", "u-nobody"], ["--conversation", "c-none"],
                   ["--turn", "c-1/t-9999"]):
        output = _ok(runner, ["erase", "--tenant", "acme", *target])
        assert "matched: nothing was erased" in output
    dry = _ok(runner, ["erase", "--tenant", "acme", "--user", "u-nobody", "--dry-run"])
    assert "nothing would be erased" in dry
    erased = _ok(runner, ["erase", "--tenant", "acme", "--user", "u-ana"])
    assert "nothing was erased" not in erased


def _records(turn: int) -> bytes:
    return (json.dumps(make_record(turn)) + "\n").encode()


def test_folders_take_every_record_suffix(tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    folder.mkdir()
    plain = ["a.JSONL", "b.Json", "c.ndjson"]
    zipped = ["d.jsonl.gz", "e.JSON.GZ", "f.ndjson.gz"]
    for n, name in enumerate(plain):
        (folder / name).write_bytes(_records(n))
    for n, name in enumerate(zipped):
        (folder / name).write_bytes(gzip.compress(_records(n)))
    (folder / "notes.txt").write_text("not records")
    assert [p.name for p in discover([folder])] == sorted(plain + zipped)
    assert sources.survey(folder).skipped == [folder / "notes.txt"]
    # The reader gunzips by the suffix in any case, as the folder scan matches it.
    lines = [item for item in read_lines(folder / "e.JSON.GZ") if isinstance(item, SourceLine)]
    assert json.loads(lines[0].raw)["turn_id"] == "t-0001"


def test_ingest_says_what_folders_skip(runner: CliRunner, tmp_path: Path) -> None:
    drop, empty = tmp_path / "drop", tmp_path / "empty"
    drop.mkdir()
    empty.mkdir()
    (drop / "a.NDJSON.GZ").write_bytes(gzip.compress(_records(0)))
    for n in range(7):
        (drop / f"n{n}.txt").write_text("x")
    (empty / "readme.md").write_text("x")
    output = _ok(runner, ["ingest", str(drop), "--no-embed", "--no-index"])
    assert "accepted 1" in output
    assert re.search(r"skipped 7 file\(s\) of .*drop.*: n0.txt, n1.txt, n2.txt, n3.txt, "
                     r"n4.txt and 2 more", output)
    output = _ok(runner, ["ingest", str(empty), "--no-embed", "--no-index"])
    assert "holds no record file" in output and "readme.md" in output
    strict = _fails(runner, ["ingest", str(empty), "--no-embed", "--no-index", "--strict"], 1)
    assert "holds no record file" in strict


def _bom_record(turn: int) -> bytes:
    return BOM + json.dumps(make_record(turn)).encode() + b"\n"


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_byte_order_mark_is_dropped(tmp_path: Path, gzipped: bool) -> None:
    data = _bom_record(0) + json.dumps(make_record(1)).encode() + b"\n"
    path = tmp_path / ("bom.jsonl.gz" if gzipped else "bom.jsonl")
    path.write_bytes(gzip.compress(data) if gzipped else data)
    lines = [item for item in read_lines(path) if isinstance(item, SourceLine)]
    # json.loads of bytes would skip the mark itself; the record parser does not.
    assert [item.raw[:1] for item in lines] == [b"{", b"{"]
    assert [json.loads(item.raw)["turn_id"] for item in lines] == ["t-0000", "t-0001"]


def test_a_byte_order_mark_is_dropped_from_spans(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "SPAN_MIN_BYTES", 0)
    path = tmp_path / "big.jsonl"
    path.write_bytes(_bom_record(0) + _bom_record(1))  # a BOM in line 2 is not the file's
    first, *_ = read_spans(path, 1)
    assert isinstance(first, FileSpan) and first.offset == 0
    items = first.items()
    assert len(items) == 1 and isinstance(items[0], SourceLine)
    assert items[0].raw.startswith(b'{"schema"')
    # Only the mark is dropped: the span is not taken for a file that shrank.
    assert not any(not isinstance(item, SourceLine) for item in items)


def test_ingest_accepts_a_byte_order_mark(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(_bom_record(0))
    assert "accepted 1, duplicate 0, quarantined 0" in _ok(
        runner, ["ingest", str(path), "--no-embed", "--no-index"])


def test_serve_says_when_its_lake_holds_no_key(runner: CliRunner, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    from pipeline.service.app import ENV_LAKE, ENV_NO_EMBED, ENV_NO_INDEX, ENV_WORKSPACE

    for name in (ENV_LAKE, ENV_NO_EMBED, ENV_NO_INDEX, ENV_WORKSPACE):
        monkeypatch.setenv(name, "")  # serve sets them for its workers: restored after
    started: list[str] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: started.append(app))
    typo = tmp_path / "lkae"
    output = _ok(runner, ["serve", "--lake", str(typo), "--no-embed"])
    assert started and f"note: {typo} holds no API key yet (check --lake)" in output
    keyed = tmp_path / "lake"
    _ok(runner, ["keys", "create", "--tenant", "acme", "--role", "recorder", "--lake",
                 str(keyed)])
    assert "note:" not in _ok(runner, ["serve", "--lake", str(keyed), "--no-embed"])
