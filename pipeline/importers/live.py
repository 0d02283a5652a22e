"""Live capture of Claude Code sessions: the ``Stop``/``SessionEnd`` hook and the folder watcher.

Claude Code runs ``turnlake hook claude-code`` when the assistant finishes answering (``Stop``)
and when the session ends (``SessionEnd``), and hands it ``{"session_id", "transcript_path",
"hook_event_name", ...}`` on stdin. After its ``Stop`` hooks ran, Claude Code appends lines of
its own to the transcript (a ``system`` ``stop_hook_summary`` line, a ``turn_duration`` line,
the hooks' attachments), and a background task may still add to the turn. A turn's content is
therefore final only once the next prompt opened the next turn, or the session ended: each
call records the turns that are closed and holds the one still open, and ``SessionEnd``
(``final``) records that one too. A recorded turn never changes afterwards, so a server never
sees a conflict and a lake never supersedes a turn it indexed.

Each call re-reads the transcript from where the held turn began (its part of the file,
remembered with the uuid of its opening event), so a call reads one or two turns however long
the session. A transcript that was rewritten (shorter than the offset, another event at it) is
read again from the start, which adds nothing that is already stored. That capture state lives
in the user's cache folder (``$XDG_CACHE_HOME/turnlake/capture``, else
``~/.cache/turnlake/capture``), one file per session and target: never in the project a hook
runs in, and a ``--server`` capture needs no lake at all.

The turns go straight into a lake through :class:`pipeline.live.LiveWriter`, which embeds their
rows and gives the touched partitions a delta segment, so they are searchable when the call
returns (the writer lock is waited for at most ``HOOK_LOCK_TIMEOUT_S``: a busy lake makes the
call give up, and the next call catches up), or to ``POST /v1/turns`` of ``turnlake serve``,
whose writer embeds and indexes them. The hook must never break the user's session: the
command turns every error into a line of its log file and exit code 1, which Claude Code
reports as a non-blocking error (exit code 2 would block the session, so it is never used).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from lake.errors import RecordError, TurnlakeError
from lake.records import TurnRecord
from lake.settings import Settings
from pipeline.cache import cache_dir
from pipeline.importers.claude_code import TranscriptImport
from pipeline.importers.claude_files import TRUNCATED, TurnStart, transcript_files
from pipeline.importers.common import Identity, ImportStream, stable_id
from pipeline.prepare import Quarantined

# The hook should finish in seconds: a lake busy for longer is left to the next call.
HOOK_LOCK_TIMEOUT_S = 20.0
SERVER_TIMEOUT_S = 20.0
# Two calls for one session (async hooks may overlap) take turns on its state file.
STATE_LOCK_TIMEOUT_S = 60.0
# The hook events after which the open turn is final: the session is over.
FINAL_EVENTS = ("SessionEnd",)


def capture_state_dir() -> Path:
    """Where live capture remembers how far each session was recorded."""
    return cache_dir() / "capture" / "claude-code"


@dataclass(frozen=True)
class HookInput:
    """What Claude Code's hooks pass on stdin (the fields capture needs)."""

    session_id: str
    transcript_path: Path
    event: str = "Stop"

    @property
    def final(self) -> bool:
        """Whether the session ended, so its open turn is final."""
        return self.event in FINAL_EVENTS

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
        event = data.get("hook_event_name")
        return cls(session, Path(transcript).expanduser(),
                   event if isinstance(event, str) and event else "Stop")


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
    conflicts: int = 0
    problems: list[str] = field(default_factory=list)
    resumed: bool = False
    held: bool = False
    seconds: float = 0.0
    embedded: int = 0
    partitions: set[tuple[str, str]] = field(default_factory=set)


def capture_transcript(settings: Settings | None, session_id: str, transcript: Path,
                       identity: Identity, *, server: ServerTarget | None = None,
                       final: bool = False, state_dir: Path | None = None,
                       embed: bool = True, index: bool = True,
                       post: Callable[[ServerTarget, list[TurnRecord]], dict[str, Any]]
                       | None = None) -> CaptureReport:
    """Record the turns of one session transcript that closed since the last capture of the
    session (with ``final``, the open turn too), into the lake of ``settings`` or to
    ``server``; ``embed``/``index`` say what a lake capture does besides storing."""
    started = time.perf_counter()
    if server is None and settings is None:
        raise TurnlakeError("live capture needs a lake or a server")
    if not transcript.is_file():
        raise RecordError(f"transcript {transcript} does not exist")
    target = server.url.rstrip("/") if server is not None else str(settings.lake)  # type: ignore[union-attr]
    path = (state_dir or capture_state_dir()) / f"{stable_id(f'{target}|{session_id}')}.json"
    with _locked(path):
        report = _capture(settings, transcript, identity, path, server=server, final=final,
                          embed=embed, index=index, post=post)
    report.seconds = time.perf_counter() - started
    return report


def _capture(settings: Settings | None, transcript: Path, identity: Identity, path: Path, *,
             server: ServerTarget | None, final: bool, embed: bool, index: bool,
             post: Callable[[ServerTarget, list[TurnRecord]], dict[str, Any]] | None
             ) -> CaptureReport:
    report = CaptureReport()
    state = _load_state(path)
    start, title, settled = _resume_point(state, transcript)
    report.resumed = start is not None
    stream = ImportStream(lambda _s: iter(()))
    reader = TranscriptImport(transcript, identity, stream, start=start, title=title,
                              hold_open=not final, settled=settled)
    records = list(reader.records())
    report.records, report.held = len(records), reader.held is not None
    report.problems = [f"{p.location}: {p.reason}" for p in stream.problems]
    if server is not None:
        if records:
            accepted, duplicates, refused = _outcomes((post or post_turns)(server, records))
            report.accepted, report.duplicates = accepted, duplicates
            report.problems.extend(refused)
    else:
        assert settings is not None
        _record(settings, records, stream, report, embed=embed, index=index)
    if reader.held is not None:
        _save_state(path, transcript, reader.held, reader.title, None)
    elif reader.last_start is not None:
        # Everything read is recorded: a resumed session's lines after the last turn must
        # not change it, so the next call reads from its start and passes it by.
        _save_state(path, transcript, reader.last_start, reader.title, reader.last_turn)
    return report


def _record(settings: Settings, records: list[TurnRecord], stream: ImportStream,
            report: CaptureReport, *, embed: bool, index: bool) -> None:
    """Store, embed and index the records in the lake; quarantine damaged lines."""
    from pipeline.ingest import Ingestor
    from pipeline.live import LiveWriter

    hook_settings = replace(settings, lock_timeout_s=min(settings.lock_timeout_s,
                                                         HOOK_LOCK_TIMEOUT_S))
    if records:
        writer = LiveWriter(hook_settings, embed=embed)
        job = writer.record(records) if index else writer.ingest(records)
        result = job.ingest
        report.accepted, report.duplicates = result.accepted, result.duplicates
        report.replaced, report.partitions = result.replaced, result.partitions
        report.conflicts = len(result.conflicts)
        report.embedded = job.embedding.embedded
        report.problems.extend(q.reason for q in result.conflicts)
        report.problems.extend(f"embedding: {e}" for e in job.embedding.errors)
    # A truncated last line is one Claude Code is still writing: the next call reads it again
    # (the turn it belongs to is re-read), so it is only logged; quarantined, it would stay
    # listed after that call captured it.
    damaged = [p for p in stream.problems if p.reason != TRUNCATED]
    if damaged:
        Ingestor(hook_settings).quarantine([Quarantined(p.source, _line_of(p.location),
                                                        f"{p.location}: {p.reason}", p.raw)
                                            for p in damaged])


@contextmanager
def _locked(state: Path) -> Iterator[None]:
    """Hold the session's state lock (a ``.lock`` file beside it) while capturing."""
    state.parent.mkdir(parents=True, exist_ok=True)
    with open(state.with_suffix(".lock"), "a+b") as fh:
        deadline = time.monotonic() + STATE_LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TurnlakeError(f"another capture of this session holds {state} "
                                        f"for over {STATE_LOCK_TIMEOUT_S:.0f} s") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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


def _load_state(path: Path) -> dict[str, Any] | None:
    try:
        state = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError:
        return None  # a damaged state file: read the transcript from the start again
    return state if isinstance(state, dict) else None


def _save_state(path: Path, transcript: Path, start: TurnStart, title: str | None,
                settled: str | None) -> None:
    """Write the state atomically (a crash leaves the old one or the new one)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(orjson.dumps({
        "transcript": str(transcript), "offset": start.offset, "line": start.line,
        "uuid": start.uuid, "open_offset": start.open_offset, "title": title,
        "settled": settled}))
    os.replace(temporary, path)


def _resume_point(state: dict[str, Any] | None, transcript: Path
                  ) -> tuple[TurnStart | None, str | None, str | None]:
    """Where to resume reading (the remembered turn start if the transcript still holds its
    opening event there, else nothing: read from the start), the title, and the turn
    recorded as final there."""
    if state is None or state.get("transcript") != str(transcript):
        return None, None, None
    offset, line, open_offset = state.get("offset"), state.get("line"), state.get("open_offset")
    uuid, title, settled = state.get("uuid"), state.get("title"), state.get("settled")
    if not all(isinstance(v, int) and v >= 0 for v in (offset, line, open_offset)):
        return None, None, None
    assert isinstance(offset, int) and isinstance(line, int) and isinstance(open_offset, int)
    with transcript.open("rb") as fh:
        fh.seek(open_offset)
        opening = fh.readline()
    try:
        event = orjson.loads(opening)
    except orjson.JSONDecodeError:
        return None, None, None
    if not isinstance(event, dict) or event.get("uuid") != uuid or uuid is None:
        return None, None, None
    return (TurnStart(offset, line, uuid, open_offset),
            title if isinstance(title, str) else None,
            settled if isinstance(settled, str) else None)


def _line_of(location: str) -> int:
    digits = "".join(c for c in location.split()[-1] if c.isdigit()) if location else ""
    return int(digits) if digits else 0


def watch(settings: Settings | None, folder: Path, identity: Identity, *,
          interval_s: float = 2.0, settle_s: float = 300.0, rounds: int | None = None,
          server: ServerTarget | None = None, state_dir: Path | None = None,
          on_capture: Callable[[Path, CaptureReport], None] | None = None,
          on_error: Callable[[Path, Exception], None] | None = None) -> int:
    """Capture every session transcript under ``folder`` whenever it changes (polling its size
    and modification time every ``interval_s``), ``rounds`` times or until interrupted;
    returns how many captures ran. A session left unchanged for ``settle_s`` has its open
    turn recorded as final (no hook tells a watcher that a session ended). A failing
    transcript is reported and retried next round."""
    seen: dict[Path, tuple[int, int]] = {}
    changed_at: dict[Path, float] = {}
    holding: set[Path] = set()
    captures = 0
    done = 0
    while rounds is None or done < rounds:
        for path in transcript_files([folder]):
            try:
                stat = path.stat()
            except OSError:
                continue
            mark, now = (stat.st_size, stat.st_mtime_ns), time.monotonic()
            if seen.get(path) == mark:
                if path not in holding or now - changed_at[path] < settle_s:
                    continue
                final = True
            else:
                final = False
            try:
                report = capture_transcript(settings, path.stem, path, identity, server=server,
                                            final=final, state_dir=state_dir)
            except (TurnlakeError, OSError) as exc:
                if on_error is not None:
                    on_error(path, exc)
                continue
            if seen.get(path) != mark:
                seen[path], changed_at[path] = mark, now
            (holding.add if report.held else holding.discard)(path)
            captures += 1
            if on_capture is not None:
                on_capture(path, report)
        done += 1
        if rounds is None or done < rounds:
            time.sleep(interval_s)
    return captures
