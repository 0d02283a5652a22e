"""Recall at the prompt: the user's relevant past turns, added to a Claude Code prompt.

Claude Code runs ``turnlake hook claude-code-recall`` on each prompt (its ``UserPromptSubmit``
hook) with ``{"session_id", "prompt", ...}`` on stdin; what the hook prints as
``hookSpecificOutput.additionalContext`` goes to the model with the prompt. The hook searches
the user's own history (a user principal: never another user's turns) through a warm
``turnlake serve`` (``--server``, the user key from ``$TURNLAKE_KEY``) or straight from a lake
(``--lake``), drops the turns of the session being typed in (the model has them already), keeps
the turns whose relevance reaches the floor (default 0.8, stricter than search's 0.5: a
prompt pays for every line added to it), and prints at most ``--turns`` of them within a token
budget (default 600, counted as characters / 4): when, the turn's prompt and two lines of its
answer, and its conversation and turn ids, so the agent can fetch the whole turn with the MCP
``get_turn`` tool. Nothing passes the floor: nothing is printed.

Latency matters here (the user waits for it before Claude starts): the server path imports
nothing beyond the standard library, and ``pipeline.entry`` dispatches to :func:`main` before
the command line's imports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_BUDGET_TOKENS = 600
DEFAULT_MIN_RELEVANCE = 0.8
DEFAULT_TURNS = 3
CHARS_PER_TOKEN = 4
ANSWER_LINES = 2
SERVER_TIMEOUT_S = 5.0
# Asked of the search beyond --turns: the current session's turns are dropped afterwards.
_EXTRA_HITS = 7
# Claude Code's session ids are UUIDs, which are lake ids as they are.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
HEADER = ("Possibly relevant turns from this user's earlier sessions (turnlake recall; "
          "fetch a whole turn with the turnlake get_turn tool):")


class RecallError(Exception):
    """Recall could not run: bad input or an unreachable source (logged, never shown)."""


@dataclass(frozen=True)
class PastTurn:
    """One recalled turn: where it is, when, how relevant, and what was said."""

    conversation_id: str
    turn_id: str
    at: str
    relevance: float
    prompt: str
    answer: str

    @classmethod
    def of(cls, hit: dict[str, Any]) -> PastTurn:
        """The turn of a search hit (``search --json`` / ``POST /v1/search`` shape)."""
        snippets = hit.get("snippets") or {}
        text = str(hit.get("text") or "")
        role = hit.get("role")
        return cls(conversation_id=str(hit.get("conversation_id", "")),
                   turn_id=str(hit.get("turn_id", "")), at=str(hit.get("turn_at", "")),
                   relevance=float(hit.get("relevance", 0.0)),
                   prompt=str(snippets.get("user") or (text if role == "user" else "")),
                   answer=str(snippets.get("assistant") or (text if role != "user" else "")))

    def render(self, budget_chars: int) -> str:
        """The turn as a few lines within ``budget_chars`` (its ids always whole)."""
        head = f"- [{self.at[:10] or '?'}] "
        ids = f"  (conversation {self.conversation_id}, turn {self.turn_id})"
        label = "  answer: "
        # What is left for the words once the fixed parts and the newlines are counted.
        room = budget_chars - len(head) - len(ids) - len(label) - 2
        prompt = _clip(" ".join(self.prompt.split()) or "(no prompt text)",
                       max(min(room // 2, 200), 20))
        answer_lines = [line.strip() for line in self.answer.splitlines() if line.strip()]
        answer = _clip(" / ".join(answer_lines[:ANSWER_LINES]), max(room - len(prompt), 0))
        lines = [head + prompt]
        if answer:
            lines.append(label + answer)
        lines.append(ids)
        return "\n".join(lines)


def _clip(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    return text[:chars - 1].rstrip() + "…" if chars > 1 else ""


def current_conversation(session_id: str) -> str:
    """The lake's conversation id of a Claude Code session."""
    if _UUID.fullmatch(session_id):
        return session_id
    from pipeline.importers.common import stable_id  # what the importer gives other ids

    return stable_id(session_id)


def render(turns: Sequence[PastTurn], *, budget_tokens: int = DEFAULT_BUDGET_TOKENS,
           max_turns: int = DEFAULT_TURNS) -> str | None:
    """The context to add: the header and as many turns (best first) as fit the budget;
    None when no turn fits."""
    budget = budget_tokens * CHARS_PER_TOKEN - len(HEADER) - 1
    parts: list[str] = []
    for turn in turns[:max_turns]:
        # Each turn gets an equal share of what is left, so the first never takes all.
        share = budget // max(min(len(turns), max_turns) - len(parts), 1)
        text = turn.render(share - 1)  # its newline counts too
        if len(text) + 1 > budget:
            break
        parts.append(text)
        budget -= len(text) + 1
    return "\n".join([HEADER, *parts]) if parts else None


def select(hits: Sequence[dict[str, Any]], session_id: str, floor: float) -> list[PastTurn]:
    """The hits' turns that pass the floor, without the current session's, best first."""
    current = current_conversation(session_id)
    turns = [PastTurn.of(h) for h in hits]
    return [t for t in turns if t.relevance >= floor and t.conversation_id != current]


def search_server(url: str, key: str, prompt: str, *, k: int, floor: float,
                  timeout_s: float = SERVER_TIMEOUT_S) -> list[dict[str, Any]]:
    """The hits of ``POST /v1/search`` as the key's user (scope user)."""
    body = json.dumps({"query": prompt, "scope": "user", "k": k, "min_relevance": floor,
                       "snippets": "both"}).encode()
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/search", data=body, method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise RecallError(f"turnlake serve at {url} answered {exc.code}: "
                          f"{exc.read()[:300].decode(errors='replace')}") from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise RecallError(f"cannot search {url}: {exc}") from None
    hits = answer.get("hits") if isinstance(answer, dict) else None
    return [h for h in hits if isinstance(h, dict)] if isinstance(hits, list) else []


def search_lake(lake: str, tenant: str, user: str, prompt: str, *, k: int,
                floor: float) -> list[dict[str, Any]]:
    """The hits of a search of the user's own turns straight from a lake."""
    from lake.embedding.factory import embedder_from
    from lake.search.access import Principal
    from lake.search.request import SearchRequest
    from lake.search.service import SearchService
    from lake.settings import Settings
    from lake.store import LakeStore

    settings = Settings.from_env(lake)
    if isinstance(settings.lake, Path) and not settings.lake.exists():
        raise RecallError(f"no lake at {settings.lake}")
    service = SearchService(LakeStore(settings.lake),
                            embedder=lambda: embedder_from(settings, "query"))
    result = service.search(SearchRequest(query=prompt, principal=Principal(
        tenant=tenant, user_id=user), scope="user", k=k, min_relevance=floor))
    return [hit.to_json() for hit in result.hits]


# The prompt hook of each agent recall serves: its event name, and what it prints when
# nothing is added (Gemini CLI parses the stdout of a hook that exits 0 as JSON).
PROMPT_HOOKS = {"claude-code": ("UserPromptSubmit", None), "gemini-cli": ("BeforeAgent", "{}")}


def hook_output(context: str, event: str = "UserPromptSubmit") -> str:
    """What a prompt hook (``event``) prints to add ``context`` to the prompt."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event,
                                              "additionalContext": context}},
                      ensure_ascii=False)


def parse_input(raw: bytes) -> tuple[str, str]:
    """(session id, prompt) of a UserPromptSubmit hook's stdin."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RecallError(f"hook input is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RecallError("hook input is not a JSON object")
    session, prompt = data.get("session_id"), data.get("prompt")
    if not isinstance(session, str) or not session:
        raise RecallError("hook input has no session_id")
    if not isinstance(prompt, str):
        raise RecallError("hook input has no prompt")
    return session, prompt


def recall(raw: bytes, args: argparse.Namespace, event: str = "UserPromptSubmit"
           ) -> str | None:
    """The hook's output for its stdin, or None when nothing is added."""
    session, prompt = parse_input(raw)
    prompt = prompt.strip()
    if not prompt or prompt.startswith("/"):
        return None  # a slash command is Claude Code's, not a question
    k = args.turns + _EXTRA_HITS
    if args.server:
        key = args.key or os.environ.get("TURNLAKE_KEY")
        if not key:
            raise RecallError("--server needs a user key: --key or $TURNLAKE_KEY")
        hits = search_server(args.server, key, prompt, k=k, floor=args.min_relevance)
    else:
        lake = args.lake or os.environ.get("TURNLAKE_LAKE")
        if not lake:
            raise RecallError("give --lake or $TURNLAKE_LAKE, or --server URL")
        hits = search_lake(lake, args.tenant, args.user, prompt, k=k, floor=args.min_relevance)
    context = render(select(hits, session, args.min_relevance),
                     budget_tokens=args.budget, max_turns=args.turns)
    return hook_output(context, event) if context is not None else None


def parser(agent: str = "claude-code") -> argparse.ArgumentParser:
    """The options of ``turnlake hook AGENT-recall`` (mirrored by its typer command)."""
    p = argparse.ArgumentParser(prog=f"turnlake hook {agent}-recall")
    p.add_argument("--tenant", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--server")
    p.add_argument("--key")
    p.add_argument("--lake")
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET_TOKENS)
    p.add_argument("--min-relevance", type=float, default=DEFAULT_MIN_RELEVANCE)
    p.add_argument("--turns", type=int, default=DEFAULT_TURNS)
    p.add_argument("--log")
    return p


def main(argv: Sequence[str], agent: str = "claude-code") -> int:
    """Run ``agent``'s prompt hook: print the context (or nothing) and return 0; on any
    error, log it and return 1 (a non-blocking error to Claude Code and Gemini CLI: the
    prompt goes on without recall)."""
    event, nothing = PROMPT_HOOKS[agent]
    args = parser(agent).parse_args(list(argv))
    started = time.perf_counter()
    try:
        output = recall(sys.stdin.buffer.read(), args, event)
    except Exception as exc:  # the user's prompt must go on whatever happened
        _log(args.log, f"error: {exc}", agent)
        return 1
    if output is not None or nothing is not None:
        sys.stdout.write((output or nothing or "") + "\n")
    if args.log:
        _log(args.log, f"{'added context' if output else 'nothing relevant'} "
                       f"({time.perf_counter() - started:.2f}s)", agent)
    return 0


def _log(path: str | None, message: str, agent: str = "claude-code") -> None:
    """Append a line to the recall log (--log, else $TURNLAKE_HOOK_LOG, else
    hook-AGENT-recall.log in turnlake's cache folder)."""
    from pipeline.cache import cache_dir

    target = Path(path or os.environ.get("TURNLAKE_HOOK_LOG")
                  or cache_dir() / f"hook-{agent}-recall.log")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as fh:
            fh.write(f"{datetime.now(UTC).isoformat(timespec='seconds')} {message}\n")
    except OSError:
        pass
