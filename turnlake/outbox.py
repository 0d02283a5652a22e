"""The recorder's outbox: turns a server could not take yet, kept on disk and sent later.

A host records through :class:`turnlake.Recorder` ``(url=..., key=...)``; when the server
cannot be reached (refused connections, timeouts, 503, 429 after the retries), the completed
turn is written here — one file per turn, atomically (temp file, fsync, rename) — and each
later recording, or :meth:`Recorder.flush`, sends the waiting turns first. Sending again is
safe: a turn the server already holds comes back ``duplicate``. A turn the server refuses is
moved to ``rejected/`` beside a file with the reason, never dropped.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import httpx

from lake.errors import RecordError
from lake.records import TurnRecord, parse_record
from turnlake._http import Retry, first_rejection
from turnlake.client import Client
from turnlake.errors import RateLimited, ServerUnreachable, ServiceUnavailable

log = logging.getLogger(__name__)
# The server is down or busy: keep the turn and try later. Other errors are the caller's.
_LATER = (ServerUnreachable, ServiceUnavailable, RateLimited)
_SUFFIX = ".turn.json"


def default_outbox() -> Path:
    """``$TURNLAKE_OUTBOX``, else ``~/.turnlake/outbox``."""
    return Path(os.environ.get("TURNLAKE_OUTBOX") or Path.home() / ".turnlake" / "outbox")


@dataclass(frozen=True)
class Flushed:
    """What one flush of the outbox did."""

    sent: int
    rejected: int
    waiting: int


class Outbox:
    """A folder of turns waiting for the server."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def put(self, record: TurnRecord) -> Path:
        """Keep a turn (the same turn twice is one file)."""
        name = f"{record.tenant}.{record.conversation_id}.{record.turn_id}{_SUFFIX}"
        final = self.folder / name
        tmp = self.folder / f".{name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(record.to_json_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        return final

    def waiting(self) -> list[Path]:
        """The waiting turns, oldest first."""
        files = [p for p in self.folder.glob(f"*{_SUFFIX}") if p.is_file()]
        return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name))

    def reject(self, path: Path, reason: str) -> None:
        """Set a refused turn aside with its reason."""
        aside = self.folder / "rejected"
        aside.mkdir(exist_ok=True)
        (aside / f"{path.name}.reason.txt").write_text(reason + "\n", encoding="utf-8")
        os.replace(path, aside / path.name)


class ServerSink:
    """Where a server-mode recorder writes: the server, or the outbox while it is away."""

    def __init__(self, url: str, key: str | None, outbox: Path | None = None,
                 retry: Retry | None = None) -> None:
        self.outbox = Outbox(outbox or default_outbox())
        self.client = Client(url, key=key, retry=retry or Retry(attempts=3),
                             timeout=httpx.Timeout(60.0, connect=5.0))

    def write(self, record: TurnRecord) -> bool:
        """Send a completed turn (after the waiting ones); True when the server has it,
        False when it waits in the outbox. TurnRejected when the server refuses it."""
        if self.flush().waiting:
            self.outbox.put(record)  # the server is still away; keep the order
            return False
        try:
            answer = self.client.record(record)
        except _LATER as exc:
            path = self.outbox.put(record)
            log.warning("turnlake server unavailable (%s); turn kept in %s", exc, path)
            return False
        rejection = first_rejection(answer.turns)
        if rejection is not None:
            raise rejection
        return True

    def flush(self) -> Flushed:
        """Send the waiting turns, oldest first, until the server is away again."""
        sent = rejected = 0
        waiting = self.outbox.waiting()
        for n, path in enumerate(waiting):
            try:
                record = parse_record(path.read_bytes())
            except (RecordError, OSError) as exc:  # a damaged file must not block the rest
                self.outbox.reject(path, f"unreadable: {exc}")
                rejected += 1
                continue
            try:
                answer = self.client.record(record)
            except _LATER:
                return Flushed(sent, rejected, len(waiting) - n)
            rejection = first_rejection(answer.turns)
            if rejection is not None:
                self.outbox.reject(path, str(rejection))
                rejected += 1
            else:
                path.unlink(missing_ok=True)
                sent += 1
        return Flushed(sent, rejected, 0)

    def close(self) -> None:
        """Close the connection."""
        self.client.close()
