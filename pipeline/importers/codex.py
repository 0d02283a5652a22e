"""Import Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

A rollout is one session, one conversation (its id is the session's). Current rollouts hold
``{"timestamp", "type", "payload"}`` lines (``session_meta``, ``turn_context``,
``response_item``, ``event_msg``, ``compacted``); older ones start with the bare session
metadata, then bare response items and ``{"record_type": "state"}`` lines.

The model's history (``response_item``) and the UI's events (``event_msg``) repeat each user
and agent message. A turn keeps the response items' copies, and the events' only when the
items have none (some rollouts carry the user's words only in ``user_message`` events), so no
turn is doubled. What Codex writes under the user role itself (``AGENTS.md`` instructions,
``<environment_context>``, the IDE's context around "My request for Codex") and developer
instructions become context events; only the user's words are submissions. Tool calls
(``function_call`` / ``function_call_output`` paired by ``call_id``, ``custom_tool_call`` such
as apply_patch, ``local_shell_call``, ``web_search_call``) and reasoning summaries become steps
(encrypted reasoning is never read); ``token_count`` events are the turn's usage; a compaction
is a context event of the turn after it; an aborted turn keeps its prompt with completion
status ``interrupted``. Reading may start at a turn's byte offset (live capture re-reads the
last turn onwards, see :mod:`pipeline.importers.codex_live`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lake.records import ContextEvent, StepStatus
from pipeline.importers.agent_files import (
    TurnStart,
    find_files,
    read_events,
    text_of,
    time_of,
)
from pipeline.importers.codex_items import (
    call_output,
    call_summary,
    content_images,
    content_texts,
    reasoning_summary,
    session_data,
    split_user_text,
    token_usage,
    turn_context_data,
    web_search_detail,
)
from pipeline.importers.codex_turns import Resume, Turn, fill
from pipeline.importers.common import Identity, ImportStream, TurnDraft, stable_id
from pipeline.importers.text import one_line

AGENT = "codex"
_LINE_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
_USER_TEXT = ("input_text", "text")
_ANSWER_TEXT = ("output_text", "text")
# Events that repeat what a response item holds, or only drive the UI.
_COPIES = {"agent_reasoning": "reasoning summary", "agent_reasoning_raw_content": "reasoning",
           "exec_command_end": "command output", "patch_apply_end": "patch result",
           "mcp_tool_call_end": "tool result", "web_search_end": "web search",
           "view_image_tool_call": "image view", "item_completed": "item"}


def is_rollout(path: Path) -> bool:
    """Whether a file found in a folder is a Codex rollout."""
    return path.name.startswith("rollout-") and path.suffix == ".jsonl"


def iter_codex(paths: Sequence[Path], *, tenant: str, user_id: str, app: str = AGENT,
               agent: str = AGENT) -> ImportStream:
    """Turn records from Codex rollouts: ``rollout-*.jsonl`` files, or folders searched for
    them. Raises RecordError at once when a path does not exist or an identity part is not a
    valid id; problems inside the files are reported on the stream while it is consumed."""
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    files = find_files(paths, is_rollout, "Codex rollout")

    def produce(stream: ImportStream) -> Iterator[Any]:
        for path in files:
            yield from RolloutImport(path, identity, stream).records()

    return ImportStream(produce)


class RolloutImport:
    """The import of one rollout, optionally resumed at a turn's offset."""

    def __init__(self, path: Path, identity: Identity, stream: ImportStream, *,
                 resume: Resume | None = None) -> None:
        self._path = path
        self._source = str(path)
        self._identity = identity
        self._stream = stream
        self._start = resume.start if resume else TurnStart(0, 1)
        self._resume = self._start
        self.session_id: str | None = resume.session_id if resume else None
        self.title: str | None = resume.title if resume else None
        self._tokens_total: Any = resume.tokens_before if resume else None
        self._turns: list[Turn] = []
        self._waiting: list[ContextEvent] = []
        self._waiting_turn_id: str | None = None
        self._tool_names: dict[str, str] = {}
        self._at: datetime | None = None
        self.last: Turn | None = None

    @property
    def last_start(self) -> TurnStart | None:
        """Where the last turn read begins (live capture resumes there)."""
        return self.last.start if self.last else None

    @property
    def last_tokens(self) -> Any:
        """The session's token total before the last turn read."""
        return self.last.tokens_before if self.last else None

    def records(self) -> Iterator[Any]:
        """Read the rollout, then yield its turns."""
        for line, offset, size, event in read_events(self._path, self._start, self._stream):
            moved = self._on_line(line, offset, event)
            if moved and self._turns and not self._waiting and self._waiting_turn_id is None:
                self._resume = TurnStart(offset + size, line + 1)
        if self._waiting:
            self._stream.skip("context event before a turn not yet written", len(self._waiting))
        conversation = stable_id(self.session_id or self._path.stem)
        for turn in self._turns:
            self.last = turn
            first_words = fill(turn, self._stream)
            if self.title is None and first_words:
                self.title = one_line(first_words) or None
            record = turn.draft.finish(self._stream, self._identity, conversation, self.title,
                                       self._source, f"line {turn.start.line}")
            if record is not None:
                yield record

    # -- lines ---------------------------------------------------------------------------

    def _on_line(self, line: int, offset: int, event: dict[str, Any]) -> bool:
        """Take one line; True when it went to the open turn (the resume point passes it)."""
        kind, payload = event.get("type"), event.get("payload")
        at = time_of(event.get("timestamp"))
        if kind in _LINE_TYPES and isinstance(payload, dict):
            self._at = at or self._at
        elif "record_type" in event:
            self._stream.skip("state line (older rollout)")
            return False
        elif kind is None and isinstance(event.get("id"), str) and line == 1:
            kind, payload = "session_meta", event  # the older shape's bare first line
            self._at = at or self._at
        elif isinstance(kind, str):
            kind, payload = "response_item", event  # an older rollout's bare item
        else:
            self._stream.problem(self._source, f"line {line}", "line is not a rollout item",
                                 text_of(str(event), 300))
            return False
        if self._at is None:
            self._stream.problem(self._source, f"line {line}", "item has no time, nor has any "
                                 "item before it", text_of(str(event), 300))
            return False
        if kind == "session_meta":
            return self._on_session(payload, line)
        if kind == "turn_context":
            return self._on_turn_context(payload)
        if kind == "compacted":
            message = payload.get("message")
            self._pre_turn("compaction", {"summary": text_of(message)} if message else {})
            return False
        if kind == "event_msg":
            return self._on_event(payload, line, offset)
        return self._on_item(payload, line, offset)

    def _on_session(self, meta: dict[str, Any], line: int) -> bool:
        session_id = meta.get("id")
        if not isinstance(session_id, str) or not session_id:
            self._stream.problem(self._source, f"line {line}", "session_meta has no id",
                                 text_of(str(meta), 300))
            return False
        if self.session_id is None:
            self.session_id = session_id
        elif session_id != self.session_id:
            # A forked session's file starts with its own meta, then the parent's history.
            self._stream.skip("session_meta of another session (fork history)")
            return False
        data = session_data(meta)
        instructions = meta.get("instructions")
        if isinstance(instructions, str) and instructions.strip():
            data["instructions"] = text_of(instructions)
        self._pre_turn("session", data)
        return False

    def _on_turn_context(self, payload: dict[str, Any]) -> bool:
        turn_id = payload.get("turn_id") if isinstance(payload.get("turn_id"), str) else None
        turn = self._turns[-1] if self._turns else None
        # Codex writes it again for each model request of a turn: the first one says it. One
        # naming another turn, or coming after the last turn ended, opens the next turn.
        ours = turn is not None and (turn.codex_id == turn_id if turn_id and turn.codex_id
                                     else not turn.ended)
        if turn is not None and ours:
            if turn.had_context:
                self._stream.skip("repeated turn_context")
            else:
                self._stream.count("context event: turn_context")
                turn.had_context = True
                turn.draft.context_events.append(ContextEvent(
                    kind="turn_context", at=self._now(), data=turn_context_data(payload)))
            return True
        if turn_id:
            self._waiting_turn_id = turn_id
        self._waiting.append(ContextEvent(kind="turn_context", at=self._now(),
                                          data=turn_context_data(payload)))
        return False

    def _on_event(self, payload: dict[str, Any], line: int, offset: int) -> bool:
        kind = payload.get("type")
        at = self._now()
        if kind == "user_message":
            message = payload.get("message")
            images = [u for u in payload.get("images") or [] if isinstance(u, str)]
            if isinstance(message, str):
                return self._user_text(message, images, line, offset, from_items=False)
            return False
        if kind in ("task_started", "turn_started"):
            turn_id = payload.get("turn_id")
            last = self._turns[-1] if self._turns else None
            ours = last is not None and isinstance(turn_id, str) and last.codex_id == turn_id
            if not ours and isinstance(turn_id, str) and turn_id and self._open() is None:
                self._waiting_turn_id = turn_id
            self._stream.count("task started")
            return ours or self._open() is not None
        turn = self._turns[-1] if self._turns else None
        if turn is None:
            self._stream.skip(f"event before any prompt: {kind}")
            return False
        if kind == "agent_message":
            message = payload.get("message")
            if isinstance(message, str) and message.strip():
                turn.event_answers.append((message, at))
            turn.replied = True
        elif kind in ("task_complete", "turn_complete"):
            last = payload.get("last_agent_message")
            if isinstance(last, str) and last.strip():
                turn.last_message = (last, at)
            turn.replied = turn.ended = True
            turn.draft.touch(at)
            self._stream.count("task complete")
        elif kind == "turn_aborted":
            turn.draft.unfinished = "interrupted"
            turn.replied = turn.ended = True
            turn.draft.touch(at)
            self._stream.count("aborted turn")
        elif kind == "token_count":
            usage, total = token_usage(payload)
            if usage is not None and total != self._tokens_total:
                turn.tokens = (turn.tokens[0] + usage[0], turn.tokens[1] + usage[1])
            if total is not None:
                self._tokens_total = total
        elif kind == "context_compacted":
            self._stream.skip("context_compacted event (the compaction is its item)")
        elif kind == "error":
            message = payload.get("message")
            turn.draft.context_events.append(ContextEvent(kind="error", at=at, data={
                "text": text_of(message)} if isinstance(message, str) else {}))
            if not turn.item_answers and not turn.event_answers:
                turn.draft.unfinished = "failed"
        else:
            self._stream.skip(f"event_msg: {_COPIES.get(str(kind), kind)}")
        return True

    def _on_item(self, item: dict[str, Any], line: int, offset: int) -> bool:
        kind = item.get("type")
        at = self._now()
        if kind == "message":
            role = item.get("role")
            if role == "user":
                texts = content_texts(item.get("content"), _USER_TEXT)
                return self._user_text("\n".join(texts), content_images(item.get("content")),
                                       line, offset, from_items=True)
            if role in ("developer", "system"):
                for text in content_texts(item.get("content"), _USER_TEXT):
                    self._pre_turn("instructions", {"role": role, "text": text_of(text)})
                return False
            turn = self._replying("assistant message")
            if turn is not None:
                text = "\n".join(content_texts(item.get("content"), _ANSWER_TEXT))
                if text.strip():
                    turn.item_answers.append((text, at))
            return turn is not None
        turn = self._replying(str(kind))
        if turn is None:
            return False
        draft = turn.draft
        call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else ""
        if kind == "function_call" or kind == "custom_tool_call":
            name = item.get("name") if isinstance(item.get("name"), str) else "tool"
            self._tool_names[str(call_id)] = str(name)
            detail = call_summary(str(name), item.get("arguments")) if kind == "function_call" \
                else text_of(item.get("input"))
            draft.add_step(str(name), "started", at, detail)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            text, failed = call_output(item.get("output"))
            name = self._tool_names.get(str(call_id), "tool")
            draft.add_step(name, "failed" if failed else "completed", at, text)
        elif kind == "local_shell_call":
            action = item.get("action")
            command = action.get("command") if isinstance(action, dict) else None
            self._tool_names[str(call_id)] = "shell"
            draft.add_step("shell", "started", at, call_summary("shell", {"command": command})
                           if isinstance(command, list) else None)
        elif kind == "web_search_call":
            searched: StepStatus = "failed" if item.get("status") == "failed" else "completed"
            draft.add_step("web_search", searched, at, web_search_detail(item) or None)
        elif kind == "reasoning":
            summary = reasoning_summary(item)
            if summary:
                draft.add_step("reasoning", "completed", at, summary)
            else:
                self._stream.skip("reasoning without a readable summary")
        else:
            self._stream.skip(f"response item: {kind}")
        return True

    # -- turns ---------------------------------------------------------------------------

    def _user_text(self, text: str, images: list[str], line: int, offset: int, *,
                   from_items: bool) -> bool:
        split = split_user_text(text)
        for kind, data in split.context:
            self._pre_turn(kind, data)
        if not split.words.strip() and not images:
            return False
        at = self._now()
        turn = self._open()
        if turn is None:
            turn = self._new_turn(line, offset)
        if from_items:
            turn.item_texts.append((split.words, at))
            turn.item_images.extend(images)
        else:
            turn.event_texts.append((split.words, at))
            turn.event_images.extend(images)
        turn.draft.touch(at)
        return True

    def _open(self) -> Turn | None:
        """The turn still taking the user's words: the last one, until anything answered."""
        turn = self._turns[-1] if self._turns else None
        return turn if turn is not None and not turn.replied else None

    def _replying(self, what: str) -> Turn | None:
        if not self._turns:
            self._stream.skip(f"{what} before any prompt")
            return None
        turn = self._turns[-1]
        turn.replied = True
        return turn

    def _new_turn(self, line: int, offset: int) -> Turn:
        external = self._waiting_turn_id or f"{self.session_id or self._path.stem}:{line}"
        start = TurnStart(self._resume.offset, self._resume.line, external, open_offset=offset)
        turn = Turn(TurnDraft(stable_id(external)), start, self._tokens_total,
                     codex_id=self._waiting_turn_id)
        for event in self._waiting:
            self._stream.count(f"context event: {event.kind}")
            turn.had_context = turn.had_context or event.kind == "turn_context"
        turn.draft.context_events.extend(self._waiting)
        self._waiting = []
        self._waiting_turn_id = None
        self._turns.append(turn)
        return turn

    def _pre_turn(self, kind: str, data: dict[str, Any]) -> None:
        """A context event of the turn taking the user's words, else of the next turn. One
        already there (the IDE context in an event copy of the prompt) is not added again."""
        turn = self._open()
        target = self._waiting if turn is None else turn.draft.context_events
        if any(e.kind == kind and e.data == data for e in target):
            self._stream.skip(f"repeated context: {kind}")
            return
        target.append(ContextEvent(kind=kind, at=self._now(), data=data))
        if turn is not None:
            self._stream.count(f"context event: {kind}")

    def _now(self) -> datetime:
        assert self._at is not None  # _on_line reports a line without any time first
        return self._at
