"""Live capture from Claude Code: the Stop hook command and the folder watcher."""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lake.records import TurnRecord
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.importers.common import Identity
from pipeline.importers.live import (
    CaptureReport,
    HookInput,
    ServerTarget,
    capture_transcript,
    watch,
)

FIXTURE = (Path(__file__).parent / "fixtures" / "claude_code_v2" / "-home-dev-search-api")
SESSION = "c41d8e2a-7b3f-4e19-a6d2-5f0b9c8e7a13"
IDENTITY = Identity(tenant="acme", user_id="u-dev", app="claude-code", agent="claude-code")


def _lines() -> list[bytes]:
    return (FIXTURE / f"{SESSION}.jsonl").read_bytes().splitlines(keepends=True)


def _copy(tmp_path: Path, lines: list[bytes]) -> Path:
    """The session (with its subagents folder) under tmp_path, holding only ``lines``."""
    project = tmp_path / "projects" / "-home-dev-search-api"
    shutil.copytree(FIXTURE, project)
    path = project / f"{SESSION}.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def _turns(settings: Settings) -> dict[str, dict[str, Any]]:
    store = LakeStore(settings.lake)
    if not store.exists(Table.TURN_LOGS):
        return {}
    rows = store.read(Table.TURN_LOGS, columns=["turn_id", "payload"]).to_pylist()
    return {r["turn_id"]: json.loads(r["payload"]) for r in rows}


def _split_at_second_prompt() -> int:
    """The index of the line of the second request (its caveat and command come first)."""
    return next(i for i, raw in enumerate(_lines()) if b"Caveat: The messages" in raw)


def test_a_turn_is_recorded_once_the_next_prompt_closes_it_or_the_session_ends(
        hashing_settings: Settings, tmp_path: Path) -> None:
    settings = hashing_settings
    lines = _lines()
    cut = _split_at_second_prompt()
    path = _copy(tmp_path, lines[:cut])
    first = capture_transcript(settings, SESSION, path, IDENTITY)
    assert (first.records, first.held, first.resumed) == (0, True, False)
    again = capture_transcript(settings, SESSION, path, IDENTITY)
    assert (again.records, again.held, again.resumed) == (0, True, True)
    path.write_bytes(b"".join(lines))  # the session went on: two more requests
    grown = capture_transcript(settings, SESSION, path, IDENTITY)
    assert (grown.accepted, grown.duplicates, grown.replaced, grown.held) == (2, 0, 0, True)
    ended = capture_transcript(settings, SESSION, path, IDENTITY, final=True)
    assert (ended.accepted, ended.held) == (1, False)
    after = capture_transcript(settings, SESSION, path, IDENTITY, final=True)
    assert (after.records, after.accepted) == (0, 0)
    stored = _turns(settings)
    assert len(stored) == 3
    # The live import stores exactly what a one-shot import of the whole file gives.
    from pipeline.importers import iter_claude_code
    whole = {r.turn_id: json.loads(r.to_json()) for r in iter_claude_code(
        [path], tenant="acme", user_id="u-dev")}
    # The title too: both take the first prompt, not the summary line written later.
    assert stored == whole
    # How each completion ended is a turn_logs column too (the request the user cut short).
    logs = LakeStore(settings.lake).read(
        Table.TURN_LOGS, columns=["turn_id", "completion_status"]).to_pylist()
    statuses = {r["turn_id"]: r["completion_status"] for r in logs}
    assert statuses == {t: p["completion"].get("status", "completed") for t, p in stored.items()}
    assert "interrupted" in statuses.values()


def test_a_turn_still_growing_is_held_and_recorded_whole_once(
        hashing_settings: Settings, tmp_path: Path) -> None:
    settings = hashing_settings
    lines = _lines()
    # Cut after the first tool result: the first request has only its opening remark yet.
    cut = next(i for i, raw in enumerate(lines) if b"File created successfully" in raw) + 1
    path = _copy(tmp_path, lines[:cut])
    assert capture_transcript(settings, SESSION, path, IDENTITY).held
    assert _turns(settings) == {}
    path.write_bytes(b"".join(lines))
    report = capture_transcript(settings, SESSION, path, IDENTITY)
    assert (report.accepted, report.replaced, report.conflicts) == (2, 0, 0)
    done = _turns(settings)["11111111-aaaa-4bbb-8ccc-000000000001"]
    assert done["completion"]["text"].startswith(
        "Let me find where requests enter the API first.\n\nAdded a token-bucket limiter")
    assert len(done["steps"]) == 7
    rows = LakeStore(settings.lake).read(Table.CONTENT_ROWS, columns=["role", "text"])
    assert [r["text"][:9] for r in rows.to_pylist() if r["role"] == "assistant"
            and r["text"].startswith("Let me")] == ["Let me fi"]


def test_a_rewritten_transcript_is_read_again_from_the_start(
        hashing_settings: Settings, tmp_path: Path) -> None:
    path = _copy(tmp_path, _lines())
    capture_transcript(hashing_settings, SESSION, path, IDENTITY, final=True)
    path.write_bytes(b"\n" * 10 + b"".join(_lines()))  # everything moved
    report = capture_transcript(hashing_settings, SESSION, path, IDENTITY, final=True)
    assert (report.resumed, report.accepted, report.duplicates) == (False, 0, 3)


def test_damaged_lines_are_quarantined_and_never_fail_the_capture(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lines = _lines()
    cut = _split_at_second_prompt()
    damaged = [*lines[:cut], b'{"type":"user","uuid":\xff\xfe broken\n', lines[cut][:90]]
    path = _copy(tmp_path, damaged)
    report = capture_transcript(hashing_settings, SESSION, path, IDENTITY, final=True)
    assert report.accepted == 1
    assert [p.split(":")[1].strip() for p in report.problems] == [
        "line is not valid UTF-8 (invalid start byte at byte 22)", "truncated last line"]
    # The truncated last line is still being written: logged, not quarantined.
    quarantined = LakeStore(hashing_settings.lake).read(Table.QUARANTINE)["reason"].to_pylist()
    assert quarantined == ["line 15: line is not valid UTF-8 (invalid start byte at byte 22)"]


def _hook(runner: CliRunner, lake: Path, log: Path, payload: object,
          *extra: str) -> tuple[int, str]:
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    result = runner.invoke(app, ["hook", "claude-code", "--tenant", "acme", "--user", "u-dev",
                                 "--lake", str(lake), "--log", str(log), *extra], input=stdin)
    return result.exit_code, log.read_text() if log.exists() else ""


def test_the_hook_command_records_and_logs_and_never_exits_2(
        tmp_path: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    runner = CliRunner()
    path = _copy(tmp_path, _lines())
    lake, log = tmp_path / "lake", tmp_path / "hook.log"
    payload = {"session_id": SESSION, "transcript_path": str(path), "cwd": "/home/dev/search-api",
               "hook_event_name": "Stop", "stop_hook_active": False}
    code, text = _hook(runner, lake, log, payload)
    assert code == 0, text
    assert "(Stop): 2 turns read, 2 new" in text and "open turn held" in text
    code, text = _hook(runner, lake, log, {**payload, "hook_event_name": "SessionEnd",
                                           "reason": "prompt_input_exit"})
    assert code == 0 and "(SessionEnd): 1 turns read, 1 new" in text.splitlines()[-1], text
    # A key in the environment (the MCP server's) does not stop a lake capture.
    monkeypatch.setenv("TURNLAKE_KEY", "tlk_for_the_mcp_server")
    code, text = _hook(runner, lake, log, payload)
    assert code == 0 and "0 new" in text.splitlines()[-1], text
    monkeypatch.delenv("TURNLAKE_KEY")
    assert list((private_cache / "turnlake" / "capture" / "claude-code").glob("*.json"))
    for bad in ("not json", {"session_id": SESSION},
                {"session_id": SESSION, "transcript_path": str(tmp_path / "gone.jsonl")}):
        code, text = _hook(runner, lake, log, bad)
        assert code == 1, text
        assert "error:" in text.splitlines()[-1]
    code, text = _hook(runner, lake, log, payload, "--server", "http://127.0.0.1:9")
    assert code == 1 and "--server needs --key" in text.splitlines()[-1]
    result = runner.invoke(app, ["hook", "claude-code", "--tenant", "acme", "--user", "u-dev",
                                 "--log", str(log)], input=json.dumps(payload))
    assert result.exit_code == 1
    assert "give --lake or $TURNLAKE_LAKE" in log.read_text().splitlines()[-1]


def test_posting_to_a_server_sends_the_turns_with_the_key(
        settings: Settings, tmp_path: Path) -> None:
    path = _copy(tmp_path, _lines())
    sent: list[tuple[ServerTarget, list[str]]] = []

    def post(server: ServerTarget, records: list[TurnRecord]) -> dict[str, Any]:
        sent.append((server, [r.turn_id for r in records]))
        return {"accepted": len(records), "duplicates": 0, "rejected": 0,
                "turns": [{"index": i, "status": "accepted"} for i in range(len(records))]}

    report = capture_transcript(None, SESSION, path, IDENTITY, final=True,
                                server=ServerTarget("http://x", "k1"), post=post)
    assert report.accepted == 3 and len(sent[0][1]) == 3
    assert not settings.lake.exists()  # type: ignore[union-attr]


def test_the_server_poster_speaks_the_serve_api(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: dict[str, object] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen["path"], seen["auth"] = self.path, self.headers["Authorization"]
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["turns"] = len(body["turns"])
            n = len(body["turns"])
            answer = json.dumps({"accepted": n, "duplicates": 0, "rejected": 0, "turns": [
                {"index": i, "status": "accepted"} for i in range(n)]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        from pipeline.importers import iter_claude_code
        from pipeline.importers.live import post_turns
        records = list(iter_claude_code([_copy(tmp_path, _lines())], tenant="acme",
                                        user_id="u-dev"))
        answer = post_turns(ServerTarget(f"http://127.0.0.1:{server.server_port}", "k1"),
                            records)
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert seen == {"path": "/v1/turns", "auth": "Bearer k1", "turns": 3}
    assert answer["accepted"] == 3


def test_watch_captures_each_change_and_settles_an_idle_session(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lines = _lines()
    path = _copy(tmp_path, lines[:_split_at_second_prompt()])
    reports: list[tuple[int, bool]] = []

    def seen(_path: Path, report: CaptureReport) -> None:
        reports.append((report.accepted, report.held))

    # An hour of quiet is not reached: the open turn stays held, the file is read once.
    assert watch(hashing_settings, tmp_path / "projects", IDENTITY, interval_s=0, rounds=2,
                 settle_s=3600, on_capture=seen) == 1
    # Settled at once: the second round records the open turn as final.
    watch(hashing_settings, tmp_path / "projects", IDENTITY, interval_s=0, rounds=2,
          settle_s=0, on_capture=seen)
    path.write_bytes(b"".join(lines))
    watch(hashing_settings, tmp_path / "projects", IDENTITY, interval_s=0, rounds=2,
          settle_s=0, on_capture=seen)
    assert reports == [(0, True), (0, True), (1, False), (1, True), (1, False)]
    assert len(_turns(hashing_settings)) == 3


def test_hook_input_is_parsed_from_the_documented_fields() -> None:
    hook = HookInput.parse(json.dumps({"session_id": "s", "transcript_path": "~/t.jsonl",
                                       "hook_event_name": "Stop",
                                       "stop_hook_active": True}).encode())
    assert hook.session_id == "s" and hook.transcript_path == Path.home() / "t.jsonl"
    assert not hook.final
    ended = HookInput.parse(json.dumps({"session_id": "s", "transcript_path": "/t.jsonl",
                                        "hook_event_name": "SessionEnd",
                                        "reason": "logout"}).encode())
    assert ended.final


def _synthetic_session(turns: int) -> Iterator[bytes]:
    """A transcript of ``turns`` requests, each a prompt, two tool calls and an answer: five
    events per request (plus a snapshot line)."""
    for n in range(turns):
        at = f"2026-02-0{1 + n // 5000}T{(n // 60) % 24:02d}:{n % 60:02d}:00.000Z"
        base = {"sessionId": "perf", "isSidechain": False, "timestamp": at, "cwd": "/w",
                "version": "2.1.14", "gitBranch": "main"}
        events = [
            {**base, "type": "user", "uuid": f"u{n}",
             "message": {"role": "user", "content": f"request {n}: look at module {n % 97}"}},
            {**base, "type": "assistant", "uuid": f"a{n}",
             "message": {"id": f"m{n}", "role": "assistant", "content": [
                 {"type": "tool_use", "id": f"t{n}", "name": "Read",
                  "input": {"file_path": f"/w/m{n % 97}.py"}}],
                 "usage": {"input_tokens": 100, "output_tokens": 10}}},
            {**base, "type": "user", "uuid": f"r{n}", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{n}", "content": "def f(): ..."}]}},
            {**base, "type": "assistant", "uuid": f"b{n}",
             "message": {"id": f"n{n}", "role": "assistant", "content": [
                 {"type": "text", "text": f"module {n % 97} defines f"}]}},
        ]
        yield b"".join(json.dumps(e).encode() + b"\n" for e in events)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_hook_latency_on_a_5000_event_transcript(hashing_settings: Settings,
                                                tmp_path: Path) -> None:
    """Measures (prints, never asserts on time) the hook's p95 on a 5,000-event session."""
    settings = hashing_settings
    chunks = list(_synthetic_session(1260))  # 5,040 events
    path = tmp_path / "perf.jsonl"
    path.write_bytes(b"".join(chunks[:1250]))
    started = time.perf_counter()
    first = capture_transcript(settings, "perf", path, IDENTITY)
    full = time.perf_counter() - started
    assert (first.accepted, first.held) == (1249, True)
    times = []
    for n in range(1250, 1260):
        with path.open("ab") as fh:
            fh.write(chunks[n])
        started = time.perf_counter()
        report = capture_transcript(settings, "perf", path, IDENTITY)
        times.append(time.perf_counter() - started)
        assert (report.resumed, report.accepted, report.duplicates) == (True, 1, 0)
    p95 = statistics.quantiles(times, n=20)[-1]
    events = sum(c.count(b"\n") for c in chunks)
    print(f"\nhook on a {events}-event transcript: first call "
          f"(whole file, 1250 turns) {full:.2f}s; next calls p50 {statistics.median(times):.2f}s "
          f"p95 {p95:.2f}s")
    capture_transcript(settings, "perf", path, IDENTITY, final=True)
    assert len(_turns(settings)) == 1260


def test_a_command_run_after_the_last_answer_waits_for_the_turn_it_precedes(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lines = _lines()
    second = next(i for i, raw in enumerate(lines) if b"Now make the limit configurable" in raw)
    path = _copy(tmp_path, lines[:second - 1])  # up to the /cost output and a snapshot
    from pipeline.importers import iter_claude_code
    stream = iter_claude_code([path], tenant="acme", user_id="u-dev")
    (first,) = list(stream)
    assert stream.skipped["context event before a turn not yet written"] == 3
    assert "command" not in [e.kind for e in first.context_events]
    capture_transcript(hashing_settings, SESSION, path, IDENTITY)
    path.write_bytes(b"".join(lines))
    report = capture_transcript(hashing_settings, SESSION, path, IDENTITY, final=True)
    assert (report.accepted, report.duplicates, report.replaced) == (3, 0, 0)
    kinds = [e["kind"] for e in _turns(hashing_settings)[
        "66666666-aaaa-4bbb-8ccc-000000000015"]["context_events"]]
    assert kinds[:3] == ["caveat", "command", "command_output"]


def test_a_session_resumed_after_it_ended_never_changes_its_recorded_last_turn(
        hashing_settings: Settings, tmp_path: Path) -> None:
    from tests.pipeline.importers.claude_session import SessionWriter

    writer = SessionWriter(tmp_path / "s" / "resumed.jsonl", "resumed", "/w")
    writer.turn("first question about owls", "Owls hunt at night.", [])
    writer.after_stop_hooks("turnlake hook claude-code", 0)
    ended = capture_transcript(hashing_settings, "resumed", writer.path, IDENTITY, final=True)
    assert ended.accepted == 1
    before = _turns(hashing_settings)
    # Resumed: Claude Code appends to the same file; a Stop before the next prompt, then one
    # after the next turn.
    writer.after_stop_hooks("turnlake hook claude-code", writer.lines)
    quiet = capture_transcript(hashing_settings, "resumed", writer.path, IDENTITY)
    assert (quiet.records, quiet.conflicts) == (0, 0)
    writer.turn("second question about owls", "They see in the dark.", [])
    writer.turn("third question about owls", "They fly silently.", [])
    later = capture_transcript(hashing_settings, "resumed", writer.path, IDENTITY)
    assert (later.accepted, later.conflicts, later.replaced, later.held) == (1, 0, 0, True)
    stored = _turns(hashing_settings)
    assert {k: stored[k] for k in before} == before
    assert len(stored) == 2
