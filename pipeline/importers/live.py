"""Live capture of Claude Code sessions: the ``Stop`` hook and the folder watcher.

Claude Code runs ``turnlake hook claude-code`` when the assistant finishes answering and hands
it ``{"session_id", "transcript_path", "hook_event_name", "stop_hook_active", ...}`` on stdin.
Each call re-reads the transcript from where the session's last turn began (its part of the
file, remembered with the uuid of its opening event in ``<lake>/_capture/claude-code/<session>
.json``), so a call reads one or two turns however long the session: the last turn already
stored comes back identical (a duplicate) or grown (it supersedes the stored one), and the
turns after it are new. A transcript that was rewritten (shorter than the offset, another
event at it) is read again from the start, which adds nothing that is already stored.

The turns go straight into the lake (the writer lock is waited for briefly: a busy lake makes
the call give up, and the next call catches up) or, with a server, to ``POST /v1/turns`` of
``turnlake serve``. The hook must never break the user's session: the command turns every
error into a line of its log file and exit code 1, which Claude Code reports as a
non-blocking error (exit code 2 would block the session, so it is never used).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from lake.errors import RecordError, TurnlakeError
from lake.location import LakeLocation
from lake.records import TurnRecord
from lake.settings import Settings
from pipeline.importers.claude_code import TranscriptImport
from pipeline.importers.claude_files import TRUNCATED, TurnStart, transcript_files
from pipeline.importers.common import Identity, ImportStream, stable_id
from pipeline.prepare import Quarantined

STATE_PREFIX = "_capture/claude-code"
# The hook should finish in seconds: a lake busy for longer is left to the next call.
HOOK_LOCK_TIMEOUT_S = 20.0
SERVER_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class HookInput:
    """What Claude Code's Stop hook passes on stdin (the fields capture needs)."""

    session_id: str
    transcript_path: Path

    @classmethod
    def parse(cls, raw: bytes) -> HookInput:
        """Parse the hook's stdin; RecordError naming what is missing when it is unusable."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"hook input is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise RecordError("hook input is not a JSON object")
        session, transcript = data.get("session_id"), data.get("transcript_path")
        if not isinstance(session, str) or not session:
            raise RecordError("hook input has no session_id", field="session_id")
        if not isinstance(transcript, str) or not transcript:
            raise RecordError("hook input has no transcript_path", field="transcript_path")
        return cls(session, Path(transcript).expanduser())


@dataclass(frozen=True)
class ServerTarget:
    """A ``turnlake serve`` to post turns to, and its API key."""

    url: str
    key: str


@dataclass
class CaptureReport:
    """What one capture call did."""

    records: int = 0
    accepted: int = 0
    duplicates: int = 0
    replaced: int = 0
    problems: list[str] = field(default_factory=list)
    resumed: bool = False
    seconds: float = 0.0
    partitions: set[tuple[str, str]] = field(default_factory=set)


def capture_transcript(settings: Settings, session_id: str, transcript: Path,
                       identity: Identity, *, server: ServerTarget | None = None,
                       post: Callable[[ServerTarget, list[TurnRecord]], dict[str, Any]]
                       | None = None) -> CaptureReport:
    """Record what is new in one session transcript since the last capture of the session."""
    started = time.perf_counter()
    report = CaptureReport()
    if not transcript.is_file():
        raise RecordError(f"transcript {transcript} does not exist")
    blobs = LakeLocation.of(settings.lake).blobs
    key = f"{STATE_PREFIX}/{stable_id(session_id)}.json"
    state = _load_state(blobs, key)
    start, title = _resume_point(state, transcript)
    report.resumed = start is not None
    stream = ImportStream(lambda _s: iter(()))
    reader = TranscriptImport(transcript, identity, stream, start=start, title=title)
    records = list(reader.records())
    report.records = len(records)
    report.problems = [f"{p.location}: {p.reason}" for p in stream.problems]
    if server is not None:
        if records:
            accepted, duplicates, refused = _outcomes((post or post_turns)(server, records))
            report.accepted, report.duplicates = accepted, duplicates
            report.problems.extend(refused)
    else:
        _ingest(settings, records, stream, report)
    if reader.last_start is not None:
        _save_state(blobs, key, transcript, reader.last_start, reader.title)
    report.seconds = time.perf_counter() - started
    return report


def _ingest(settings: Settings, records: list[TurnRecord], stream: ImportStream,
            report: CaptureReport) -> None:
    from pipeline.ingest import Ingestor

    hook_settings = replace(settings, lock_timeout_s=min(settings.lock_timeout_s,
                                                         HOOK_LOCK_TIMEOUT_S))
    ingestor = Ingestor(hook_settings, replace=True)
    if records:
        result = ingestor.ingest_records(records)
        report.accepted, report.duplicates = result.accepted, result.duplicates
        report.replaced = result.replaced
        report.partitions = result.partitions
    # A truncated last line is one Claude Code is still writing: the next call reads it again
    # (the turn it belongs to is re-read), so it is only logged; quarantined, it would stay
    # listed after that call captured it.
    damaged = [p for p in stream.problems if p.reason != TRUNCATED]
    if damaged:
        ingestor.quarantine([Quarantined(p.source, _line_of(p.location),
                                         f"{p.location}: {p.reason}", p.raw)
                             for p in damaged])


def post_turns(server: ServerTarget, records: Sequence[TurnRecord]) -> dict[str, Any]:
    """POST the records to ``<url>/v1/turns`` as ``{"turns": [...]}`` with the API key as a
    bearer token; the server's JSON answer (per-turn outcomes). TurnlakeError when it fails."""
    body = b'{"turns":[' + b",".join(r.to_json_bytes() for r in records) + b"]}"
    request = urllib.request.Request(
        server.url.rstrip("/") + "/v1/turns", data=body, method="POST",
        headers={"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=SERVER_TIMEOUT_S) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise TurnlakeError(f"turnlake serve at {server.url} answered {exc.code}: "
                            f"{exc.read()[:300].decode(errors='replace')}") from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise TurnlakeError(f"cannot post turns to {server.url}: {exc}") from None
    return answer if isinstance(answer, dict) else {}


def _outcomes(answer: dict[str, Any]) -> tuple[int, int, list[str]]:
    """(accepted, duplicates, problems) of a ``POST /v1/turns`` answer
    (:class:`pipeline.contract.RecordAnswer`); TurnlakeError for any other body."""
    from pydantic import ValidationError

    from pipeline.contract import RecordAnswer

    try:
        parsed = RecordAnswer.model_validate(answer)
    except ValidationError as exc:
        raise TurnlakeError(f"turnlake serve answered an unexpected body: {exc}") from None
    problems = [f"turn {t.turn_id or t.index}: rejected by the server: {t.reason}"
                + (f" (field {t.field})" if t.field else "")
                for t in parsed.turns if t.status == "rejected"]
    return parsed.accepted, parsed.duplicates, problems


def _load_state(blobs: Any, key: str) -> dict[str, Any] | None:
    try:
        state = orjson.loads(blobs.read_bytes(key))
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError:
        return None  # a damaged state file: read the transcript from the start again
    return state if isinstance(state, dict) else None


def _save_state(blobs: Any, key: str, transcript: Path, start: TurnStart,
                title: str | None) -> None:
    blobs.write_bytes(key, orjson.dumps({
        "transcript": str(transcript), "offset": start.offset, "line": start.line,
        "uuid": start.uuid, "open_offset": start.open_offset, "title": title}))


def _resume_point(state: dict[str, Any] | None, transcript: Path
                  ) -> tuple[TurnStart | None, str | None]:
    """Where to resume reading: the remembered turn start if the transcript still holds its
    opening event there, else nothing (read from the start)."""
    if state is None or state.get("transcript") != str(transcript):
        return None, None
    offset, line, open_offset = state.get("offset"), state.get("line"), state.get("open_offset")
    uuid, title = state.get("uuid"), state.get("title")
    if not all(isinstance(v, int) and v >= 0 for v in (offset, line, open_offset)):
        return None, None
    assert isinstance(offset, int) and isinstance(line, int) and isinstance(open_offset, int)
    with transcript.open("rb") as fh:
        fh.seek(open_offset)
        opening = fh.readline()
    try:
        event = orjson.loads(opening)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(event, dict) or event.get("uuid") != uuid or uuid is None:
        return None, None
    return (TurnStart(offset, line, uuid, open_offset),
            title if isinstance(title, str) else None)


def _line_of(location: str) -> int:
    digits = "".join(c for c in location.split()[-1] if c.isdigit()) if location else ""
    return int(digits) if digits else 0


def watch(settings: Settings, folder: Path, identity: Identity, *, interval_s: float = 2.0,
          rounds: int | None = None, server: ServerTarget | None = None,
          on_capture: Callable[[Path, CaptureReport], None] | None = None,
          on_error: Callable[[Path, Exception], None] | None = None) -> int:
    """Capture every session transcript under ``folder`` whenever it changes (polling its size
    and modification time every ``interval_s``), ``rounds`` times or until interrupted;
    returns how many captures ran. A failing transcript is reported and retried next round."""
    seen: dict[Path, tuple[int, int]] = {}
    captures = 0
    done = 0
    while rounds is None or done < rounds:
        for path in transcript_files([folder]):
            try:
                stat = path.stat()
            except OSError:
                continue
            mark = (stat.st_size, stat.st_mtime_ns)
            if seen.get(path) == mark:
                continue
            try:
                report = capture_transcript(settings, path.stem, path, identity, server=server)
            except (TurnlakeError, OSError) as exc:
                if on_error is not None:
                    on_error(path, exc)
                continue
            seen[path] = mark
            captures += 1
            if on_capture is not None:
                on_capture(path, report)
        done += 1
        if rounds is None or done < rounds:
            time.sleep(interval_s)
    return captures
