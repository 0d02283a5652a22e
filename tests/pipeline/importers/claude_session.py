"""A Claude Code session written the way Claude Code 2.1 writes its transcript, for replays.

Each line is what Claude Code's transcript writer appends: the message, plus ``parentUuid``
(the previous message of the chain), ``isSidechain``, ``userType``, ``entrypoint``, ``cwd``,
``sessionId``, ``version``, ``gitBranch`` and ``slug``. A turn is the user's prompt, the
assistant's tool calls with their results (one line per content block), and its answer; after
the ``Stop`` hooks ran, Claude Code appends a ``system`` ``stop_hook_summary`` line (one per
hook run: ``hookCount``, ``hookInfos``, ``hookErrors``, ``preventedContinuation``,
``stopReason``, ``hasOutput``, ``level`` ``suggestion``, ``toolUseID``) and, once the query
loop finished, a ``system`` ``turn_duration`` line (``durationMs``, ``messageCount``). These
shapes are read from the bundled code of ``@anthropic-ai/claude-code`` 2.1.197 (its message
factories for ``stop_hook_summary`` and ``turn_duration`` and the writer's ``appendEntry``).

A replay writes a turn, runs the hook the way Claude Code does (``Stop``: session id and
transcript path on stdin, the project as working folder), then appends the harness's lines;
at the end it runs the ``SessionEnd`` hook.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = "2.1.197"


@dataclass
class SessionWriter:
    """Appends a session's lines to ``<projects>/<project key>/<session>.jsonl``."""

    path: Path
    session_id: str
    cwd: str
    clock: int = 0
    parent: str | None = None
    counter: int = 0
    lines: int = 0
    uuids: list[str] = field(default_factory=list)

    def _uuid(self, kind: str) -> str:
        self.counter += 1
        return f"{kind[:2]}{self.counter:06d}-0000-4000-8000-{self.session_id[-12:]}"

    def _time(self) -> str:
        self.clock += 7
        return f"2026-11-20T09:{self.clock // 60 % 60:02d}:{self.clock % 60:02d}.000Z"

    def _append(self, entry: dict[str, Any]) -> str:
        uuid = self._uuid(str(entry["type"]))
        line = {"parentUuid": self.parent, "isSidechain": False, **entry,
                "timestamp": self._time(), "uuid": uuid, "userType": "external",
                "entrypoint": "cli", "cwd": self.cwd, "sessionId": self.session_id,
                "version": VERSION, "gitBranch": "main", "slug": "quiet-otter"}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        self.parent = uuid
        self.lines += 1
        self.uuids.append(uuid)
        return uuid

    def user(self, content: str | list[dict[str, Any]], **extra: Any) -> str:
        """A user line: the prompt (a string) or tool results (blocks)."""
        return self._append({"type": "user", "message": {"role": "user", "content": content},
                             "promptId": "p-1", **extra})

    def assistant(self, block: dict[str, Any]) -> str:
        """One assistant content block: Claude Code writes one line per block."""
        return self._append({"type": "assistant", "message": {
            "id": f"msg_{self.counter}", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [block],
            "usage": {"input_tokens": 1200, "output_tokens": 80}}})

    def turn(self, prompt: str, answer: str, tools: list[tuple[str, dict[str, Any], str]]
             ) -> str:
        """A whole request: prompt, each tool call and its result, the answer; the prompt's
        uuid (the turn's id)."""
        opened = self.user(prompt)
        for n, (name, tool_input, result) in enumerate(tools):
            tool_id = f"toolu_{self.counter}_{n}"
            self.assistant({"type": "tool_use", "id": tool_id, "name": name,
                            "input": tool_input})
            self.user([{"tool_use_id": tool_id, "type": "tool_result", "content": result}],
                      toolUseResult={"stdout": result, "stderr": "", "interrupted": False})
        self.assistant({"type": "text", "text": answer})
        return opened

    def after_stop_hooks(self, command: str, started: int) -> None:
        """What Claude Code appends once its Stop hooks ran: the hooks' summary, then the
        turn's duration."""
        self._append({"type": "system", "subtype": "stop_hook_summary", "hookCount": 1,
                      "hookInfos": [{"command": command, "durationMs": 812}],
                      "hookErrors": [], "preventedContinuation": False, "stopReason": "",
                      "hasOutput": False, "level": "suggestion",
                      "toolUseID": f"toolu_stop_{self.counter}"})
        self._append({"type": "system", "subtype": "turn_duration",
                      "durationMs": 4200 + self.counter, "messageCount": self.lines - started,
                      "isMeta": False})


# A session of a user at work: plain requests, tool calls, a background task whose
# notification (with the harness's instruction line after it) comes in as a prompt of its own,
# a slash command, and a request in words the recall test looks for.
TURNS: list[tuple[str, str, list[tuple[str, dict[str, Any], str]]]] = [
    ("Why does the nightly export of invoices time out after 30 minutes?",
     "The export reads every invoice row into memory before writing; streaming it in pages "
     "of 5,000 keeps it under two minutes.",
     [("Grep", {"pattern": "def export_invoices"}, "billing/export.py:41: def export_invoices"),
      ("Read", {"file_path": "/srv/app/billing/export.py"}, "rows = list(Invoice.objects)")]),
    ("Stream the export in pages then, and run the billing tests in the background.",
     "Paged the export (5,000 rows a page) and started the billing tests in the background.",
     [("Edit", {"file_path": "/srv/app/billing/export.py"}, "File updated"),
      ("Bash", {"command": "pytest tests/billing", "run_in_background": True},
       "Command running in background with ID: b81f2c")]),
    ("<task-notification>\n<task-id>b81f2c</task-id>\n"
     "<output-file>/tmp/claude/tasks/b81f2c.output</output-file>\n<status>completed</status>\n"
     "<summary>Background command \"pytest tests/billing\" completed (exit code 0)</summary>\n"
     "</task-notification>\n"
     "Read the output file to retrieve the result: /tmp/claude/tasks/b81f2c.output",
     "The billing tests passed: 48 passed in 12.3 s.",
     [("Read", {"file_path": "/tmp/claude/tasks/b81f2c.output"}, "48 passed in 12.3s")]),
    ("Which postgres index would make the invoice lookup by customer and month faster?",
     "A composite btree index on (customer_id, issued_month) turns the sequential scan into "
     "an index scan.",
     [("Bash", {"command": "psql -c 'EXPLAIN SELECT ...'"}, "Seq Scan on invoices")]),
    ("Write the migration for that index, concurrently so it does not lock the table.",
     "Added migration 0042 creating the index CONCURRENTLY outside a transaction.",
     [("Write", {"file_path": "/srv/app/migrations/0042_invoice_idx.py"},
       "File created successfully")]),
]


def replay(writer: SessionWriter, run_hook: Callable[[str], None], command: str) -> None:
    """Write the session turn by turn as Claude Code does: each turn, then its Stop hook,
    then the harness's lines after the hooks; the SessionEnd hook last."""
    for prompt, answer, tools in TURNS:
        started = writer.lines
        writer.turn(prompt, answer, tools)
        run_hook("Stop")
        writer.after_stop_hooks(command, started)
    run_hook("SessionEnd")


def hook_payload(writer: SessionWriter, event: str) -> str:
    """The JSON Claude Code hands a Stop or SessionEnd hook on stdin."""
    payload: dict[str, Any] = {"session_id": writer.session_id,
                               "transcript_path": str(writer.path), "cwd": writer.cwd,
                               "permission_mode": "default", "hook_event_name": event}
    if event == "Stop":
        payload["stop_hook_active"] = False
    else:
        payload["reason"] = "prompt_input_exit"
    return json.dumps(payload)
