"""Recording what an importer reads into the lake (or a ``turnlake serve``), one session file at
a time, and ``--watch``: polling a folder and recording each session file that changed.

A changed file is imported whole and ingested with ``replace``: its turns already stored come
back as duplicates, a turn that grew supersedes the stored one, and new turns are added, so a
capture is idempotent. The writer lock is waited for briefly (a busy lake is retried on the
next round). A truncated last line is a line the agent is still writing: it is only logged,
since the next round reads it whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from lake.errors import TurnlakeError
from lake.records import TurnRecord
from lake.settings import Settings
from pipeline.importers.agent_files import TRUNCATED
from pipeline.importers.common import ImportStream
from pipeline.importers.live import CaptureReport, ServerTarget, post_turns
from pipeline.prepare import Quarantined

if TYPE_CHECKING:
    from pipeline.retention import Settle

CAPTURE_LOCK_TIMEOUT_S = 20.0
StreamOf = Callable[[Sequence[Path]], ImportStream]


def record_stream(settings: Settings | None, stream: ImportStream, *,
                  server: ServerTarget | None = None,
                  settle: Settle | None = None) -> CaptureReport:
    """Consume ``stream`` and store its turns in the lake of ``settings`` (or post them to
    ``server``, when no lake is needed); what happened. A turn that changed supersedes the
    stored one, whose erasure runs ``settle`` first (:func:`pipeline.retention.erase`)."""
    started = time.perf_counter()
    report = CaptureReport()
    records: list[TurnRecord] = list(stream)
    report.records = len(records)
    report.problems = [f"{p.location}: {p.reason}" for p in stream.problems]
    if server is not None:
        if records:
            from pydantic import ValidationError

            from pipeline.contract import RecordAnswer

            try:
                answer = RecordAnswer.model_validate(post_turns(server, records))
            except ValidationError as exc:
                raise TurnlakeError(f"turnlake serve answered an unexpected body: {exc}") \
                    from None
            report.accepted, report.duplicates = answer.accepted, answer.duplicates
            report.problems += [f"turn {t.turn_id or t.index}: rejected by the server: "
                                f"{t.reason}" for t in answer.turns if t.status == "rejected"]
    else:
        from pipeline.ingest import Ingestor
        from pipeline.supersede import supersede

        if settings is None:
            raise TurnlakeError("recording needs a lake or a server")
        capture_settings = replace(settings, lock_timeout_s=min(
            settings.lock_timeout_s, CAPTURE_LOCK_TIMEOUT_S))
        ingestor = Ingestor(capture_settings)
        if records:
            result = supersede(capture_settings, ingestor,
                               ingestor.ingest_records(records, hold_conflicts=True),
                               settle=settle)
            report.accepted, report.duplicates = result.accepted, result.duplicates
            report.replaced, report.partitions = result.replaced, result.partitions
        damaged = [p for p in stream.problems if p.reason != TRUNCATED]
        if damaged:
            ingestor.quarantine([Quarantined(p.source, 0, f"{p.location}: {p.reason}", p.raw)
                                 for p in damaged])
    report.seconds = time.perf_counter() - started
    return report


def watch_sessions(settings: Settings, folder: Path, find: Callable[[Path], list[Path]],
                   stream_of: StreamOf, *, interval_s: float = 2.0, rounds: int | None = None,
                   server: ServerTarget | None = None, settle: Settle | None = None,
                   on_capture: Callable[[Path, CaptureReport], None] | None = None,
                   on_error: Callable[[Path, Exception], None] | None = None) -> int:
    """Record every session file ``find`` lists under ``folder`` whenever it changes (size or
    modification time, looked at every ``interval_s``), ``rounds`` times or until interrupted;
    returns how many captures ran. A failing file is reported and retried next round.
    ``settle``: as :func:`record_stream`'s."""
    seen: dict[Path, tuple[int, int]] = {}
    captures = 0
    done = 0
    while rounds is None or done < rounds:
        for path in find(folder):
            try:
                stat = path.stat()
            except OSError:
                continue
            mark = (stat.st_size, stat.st_mtime_ns)
            if seen.get(path) == mark:
                continue
            try:
                report = record_stream(settings, stream_of([path]), server=server,
                                       settle=settle)
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
