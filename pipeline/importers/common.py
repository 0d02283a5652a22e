"""Pieces shared by the importers: stable ids, the import stream and its log, the turn draft.

An importer reads a third-party export and yields ``turnlake.turn.v1`` records written as
``writer="minimal"``. Ids are derived only from ids found in the export, so importing the same
export twice yields the same (tenant, conversation_id, turn_id) keys and ingest skips them.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from lake.errors import RecordError
from lake.records import (
    ID_PATTERN,
    Attachment,
    Completion,
    CompletionStatus,
    ContextEvent,
    HostedFile,
    LiveEvent,
    Step,
    StepStatus,
    Submission,
    TurnRecord,
    Usage,
    describe_validation_error,
)
from pipeline.importers.text import DETAIL_CHARS, clip, snippet

_ID_RE = re.compile(ID_PATTERN)
_NOT_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
# Long enough to keep re-import collisions out of reach, short enough to read in a listing.
_DIGEST_CHARS = 20
_READABLE_CHARS = 40


def stable_id(external: str) -> str:
    """A lake id for an external id: the id itself when it already fits ``ID_PATTERN``,
    otherwise a sanitized readable prefix plus a sha1 digest of the whole external id.

    The result depends only on ``external``, so re-imports give identical ids.
    """
    if _ID_RE.fullmatch(external):
        return external
    digest = hashlib.sha1(external.encode("utf-8", "surrogatepass"),
                          usedforsecurity=False).hexdigest()[:_DIGEST_CHARS]
    readable = _NOT_ID_CHARS.sub("_", external).strip("_")[:_READABLE_CHARS]
    return f"{readable}-{digest}" if readable else f"h-{digest}"


def require_id(name: str, value: str) -> str:
    """``value`` unchanged if it is a valid lake id; raise RecordError naming ``name`` if not."""
    if not _ID_RE.fullmatch(value):
        raise RecordError(f"{name} {value!r} is not a valid id (expected {ID_PATTERN})",
                          field=name)
    return value


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive time is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@dataclass(frozen=True)
class Identity:
    """Who the imported turns belong to; every part must be a valid lake id."""

    tenant: str
    user_id: str
    app: str
    agent: str

    def __post_init__(self) -> None:
        for name in ("tenant", "user_id", "app", "agent"):
            require_id(name, getattr(self, name))


@dataclass(frozen=True)
class ImportProblem:
    """An input item that could not be imported: where it was, why, and its raw start."""

    source: str
    location: str
    reason: str
    raw: str = ""


@dataclass
class ImportResult:
    """A fully consumed import: the records plus what was skipped (reason -> count) and why."""

    records: list[TurnRecord]
    skipped: Counter[str]
    problems: list[ImportProblem]
    counted: Counter[str] = field(default_factory=Counter)


class ImportStream:
    """An iterable of TurnRecord that fills ``skipped``, ``counted`` and ``problems`` while it
    is consumed.

    ``skipped`` counts input left out on purpose, ``counted`` input kept in another form than
    the obvious one (a harness message recorded as a context event, an answerless turn).
    Each iteration starts the import afresh (re-reading the input) and resets the tallies, so
    after a complete pass they describe exactly that pass.
    """

    def __init__(self, produce: Callable[[ImportStream], Iterator[TurnRecord]]) -> None:
        self._produce = produce
        self.skipped: Counter[str] = Counter()
        self.counted: Counter[str] = Counter()
        self.problems: list[ImportProblem] = []

    def __iter__(self) -> Iterator[TurnRecord]:
        self.skipped = Counter()
        self.counted = Counter()
        self.problems = []
        return self._produce(self)

    def count(self, what: str, n: int = 1) -> None:
        """Count an input item kept in another form (an importer calls this)."""
        self.counted[what] += n

    def skip(self, reason: str, count: int = 1) -> None:
        """Count an input item left out on purpose (an importer calls this)."""
        self.skipped[reason] += count

    def problem(self, source: str, location: str, reason: str, raw: str | bytes = "") -> None:
        """Record an input item that was malformed (an importer calls this)."""
        self.problems.append(ImportProblem(source, location, reason, snippet(raw)))

    def collect(self) -> ImportResult:
        """Consume the whole stream into an ImportResult."""
        records = list(self)
        return ImportResult(records, Counter(self.skipped), list(self.problems),
                            Counter(self.counted))


@dataclass
class TurnDraft:
    """A turn being assembled from export messages; ``finish`` turns it into a record."""

    turn_id: str
    # What the user brought: messages, context the host added, attached files.
    submissions: list[Submission] = field(default_factory=list)
    context_events: list[ContextEvent] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    # What the assistant did: tool steps, panel events, files it made, its answer.
    steps: list[Step] = field(default_factory=list)
    events: list[LiveEvent] = field(default_factory=list)
    hosted_files: list[HostedFile] = field(default_factory=list)
    completion: Completion | None = None
    usage: Usage | None = None
    # How a turn ended when the assistant did not get to answer it ("interrupted" or "failed");
    # set on an answered turn, it marks an answer that was cut short.
    unfinished: CompletionStatus | None = None
    # The last instant anything happened in the turn: an answerless turn ends there.
    last_at: datetime | None = None

    def touch(self, at: datetime) -> None:
        """Note that something happened in the turn at ``at``."""
        self.last_at = at if self.last_at is None else max(self.last_at, at)

    def add_user_text(self, text: str, at: datetime) -> None:
        """Fold a user message in: the first is the prompt, later ones follow-ups."""
        first = not self.submissions
        self.touch(at)
        self.submissions.append(Submission(
            text=text, event_type="prompt" if first else "followup",
            batch=len(self.submissions), arrived_at=at))

    def add_step(self, name: str, status: StepStatus, at: datetime, detail: str | None,
                 **data: Any) -> None:
        """Record a tool step, its detail clipped to ``DETAIL_CHARS``; the lake replays every
        step as a ``chat.step`` event, so no separate live event is added (it would show
        twice)."""
        del data  # tool ids stay out of the record: the step's name and detail identify it
        self.touch(at)
        self.steps.append(Step(name=name, status=status, at=at,
                               detail=clip(detail, DETAIL_CHARS) if detail else None))

    def add_answer(self, text: str, at: datetime) -> bool:
        """Add a piece of the answer, at ``at``; True when it joined earlier pieces. Agents
        write one answer in pieces (around tool calls, at "Continue generating"), and the
        completion is what search reads: it holds every piece, in order, a blank line apart."""
        self.touch(at)
        previous = self.completion
        joined = text if previous is None else f"{previous.text}\n\n{text}"
        self.completion = Completion(text=joined, at=at)
        return previous is not None

    def finish(self, stream: ImportStream, identity: Identity, conversation_id: str,
               title: str | None, source: str, location: str) -> TurnRecord | None:
        """The record, or None after counting a turn without user message or reporting a bad
        one. A turn the assistant did not answer is kept, with an empty completion whose
        status says why (``unfinished``, else "interrupted"), so the user's words stay."""
        if not self.submissions:
            stream.skip("no user message")
            return None
        started = self.submissions[0].arrived_at
        completion = self.completion
        if completion is None:
            stream.count(f"turn without answer ({self.unfinished or 'interrupted'})")
            completion = Completion(text="", at=self.last_at or started,
                                    status=self.unfinished or "interrupted")
        elif self.unfinished is not None:
            completion = Completion(text=completion.text, at=completion.at,
                                    status=self.unfinished)
        # Exports sometimes carry clock skew between user and assistant messages; the record
        # requires ended_at >= started_at, so the answer is never placed before the prompt.
        if completion.at < started:
            completion = Completion(text=completion.text, at=started, status=completion.status)
        try:
            return TurnRecord(
                schema="turnlake.turn.v1", tenant=identity.tenant, app=identity.app,
                agent=identity.agent, user_id=identity.user_id,
                conversation_id=conversation_id, turn_id=self.turn_id, writer="minimal",
                started_at=started, ended_at=completion.at, conversation_title=title,
                submissions=self.submissions, context_events=self.context_events,
                attachments=self.attachments, steps=self.steps, completion=completion,
                events=self.events, hosted_files=self.hosted_files, usage=self.usage)
        except ValidationError as exc:
            stream.problem(source, location, f"turn {self.turn_id} is not a valid record: "
                           f"{describe_validation_error(exc)}")
            return None
