"""Live capture of Codex sessions through Codex's ``notify`` program.

Codex runs the program named by ``notify = [...]`` in ``~/.codex/config.toml`` after each turn,
with one JSON argument appended: ``{"type": "agent-turn-complete", "thread-id", "turn-id",
"cwd", "input-messages", "last-assistant-message"}``. The payload does not name the rollout,
so it is found by its thread id under ``$CODEX_HOME/sessions`` (``~/.codex`` by default; the
path is remembered for the next call). Each call re-reads the rollout from where the last turn
it stored began, so a call reads one or two turns however long the session: the last turn
comes back identical (a duplicate) or grown (it supersedes), later turns are new. A rollout
shorter than the remembered offset is read again from the start. That offset, the session's
id, title and token total are kept in the user's cache folder
(``$XDG_CACHE_HOME/turnlake/capture/codex``, else ``~/.cache/turnlake/capture/codex``), one
file per thread and target, as Claude Code's capture keeps its own: never in the lake, so a
``--server`` capture needs no lake at all.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from lake.errors import RecordError, TurnlakeError
from lake.settings import Settings
from pipeline.cache import cache_dir
from pipeline.importers.agent_files import TurnStart
from pipeline.importers.agent_watch import record_stream
from pipeline.importers.codex import RolloutImport
from pipeline.importers.codex_turns import Resume
from pipeline.importers.common import Identity, ImportStream, stable_id
from pipeline.importers.live import CaptureReport, ServerTarget

if TYPE_CHECKING:
    from pipeline.retention import Settle

CODEX_HOME_ENV = "CODEX_HOME"
TURN_COMPLETE = "agent-turn-complete"


@dataclass(frozen=True)
class Notification:
    """What Codex's notify payload says (the fields capture needs)."""

    kind: str
    thread_id: str

    @classmethod
    def parse(cls, raw: str) -> Notification:
        """Parse the payload; RecordError naming what is missing when it is unusable."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"notify payload is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise RecordError("notify payload is not a JSON object")
        kind = data.get("type")
        thread = data.get("thread-id")
        if not isinstance(kind, str):
            raise RecordError("notify payload has no type", field="type")
        if kind == TURN_COMPLETE and (not isinstance(thread, str) or not thread):
            raise RecordError("notify payload has no thread-id", field="thread-id")
        return cls(kind, thread if isinstance(thread, str) else "")


def capture_state_dir() -> Path:
    """Where Codex capture remembers how far each thread was recorded."""
    return cache_dir() / "capture" / "codex"


def codex_home() -> Path:
    """Where Codex keeps its sessions: ``$CODEX_HOME``, else ``~/.codex``."""
    return Path(os.environ.get(CODEX_HOME_ENV) or Path.home() / ".codex").expanduser()


def find_rollout(thread_id: str, home: Path, known: str | None = None) -> Path:
    """The rollout file of a thread; RecordError when Codex has none for it."""
    if known and Path(known).is_file() and Path(known).name.endswith(f"{thread_id}.jsonl"):
        return Path(known)
    sessions = home / "sessions"
    found = sorted(sessions.rglob(f"rollout-*{thread_id}.jsonl")) if sessions.is_dir() else []
    if not found:
        raise RecordError(f"no Codex rollout of thread {thread_id} under {sessions}")
    return found[-1]


def capture_thread(settings: Settings | None, thread_id: str, identity: Identity, *,
                   home: Path | None = None, server: ServerTarget | None = None,
                   state_dir: Path | None = None,
                   settle: Settle | None = None) -> CaptureReport:
    """Record what is new in a thread's rollout since the last capture of the thread, into
    the lake of ``settings`` or to ``server``; ``settle`` as
    :func:`pipeline.importers.agent_watch.record_stream`'s."""
    started = time.perf_counter()
    if server is None and settings is None:
        raise TurnlakeError("live capture needs a lake or a server")
    target = server.url.rstrip("/") if server is not None else str(settings.lake)  # type: ignore[union-attr]
    path = (state_dir or capture_state_dir()) / f"{stable_id(f'{target}|{thread_id}')}.json"
    state = _load_state(path)
    rollout = find_rollout(thread_id, home or codex_home(),
                           state.get("path") if state else None)
    resume = _resume(state, rollout)
    stream = ImportStream(lambda _s: iter(()))
    reader = RolloutImport(rollout, identity, stream, resume=resume)
    records = list(reader.records())
    report = record_stream(settings, _Consumed(records, stream), server=server, settle=settle)
    report.resumed = resume is not None
    if reader.last_start is not None and reader.session_id is not None:
        start = reader.last_start
        _save_state(path, {
            "path": str(rollout), "offset": start.offset, "line": start.line,
            "size": rollout.stat().st_size, "session_id": reader.session_id,
            "title": reader.title, "tokens_before": reader.last_tokens})
    report.seconds = time.perf_counter() - started
    return report


class _Consumed(ImportStream):
    """A stream already read: its records and the problems found reading them."""

    def __init__(self, records: list[Any], read: ImportStream) -> None:
        super().__init__(lambda _s: iter(records))
        self._read = read

    def __iter__(self) -> Any:
        records = super().__iter__()
        self.problems = list(self._read.problems)
        self.skipped, self.counted = self._read.skipped, self._read.counted
        return records


def _load_state(path: Path) -> dict[str, Any] | None:
    try:
        state = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return state if isinstance(state, dict) else None


def _save_state(path: Path, state: dict[str, Any]) -> None:
    """Write the thread's state atomically (two notify calls may overlap)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(orjson.dumps(state))
    os.replace(temporary, path)


def _resume(state: dict[str, Any] | None, rollout: Path) -> Resume | None:
    """Where to resume: the last turn's start, if the rollout is the one remembered and has not
    shrunk since (a rewritten file is read from the start)."""
    if state is None or state.get("path") != str(rollout):
        return None
    offset, line, size = state.get("offset"), state.get("line"), state.get("size")
    session = state.get("session_id")
    if not (isinstance(offset, int) and isinstance(line, int) and isinstance(size, int)
            and isinstance(session, str)):
        return None
    if rollout.stat().st_size < size or offset > size:
        return None
    title = state.get("title")
    return Resume(TurnStart(offset, line), session, title if isinstance(title, str) else None,
                  state.get("tokens_before"))
