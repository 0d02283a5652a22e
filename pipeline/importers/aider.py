"""Import Aider chat histories (``.aider.chat.history.md`` in a project folder).

Aider appends Markdown: ``# aider chat started at YYYY-MM-DD HH:MM:SS`` opens a session (one
conversation), ``#### `` lines are what the user typed, ``> `` lines are Aider's own output
(the start-up banner, command output, "Applied edit to ...", "Commit ...", token counts) and
everything else is the model's answer. A user message opens a turn, the answer after it is the
completion, and the output lines after the answer are its steps (edits, commits, shell runs;
``Tokens: N sent, M received`` is the usage). A ``/command`` that gets no answer (``/add``,
``/drop``, ``/run``...) is a context event of the next turn, with its output; one that is
answered (``/ask ...``, ``/code ...``) is a turn of its own. ``^C KeyboardInterrupt`` marks the
turn interrupted. Aider writes no time per message: every turn of a session is placed at the
session's start (a microsecond apart, in order), read as UTC. Ids come from the session's start
time and the project folder's name, and a turn's position in its session, so importing a grown
history again adds only the new turns (the last one supersedes when its answer grew).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lake.records import ContextEvent, TurnRecord, Usage
from pipeline.importers.agent_files import find_files, text_of
from pipeline.importers.common import Identity, ImportStream, TurnDraft, stable_id
from pipeline.importers.text import one_line

AGENT = "aider"
HISTORY_FILE = ".aider.chat.history.md"
_STARTED = re.compile(r"^# aider chat started at (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\s*$")
_INTERRUPT = ("^C KeyboardInterrupt", "^C again to exit")
_EDIT = re.compile(r"^Applied edit to (.+)$")
_COMMIT = re.compile(r"^Commit ([0-9a-f]{6,40}) (.+)$")
_TOKENS = re.compile(r"^Tokens: ([\d.]+)(k?) sent(?:, [\d.]+k? cache \w+)*, ([\d.]+)(k?) received")
_RUN = re.compile(r"^(?:Running|Run shell command\??) (.+)$")
# The lines of an edit block, which an answer may hold outside a fence.
_EDIT_MARKERS = (">>>>>>> ", "<<<<<<< ", "=======")
_FAILED = ("Did not apply", "Failed to apply", "The LLM did not conform", "Unable to",
           "Error", "Malformed")


def is_history(path: Path) -> bool:
    """Whether a file found in a folder is an Aider chat history."""
    return path.name == HISTORY_FILE


def iter_aider(paths: Sequence[Path], *, tenant: str, user_id: str, app: str = AGENT,
               agent: str = AGENT) -> ImportStream:
    """Turn records from Aider chat histories, or folders searched for them. Raises RecordError
    at once when a path does not exist or an identity part is not a valid id."""
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    files = find_files(paths, is_history, "Aider chat history")

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        for path in files:
            yield from _HistoryImport(path, identity, stream).records()

    return ImportStream(produce)


@dataclass
class _Block:
    """A run of lines of one kind: ``user`` (#### lines), ``output`` (> lines) or ``answer``."""

    kind: str
    line: int
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip()


@dataclass
class _Session:
    started: datetime
    line: int
    key: str
    blocks: list[_Block] = field(default_factory=list)


class _HistoryImport:
    def __init__(self, path: Path, identity: Identity, stream: ImportStream) -> None:
        self._path = path
        self._source = str(path)
        self._identity = identity
        self._stream = stream
        self._project = path.resolve().parent.name or "project"

    def records(self) -> Iterator[TurnRecord]:
        for session in self._sessions():
            yield from self._turns(session)

    def _sessions(self) -> list[_Session]:
        sessions: list[_Session] = []
        closed = False
        fenced = False  # inside a fenced code block of an answer: lines are the answer's
        try:
            text = self._path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            text = self._path.read_text(encoding="utf-8", errors="replace")
            self._stream.problem(self._source, "file", "history has bytes that are not valid "
                                 "UTF-8; they were read as U+FFFD")
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.rstrip()
            started = _STARTED.match(line)
            if started:
                at = datetime.strptime(started.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
                sessions.append(_Session(at, number, f"aider-{started.group(1)}-{self._project}"))
                continue
            if not sessions:
                if line.strip():
                    self._stream.problem(self._source, f"line {number}", "text before the first "
                                         "'# aider chat started at' line", line)
                continue
            if line.startswith("```"):
                fenced = not fenced
            if fenced or line.startswith("```") or line.startswith(_EDIT_MARKERS):
                kind, body = "answer", raw
            elif line.startswith("#### ") or line == "####":
                kind, body = "user", line[5:]
            elif line.startswith(">"):
                kind, body = "output", line[1:].strip()
            else:
                kind, body = "answer", raw
            blocks = sessions[-1].blocks
            last = blocks[-1] if blocks else None
            if not line.strip():
                if last is not None and last.kind == "answer":
                    last.lines.append("")
                else:
                    closed = True  # a blank line ends a run of #### or > lines
                continue
            if last is None or last.kind != kind or (kind != "answer" and closed):
                blocks.append(_Block(kind, number))
            closed = False
            blocks[-1].lines.append(body)
        return sessions

    def _turns(self, session: _Session) -> Iterator[TurnRecord]:
        drafts: list[TurnDraft] = []
        waiting: list[ContextEvent] = []
        pending_command: tuple[str, list[str]] | None = None
        tick = 0

        def now() -> datetime:
            return session.started + timedelta(microseconds=tick)

        def open_turn(text: str) -> TurnDraft:
            nonlocal waiting
            draft = TurnDraft(stable_id(f"{session.key}:{len(drafts) + 1}"))
            draft.context_events.extend(waiting)
            for event in waiting:
                self._stream.count(f"context event: {event.kind}")
            waiting = []
            draft.add_user_text(text, now())
            drafts.append(draft)
            return draft

        for block in session.blocks:
            tick += 1
            text = block.text
            if not text:
                continue
            current = drafts[-1] if drafts else None
            if block.kind == "user":
                if pending_command is not None:
                    waiting.append(self._command_event(*pending_command, now()))
                    pending_command = None
                if text.startswith("/"):
                    pending_command = (text, [])
                    continue
                open_turn(text)
            elif block.kind == "answer":
                if pending_command is not None:
                    current = open_turn(pending_command[0])
                    pending_command = None
                    self._stream.count("command answered as a turn")
                if current is None:
                    self._stream.skip("answer before any prompt")
                    continue
                interrupted = any(text.rstrip().endswith(m) for m in _INTERRUPT)
                if interrupted:
                    text = text.rstrip()
                    for marker in _INTERRUPT:
                        text = text.removesuffix(marker).rstrip()
                    current.unfinished = "interrupted"
                if text:
                    current.add_answer(text, now())
            else:
                if pending_command is not None:
                    pending_command[1].extend(block.lines)
                    continue
                if current is None:
                    waiting.append(ContextEvent(kind="session", at=now(),
                                                data={"text": text_of(text)}))
                    continue
                self._output(current, block, now())
        if pending_command is not None:
            waiting.append(self._command_event(*pending_command, now()))
        if waiting:
            self._stream.skip("context event before a turn not yet written", len(waiting))
        title = drafts[0].submissions[0].text if drafts else None
        conversation = stable_id(session.key)
        for draft in drafts:
            record = draft.finish(self._stream, self._identity, conversation,
                                  one_line(title) if title else None, self._source,
                                  f"session at line {session.line} turn={draft.turn_id}")
            if record is not None:
                yield record

    def _command_event(self, typed: str, output: list[str], at: datetime) -> ContextEvent:
        self._stream.count("command without answer kept as context")
        data = {"command": typed}
        text = "\n".join(line for line in output if line.strip())
        if text:
            data["output"] = text_of(text)
        return ContextEvent(kind="command", at=at, data=data)

    def _output(self, draft: TurnDraft, block: _Block, at: datetime) -> None:
        """Aider's output lines after (or instead of) an answer: edits, commits, shell runs and
        token counts; other lines are one output step."""
        other: list[str] = []
        for line in block.lines:
            line = line.strip()
            if not line:
                continue
            if line.startswith(_INTERRUPT):
                draft.unfinished = "interrupted"
                draft.touch(at)
                self._stream.count("interrupted turn")
            elif edit := _EDIT.match(line):
                draft.add_step("edit", "completed", at, edit.group(1))
            elif commit := _COMMIT.match(line):
                draft.add_step("commit", "completed", at, f"{commit.group(1)} {commit.group(2)}")
            elif tokens := _TOKENS.match(line):
                sent = _number(tokens.group(1), tokens.group(2))
                received = _number(tokens.group(3), tokens.group(4))
                before = draft.usage or Usage(tokens_in=0, tokens_out=0)
                draft.usage = Usage(tokens_in=before.tokens_in + sent,
                                    tokens_out=before.tokens_out + received)
            elif run := _RUN.match(line):
                draft.add_step("shell", "started", at, run.group(1))
            else:
                other.append(line)
        if other:
            text = "\n".join(other)
            draft.add_step("aider", "failed" if text.startswith(_FAILED) else "completed",
                           at, text)


def _number(digits: str, thousands: str) -> int:
    return round(float(digits) * (1000 if thousands else 1))
