"""Import Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Each line is one event. One ``sessionId`` is one conversation. A user message with the user's
own text opens a turn; user texts that arrive before any assistant event of that turn fold in
as follow-ups. What Claude Code writes under the user role itself (task notifications, command
plumbing, caveats, hook output) becomes context events, never submissions (see
:mod:`pipeline.importers.claude_events`). ``tool_use`` blocks become started steps and
``tool_result`` blocks completed or failed steps; each subagent run (``isSidechain`` events,
in the session file, in ``<session>/subagents/agent-*.jsonl`` or in an older ``agent-*.jsonl``
beside it) becomes one step with its final answer. The turn's assistant texts, joined in order,
are its completion; a turn the user interrupted keeps its prompts and steps with completion
status ``interrupted``. A prompt slash command (its command tags, then an answer) is a turn of
its own whose prompt is the command and its arguments; a prompt the user queued while Claude
worked (a ``queued_command`` attachment) is a follow-up of the running turn. Events are taken in
file order, which is the order Claude Code appended them; an answer that follows an unreadable
line and does not continue a readable event is never put on an earlier turn.

A file is read completely before its turns are yielded because a summary, a subagent run or a
file-history snapshot can name a turn that comes later in it; memory is bounded by the largest
transcript file. The title is a ``summary`` written before the first turn, else the first
prompt: live capture, which stores turns before a later summary exists, gets the same one.
Reading may start at a byte offset (live capture re-reads only the last turn onwards).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from lake.records import ContextEvent, StepStatus, TurnRecord, Usage
from pipeline.importers.claude_events import (
    INTERRUPT_MARKER,
    SUBAGENT_TOOLS,
    SubagentRun,
    classify_text,
    content_blocks,
    event_time,
    event_uuid,
    image_attachment,
    input_summary,
    result_agent_id,
    result_text,
    strip_ansi,
    text_blocks,
    token_count,
)
from pipeline.importers.claude_files import (
    TurnStart,
    read_events,
    subagent_files,
    transcript_files,
)
from pipeline.importers.common import Identity, ImportStream, TurnDraft, stable_id
from pipeline.importers.text import compact_json, one_line

_THINKING_BLOCKS = ("thinking", "redacted_thinking")
# Event kinds that carry nothing of the conversation (queue bookkeeping, UI progress).
_BOOKKEEPING = ("queue-operation", "progress", "last-prompt", "custom-title", "tag")
# Context events that belong to the turn after them: a slash command and its output, the
# caveat Claude Code writes before local commands, the compaction boundary.
_PRECEDING = ("command", "command_output", "caveat", "compact_boundary")
# A queued prompt's mode when the user typed it (other modes are harness notifications).
_QUEUED_PROMPT = "prompt"


def iter_claude_code(paths: Sequence[Path], *, tenant: str, user_id: str,
                     app: str = "claude-code", agent: str = "claude-code") -> ImportStream:
    """Turn records from Claude Code transcripts: ``.jsonl`` files, or folders searched for them.

    Raises RecordError at once when a path does not exist or an identity part is not a valid id;
    problems inside the files are reported on the returned stream while it is consumed.
    """
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    files = transcript_files(paths)

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        for path in files:
            yield from TranscriptImport(path, identity, stream).records()

    return ImportStream(produce)


@dataclass
class _Turn:
    draft: TurnDraft
    line: int
    start: TurnStart
    opened_by: str | None
    # Any assistant event (text or tool use) ends the window in which user texts fold in.
    replied: bool = False
    # Claude Code writes one event per content block, each repeating its API message's usage,
    # so usage is kept per message id and summed once per message.
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass
class _Session:
    conversation_id: str
    turns: list[_Turn] = field(default_factory=list)
    uuids: set[str] = field(default_factory=set)
    tool_names: dict[str, str] = field(default_factory=dict)
    # Context events seen before the turn they belong to (compaction summaries, system
    # events between turns) wait for the next turn.
    waiting: list[ContextEvent] = field(default_factory=list)
    # Which turn launched each subagent, by agent id (from the Task/Agent tool result).
    agent_turns: dict[str, _Turn] = field(default_factory=dict)
    # The subagent runs of the session, by agent id.
    runs: dict[str, SubagentRun] = field(default_factory=dict)
    # The last slash command not yet followed by a prompt: the event that holds it, where its
    # turn would begin, and the text the user typed (``/name args``). An answer that comes
    # while it waits answers the command, which then opens its own turn.
    command: tuple[dict[str, Any], TurnStart, datetime, str] | None = None


class TranscriptImport:
    """The import of one transcript file (with its subagent transcripts), optionally from a
    byte offset on, with a title decided earlier."""

    def __init__(self, path: Path, identity: Identity, stream: ImportStream, *,
                 start: TurnStart | None = None, title: str | None = None,
                 hold_open: bool = False, settled: str | None = None) -> None:
        self._path = path
        self._start = start or TurnStart(0, 1, None)
        self._fixed_title = title
        # Live capture: the turn opened last may still grow (Claude Code appends its own lines
        # after the hooks ran), so it is held back until the next prompt closes it; a turn
        # already recorded as final (``settled``: its id) is not given again.
        self._hold_open = hold_open
        self._settled = settled
        self.held: TurnStart | None = None
        self.last_turn: str | None = None
        # File-history snapshots name the message that opened their turn, which comes after.
        self._snapshots: list[tuple[str, datetime | None, list[str]]] = []
        self._sidechains = 0
        # Where the part of the file not yet given to any turn begins.
        self._resume = self._start
        self.last_start: TurnStart | None = None
        self.title: str | None = None
        self._source = str(path)
        self._identity = identity
        self._stream = stream
        self._sessions: dict[str, _Session] = {}
        self._summaries: list[tuple[str | None, str]] = []
        # Every event uuid read, and whether a line since the last message could not be read:
        # then an answer whose parent is unknown may belong to a prompt that was lost.
        self._uuids: set[str] = set()
        self._gap = False

    def records(self) -> Iterator[TurnRecord]:
        """Read the file (and its subagent transcripts), then yield its turns session by
        session."""
        for line, offset, size, event in read_events(self._path, self._start, self._stream,
                                                     self._on_unreadable):
            self._on_event(line, offset, event)
            self._advance(line, offset, size, event)
            if (uuid := event_uuid(event)) is not None:
                self._uuids.add(uuid)
        for agent_file in subagent_files(self._path):
            self._read_subagent_file(agent_file)
        single = len(self._sessions) == 1
        self._attach_snapshots()
        opened = [t for session in self._sessions.values() for t in session.turns]
        last = max(opened, key=lambda t: t.start.open_offset) if opened else None
        if last is not None:
            self.last_start, self.last_turn = last.start, last.draft.turn_id
        for session in self._sessions.values():
            self._attach_subagents(session)
            title = self._fixed_title or self._title(session, single)
            self.title = title
            if session.waiting:
                # They belong to a request not written yet (a slash command run after the last
                # answer): a later import, or the next live capture, records them with it.
                self._stream.skip("context event before a turn not yet written",
                                  len(session.waiting))
            for turn in session.turns:
                if turn.usage:
                    turn.draft.usage = Usage(
                        tokens_in=sum(i for i, _ in turn.usage.values()),
                        tokens_out=sum(o for _, o in turn.usage.values()))
                if turn.draft.turn_id == self._settled:
                    self._stream.skip("turn recorded as final already")
                    continue
                if turn is last and self._hold_open:
                    self.held = turn.start
                    self._stream.skip("open turn held until the next prompt closes it")
                    continue
                if not turn.draft.submissions:
                    self._stream.skip("answer whose prompt line could not be read")
                    continue
                record = turn.draft.finish(self._stream, self._identity, session.conversation_id,
                                           title, self._source, f"line {turn.line}")
                if record is not None:
                    yield record

    def _on_unreadable(self) -> None:
        self._gap = True

    def _advance(self, line: int, offset: int, size: int, event: dict[str, Any]) -> None:
        """Move the resume point past an event that went to the open turn (or nowhere); one
        that waits for the next turn (or a snapshot naming it) stays in that turn's part."""
        if event.get("type") == "file-history-snapshot" or not self._sessions:
            return
        session = self._session_of(event)
        if session is None or not session.turns or session.waiting:
            return
        turn = session.turns[-1]
        if turn.start.open_offset == offset and event.get("isSidechain") is not True:
            return  # the opening event: the turn's part began before it
        self._resume = TurnStart(offset + size, line + 1)

    def _session_of(self, event: dict[str, Any]) -> _Session | None:
        raw_id = event.get("sessionId")
        key = raw_id if isinstance(raw_id, str) and raw_id else self._path.stem
        return self._sessions.get(key)

    def _on_event(self, line: int, offset: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        where = f"line {line}"
        if kind == "summary":
            self._on_summary(event, where)
            return
        if kind == "file-history-snapshot":
            self._on_snapshot(event)
            return
        if kind in _BOOKKEEPING:
            self._stream.skip(f"{kind} event")
            return
        if kind == "attachment":
            self._on_attachment(event, offset, where)
            return
        if kind not in ("user", "assistant", "system"):
            self._stream.skip(f"unknown event type: {kind}")
            return
        at = event_time(event.get("timestamp"))
        if at is None:
            self._stream.problem(self._source, where, f"{kind} event has no valid timestamp",
                                 compact_json(event))
            return
        session = self._session(event)
        if kind == "system":
            self._on_system(session, event, at)
            return
        message = event.get("message")
        if not isinstance(message, dict):
            self._stream.problem(self._source, where, f"{kind} event has no message object",
                                 compact_json(event))
            return
        if event.get("isSidechain") is True:
            self._on_sidechain(session, event, at, message)
            return
        start = TurnStart(self._resume.offset, self._resume.line, event_uuid(event),
                          open_offset=offset)
        if kind == "user":
            self._on_user(session, event, message, at, start)
        else:
            self._on_assistant(session, event, message, at, start)
        self._gap = False

    def _on_attachment(self, event: dict[str, Any], offset: int, where: str) -> None:
        """A prompt the user queued while Claude worked (``queued_command``), which Claude Code
        hands to the running request: a follow-up of the open turn. Other attachments (files,
        diagnostics, todo lists the harness adds) are skipped by type."""
        attachment = event.get("attachment")
        attachment = attachment if isinstance(attachment, dict) else {}
        kind = attachment.get("type")
        if kind != "queued_command":
            self._stream.skip(f"attachment event: {kind}")
            return
        at = event_time(event.get("timestamp"))
        text = "\n".join(t for t in text_blocks(attachment.get("prompt")) if t.strip())
        if at is None or not text:
            self._stream.problem(self._source, where, "queued command without time or prompt",
                                 compact_json(event))
            return
        session = self._session(event)
        harness = classify_text(text)
        if harness is not None:
            self._context(session, harness.kind, at, harness.data)
        elif attachment.get("commandMode", _QUEUED_PROMPT) != _QUEUED_PROMPT:
            self._stream.skip(f"queued {attachment.get('commandMode')} command")
        elif not session.turns:
            turn = self._open_turn(session, event, at, TurnStart(
                self._resume.offset, self._resume.line, event_uuid(event), open_offset=offset))
            turn.draft.add_user_text(text, at)
        else:
            self._stream.count("queued prompt")
            session.turns[-1].draft.add_user_text(text, at)

    def _on_summary(self, event: dict[str, Any], where: str) -> None:
        text = event.get("summary")
        if not isinstance(text, str) or not text.strip():
            self._stream.problem(self._source, where, "summary event has no summary text",
                                 compact_json(event))
            return
        if any(session.turns for session in self._sessions.values()):
            # One title rule for import and live capture: what the file holds before its first
            # turn (a summary at its top, else the first prompt). Live capture stores the title
            # when it first reads the file and cannot put a later summary on the turns it stored
            # already, so a summary appended later would make the two keep replacing each
            # other's turns.
            self._stream.skip("summary written after the first turn")
            return
        leaf = event.get("leafUuid")
        self._summaries.append((leaf if isinstance(leaf, str) else None, text))

    def _on_snapshot(self, event: dict[str, Any]) -> None:
        snapshot = event.get("snapshot")
        snapshot = snapshot if isinstance(snapshot, dict) else {}
        backups = snapshot.get("trackedFileBackups")
        files = sorted(backups) if isinstance(backups, dict) else []
        message_id = event.get("messageId")
        if not files or not isinstance(message_id, str):
            self._stream.skip("file-history snapshot without edited files")
            return
        self._snapshots.append((message_id, event_time(snapshot.get("timestamp")), files))

    def _on_system(self, session: _Session, event: dict[str, Any], at: datetime) -> None:
        subtype = event.get("subtype")
        content = event.get("content")
        data: dict[str, Any] = {"subtype": subtype if isinstance(subtype, str) else "system"}
        if isinstance(content, str) and content.strip():
            data["text"] = strip_ansi(content).strip()
        if isinstance(event.get("level"), str):
            data["level"] = event["level"]
        if event.get("isSidechain") is True:
            self._stream.skip("subagent system event")
            return
        self._context(session, "system", at, data,
                      before_next=data["subtype"] in _PRECEDING)
        if data["subtype"] == "api_error" and session.turns:
            session.turns[-1].draft.unfinished = "failed"

    def _context(self, session: _Session, kind: str, at: datetime, data: dict[str, Any],
                 *, before_next: bool = False) -> None:
        """A context event of the open turn, or of the next one (``before_next``, or when no
        turn is open yet)."""
        event = ContextEvent(kind=kind, at=at, data=data)
        if before_next or not session.turns:
            session.waiting.append(event)  # counted when its turn opens
        else:
            self._stream.count(f"context event: {kind}")
            session.turns[-1].draft.context_events.append(event)
            session.turns[-1].draft.touch(at)

    def _session(self, event: dict[str, Any]) -> _Session:
        raw_id = event.get("sessionId")
        key = raw_id if isinstance(raw_id, str) and raw_id else self._path.stem
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(stable_id(key))
        uuid = event.get("uuid")
        if isinstance(uuid, str):
            session.uuids.add(uuid)
        return session

    def _on_user(self, session: _Session, event: dict[str, Any], message: dict[str, Any],
                 at: datetime, start: TurnStart) -> None:
        if event.get("isCompactSummary") is True:
            # Written by Claude Code when it compacted the context: it precedes the next turn.
            text = " ".join(t for t in text_blocks(message.get("content")))
            self._context(session, "compaction", at, {"summary": text.strip()},
                          before_next=True)
            return
        texts: list[str] = []
        images: list[dict[str, Any]] = []
        harness_texts: list[tuple[str, dict[str, Any]]] = []
        for block in content_blocks(message.get("content")):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                harness = classify_text(block["text"])
                if harness is not None or event.get("isMeta") is True:
                    harness_texts.append(
                        (harness.kind, harness.data) if harness is not None
                        else ("meta", {"text": strip_ansi(block["text"]).strip()}))
                    if harness is not None and "command_name" in harness.data:
                        typed = " ".join(str(harness.data.get(k, "")) for k in (
                            "command_name", "command_args")).strip()
                        session.command = (event, start, at, typed)
                elif block["text"].startswith(INTERRUPT_MARKER):
                    self._on_interrupt(session, at)
                else:
                    texts.append(block["text"])
            elif kind == "tool_result":
                self._on_tool_result(session, event, block, at)
            elif kind == "image":
                images.append(block)
            else:
                self._stream.skip(f"unsupported block type: {kind}")
        text = "\n".join(t for t in texts if t.strip())
        if not text and not images:
            for kind_, data in harness_texts:
                # What a waiting command expands to belongs to the command's turn.
                self._context(session, kind_, at, data, before_next=kind_ in _PRECEDING
                              or (kind_ == "meta" and session.command is not None))
            return
        session.command = None  # the user's own words came: no answer is the command's
        turn = session.turns[-1] if session.turns else None
        if turn is None or turn.replied:
            turn = self._open_turn(session, event, at, start)
        # Harness text sent with the user's words (IDE context, reminders) goes with them.
        for kind_, data in harness_texts:
            self._stream.count(f"context event: {kind_}")
            turn.draft.context_events.append(ContextEvent(kind=kind_, at=at, data=data))
        turn.draft.add_user_text(text, at)
        for image in images:
            turn.draft.attachments.append(image_attachment(image, len(turn.draft.attachments)))

    def _on_interrupt(self, session: _Session, at: datetime) -> None:
        if not session.turns:
            self._stream.skip("interrupt marker before any prompt")
            return
        turn = session.turns[-1]
        turn.draft.unfinished = "interrupted"
        turn.draft.touch(at)
        # The user's next words are a new request, not a follow-up of the cut-off one.
        turn.replied = True
        self._stream.count("interrupted turn")

    def _open_turn(self, session: _Session, event: dict[str, Any], at: datetime,
                   start: TurnStart) -> _Turn:
        uuid = event_uuid(event)
        external = uuid or f"{self._path.name}:{start.line}"
        turn = _Turn(TurnDraft(stable_id(external)), start.line, start, uuid)
        for waiting in session.waiting:
            self._stream.count(f"context event: {waiting.kind}")
        turn.draft.context_events.extend(session.waiting)
        session.waiting = []
        session.command = None
        workspace = {name: event[key] for name, key in
                     (("cwd", "cwd"), ("git_branch", "gitBranch"), ("version", "version"))
                     if isinstance(event.get(key), str) and event[key]}
        if workspace:
            turn.draft.context_events.append(ContextEvent(kind="workspace", at=at,
                                                           data=workspace))
        session.turns.append(turn)
        return turn

    def _on_tool_result(self, session: _Session, event: dict[str, Any], block: dict[str, Any],
                        at: datetime) -> None:
        if not session.turns:
            self._stream.skip("tool result before any prompt")
            return
        tool_id = block.get("tool_use_id")
        tool_id = tool_id if isinstance(tool_id, str) else ""
        name = session.tool_names.get(tool_id, "tool")
        status: StepStatus = "failed" if block.get("is_error") is True else "completed"
        text = strip_ansi(result_text(block.get("content")))
        if name in SUBAGENT_TOOLS and (agent_id := result_agent_id(event, text)) is not None:
            session.agent_turns[agent_id] = session.turns[-1]
        session.turns[-1].draft.add_step(name, status, at, text,
                                         tool_use_id=tool_id)

    def _on_assistant(self, session: _Session, event: dict[str, Any], message: dict[str, Any],
                      at: datetime, start: TurnStart) -> None:
        turn = self._answered_turn(session, event, start)
        if turn is None:
            self._stream.skip("assistant event before any prompt")
            return
        turn.replied = True
        for block in content_blocks(message.get("content")):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                if block["text"].strip():
                    turn.draft.add_answer(block["text"], at)
            elif kind == "tool_use":
                name = block.get("name")
                name = name if isinstance(name, str) and name else "tool"
                tool_id = block.get("id")
                tool_id = tool_id if isinstance(tool_id, str) else ""
                session.tool_names[tool_id] = name
                turn.draft.add_step(name, "started", at, input_summary(name, block.get("input")),
                                    tool_use_id=tool_id)
            elif kind in _THINKING_BLOCKS:
                self._stream.skip("thinking block")
            else:
                self._stream.skip(f"unsupported block type: {kind}")
        usage = message.get("usage")
        if isinstance(usage, dict):
            message_id = message.get("id")
            key = message_id if isinstance(message_id, str) else f"#{len(turn.usage)}"
            turn.usage[key] = (token_count(usage.get("input_tokens")),
                               token_count(usage.get("output_tokens")))

    def _answered_turn(self, session: _Session, event: dict[str, Any],
                       start: TurnStart) -> _Turn | None:
        """The turn an assistant event answers: a slash command's own turn when one waits,
        a turn without prompt when its parent is unknown after an unreadable line (the line
        may have been its prompt, so it must not land on the previous turn), else the open
        turn."""
        if session.command is not None:
            command_event, command_start, command_at, typed = session.command
            turn = self._open_turn(session, command_event, command_at, command_start)
            turn.draft.add_user_text(typed, command_at)
            self._stream.count("slash command turn")
            return turn
        parent = event.get("parentUuid")
        if self._gap and isinstance(parent, str) and parent not in self._uuids:
            # Context waiting for the next turn stays waiting: this one is skipped unwritten.
            orphan = _Turn(TurnDraft(stable_id(start.uuid or f"{self._path.name}:{start.line}")),
                           start.line, start, start.uuid)
            session.turns.append(orphan)
            return orphan
        return session.turns[-1] if session.turns else None

    def _on_sidechain(self, session: _Session, event: dict[str, Any], at: datetime,
                      message: dict[str, Any]) -> None:
        agent_id = event.get("agentId")
        if isinstance(agent_id, str) and agent_id:
            key = agent_id
        else:
            # Older transcripts keep sidechains in the session file without an agent id: a
            # sidechain message without parent starts the next run.
            if event.get("parentUuid") is None or not self._sidechains:
                self._sidechains += 1
            key = f"sidechain-{self._sidechains}"
        run = session.runs.get(key)
        if run is None:
            run = session.runs[key] = SubagentRun(key)
        agent_type = event.get("agentType") or event.get("subagent_type")
        if isinstance(agent_type, str) and agent_type:
            run.agent_type = agent_type
        run.add(event, at, content_blocks(message.get("content")))
        self._stream.count("subagent event")

    def _read_subagent_file(self, path: Path) -> None:
        if path.name.startswith("agent-acompact"):
            # Claude Code's own context compaction run: its summary is in the session file.
            self._stream.skip("compaction subagent transcript")
            return
        for line, _offset, _size, event in read_events(path, TurnStart(0, 1), self._stream):
            at = event_time(event.get("timestamp"))
            message = event.get("message")
            if at is None or not isinstance(message, dict) or event.get("type") not in (
                    "user", "assistant"):
                self._stream.skip("subagent event without message")
                continue
            if not isinstance(event.get("agentId"), str):
                event = {**event, "agentId": path.stem.removeprefix("agent-")}
            del line
            self._on_sidechain(self._session(event), event, at, message)

    def _attach_subagents(self, session: _Session) -> None:
        """One step per subagent run, on the turn that launched it: the one whose Task/Agent
        result names it, else the last turn that started before it."""
        for key, run in session.runs.items():
            turn = session.agent_turns.get(key)
            if turn is None and run.started is not None:
                earlier = [t for t in session.turns if t.draft.submissions
                           and t.draft.submissions[0].arrived_at <= run.started]
                turn = earlier[-1] if earlier else None
            if turn is None or run.ended is None:
                self._stream.skip("subagent run outside the turns read")
                continue
            turn.draft.add_step(run.name, "failed" if run.failed else "completed", run.ended,
                                run.detail)
            turn.draft.steps.sort(key=lambda s: s.at)

    def _attach_snapshots(self) -> None:
        """The files each turn edited (from Claude Code's file-history snapshots), as one
        context event of the turn whose opening message the snapshot names."""
        by_uuid = {t.opened_by: t for session in self._sessions.values()
                   for t in session.turns if t.opened_by}
        edited: dict[str, tuple[_Turn, datetime, set[str]]] = {}
        for message_id, at, files in self._snapshots:
            turn = by_uuid.get(message_id)
            if turn is None:
                self._stream.skip("file-history snapshot of a turn not read")
                continue
            when = at or turn.draft.submissions[0].arrived_at
            _, first, known = edited.get(message_id, (turn, when, set()))
            edited[message_id] = (turn, min(first, when), known | set(files))
        for owner, first_at, paths in edited.values():
            self._stream.count("context event: files_edited")
            owner.draft.context_events.append(ContextEvent(kind="files_edited", at=first_at,
                                                           data={"files": sorted(paths)}))

    def _title(self, session: _Session, single: bool) -> str | None:
        # A summary names the conversation whose messages hold its leafUuid; in a file with a
        # single session every summary belongs to it.
        for leaf, text in reversed(self._summaries):
            if single or leaf is None or leaf in session.uuids:
                return one_line(text)
        for turn in session.turns:
            if turn.draft.submissions and turn.draft.submissions[0].text.strip():
                return one_line(turn.draft.submissions[0].text)
        return None
