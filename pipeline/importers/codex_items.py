"""What the items of a Codex rollout are, beyond their role: the harness text Codex writes as
the user (instruction files, environment context, IDE context), tool-call details and outputs,
reasoning summaries and token counts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.importers.agent_files import input_summary, text_of
from pipeline.importers.text import clip, compact_json

# A user-role text that is one tag from start to end is Codex's own (``<environment_context>``,
# ``<user_instructions>``, ``<turn_aborted>``, ``<user_shell_command>``...).
_WHOLE_TAG = re.compile(r"^<([a-z][a-z0-9_-]*)>(.*)</\1>$", re.DOTALL)
_INNER_TAG = re.compile(r"<([a-z][a-z0-9_-]*)>(.*?)</\1>", re.DOTALL)
_INSTRUCTION_HEADERS = ("# AGENTS.md instructions", "<user_instructions>")
# What the IDE extensions send: context sections, then the user's request after this header.
IDE_CONTEXT_HEADER = "# Context from my IDE setup:"
IDE_REQUEST_HEADER = "## My request for Codex:"
_TAG_KINDS = {"environment_context": "environment", "user_instructions": "instructions",
              "turn_aborted": "turn_aborted", "user_shell_command": "command"}


@dataclass(frozen=True)
class UserText:
    """A user-role text split into the user's own words (possibly empty) and the harness text
    that came with them, as (context event kind, data) pairs."""

    words: str
    context: tuple[tuple[str, dict[str, Any]], ...] = ()


def split_user_text(text: str) -> UserText:
    """The user's words in a user-role text, and what Codex or the IDE added around them."""
    stripped = text.strip()
    if stripped.startswith(_INSTRUCTION_HEADERS):
        return UserText("", (("instructions", {"text": text_of(stripped)}),))
    if stripped.startswith(IDE_CONTEXT_HEADER):
        context, _, request = stripped.partition(IDE_REQUEST_HEADER)
        return UserText(request.strip(), (("ide_context", {"text": text_of(context)}),))
    whole = _WHOLE_TAG.match(stripped)
    if whole:
        name, body = whole.groups()
        inner = dict((n, b.strip()) for n, b in _INNER_TAG.findall(body))
        data: dict[str, Any] = inner if inner and not _INNER_TAG.sub("", body).strip() \
            else {"text": text_of(body)}
        return UserText("", ((_TAG_KINDS.get(name, name), data),))
    return UserText(text)


def content_texts(content: Any, kinds: tuple[str, ...]) -> list[str]:
    """The texts of a message's content items of the given types."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [str(item["text"]) for item in content if isinstance(item, dict)
            and item.get("type") in kinds and isinstance(item.get("text"), str)]


def content_images(content: Any) -> list[str]:
    """The image URLs (data URLs) of a message's ``input_image`` items."""
    if not isinstance(content, list):
        return []
    return [str(item["image_url"]) for item in content if isinstance(item, dict)
            and item.get("type") == "input_image" and isinstance(item.get("image_url"), str)]


def call_summary(name: str, arguments: Any) -> str:
    """What a function call was asked to do: its command line, path or query."""
    parsed = arguments
    if isinstance(arguments, str):
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return clip(arguments, 200)
    if isinstance(parsed, dict) and isinstance(parsed.get("command"), list):
        command = [str(part) for part in parsed["command"]]
        # ["bash", "-lc", "script"] is how Codex runs a shell line: the script says it.
        line = command[-1] if len(command) == 3 and command[1] in ("-lc", "-c") \
            else " ".join(command)
        return clip(" ".join(line.split()), 200)
    return input_summary(name, parsed)


def call_output(output: Any) -> tuple[str, bool]:
    """A function call's output text, and whether the call failed (a nonzero exit code, or
    ``success: false``)."""
    if isinstance(output, list):
        texts = [str(item.get("text")) for item in output
                 if isinstance(item, dict) and isinstance(item.get("text"), str)]
        return "\n".join(texts), False
    if isinstance(output, dict):
        body = output.get("content", output.get("output", ""))
        text, _ = call_output(body) if not isinstance(body, str) else (body, False)
        return text, output.get("success") is False
    if not isinstance(output, str):
        return compact_json(output), False
    try:
        parsed = orjson.loads(output)
    except orjson.JSONDecodeError:
        return output, False
    if isinstance(parsed, dict) and isinstance(parsed.get("output"), str):
        metadata = parsed.get("metadata")
        code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return parsed["output"], isinstance(code, int) and code != 0
    return output, False


def reasoning_summary(item: dict[str, Any]) -> str:
    """The readable summary of a reasoning item (never its encrypted content)."""
    summary = item.get("summary")
    if not isinstance(summary, list):
        return ""
    return "\n\n".join(str(part["text"]).strip() for part in summary if isinstance(part, dict)
                       and isinstance(part.get("text"), str) and part["text"].strip())


def web_search_detail(item: dict[str, Any]) -> str:
    """What a web search call looked for (its query) or opened (its URL)."""
    action = item.get("action")
    if isinstance(action, dict):
        for key in ("query", "url", "pattern"):
            if isinstance(action.get(key), str) and action[key]:
                return str(action[key])
        queries = action.get("queries")
        if isinstance(queries, list):
            return "; ".join(str(q) for q in queries)
    return ""


def token_usage(payload: dict[str, Any]) -> tuple[tuple[int, int] | None, Any]:
    """A token_count event's (input, output) tokens of its last request, and its running total
    (which tells a repeated count from a new one)."""
    info = payload.get("info")
    if not isinstance(info, dict):
        return None, None
    last = info.get("last_token_usage")
    total = info.get("total_token_usage")
    if not isinstance(last, dict):
        return None, total
    return (_count(last.get("input_tokens")), _count(last.get("output_tokens"))), total


def turn_context_data(payload: dict[str, Any]) -> dict[str, Any]:
    """The parts of a turn_context worth keeping: where and how the turn ran."""
    data: dict[str, Any] = {k: payload[k] for k in (
        "cwd", "model", "approval_policy", "effort", "summary", "current_date", "timezone")
        if isinstance(payload.get(k), str) and payload[k]}
    sandbox = payload.get("sandbox_policy")
    if isinstance(sandbox, dict) and isinstance(sandbox.get("type"), str):
        data["sandbox"] = sandbox["type"]
    elif isinstance(sandbox, str):
        data["sandbox"] = sandbox
    return data


def session_data(meta: dict[str, Any]) -> dict[str, Any]:
    """The parts of a session_meta worth keeping: where the session ran, from what client."""
    data: dict[str, Any] = {k: meta[k] for k in (
        "cwd", "originator", "cli_version", "model_provider") if isinstance(meta.get(k), str)
        and meta[k]}
    source = meta.get("source")
    if isinstance(source, str):
        data["source"] = source
    elif isinstance(source, dict):
        data["source"] = compact_json(source, 200)
    git = meta.get("git")
    if isinstance(git, dict):
        for key, name in (("branch", "git_branch"), ("commit_hash", "git_commit"),
                          ("repository_url", "repository")):
            if isinstance(git.get(key), str) and git[key]:
                data[name] = git[key]
    if isinstance(meta.get("forked_from_id"), str):
        data["forked_from"] = meta["forked_from_id"]
    return data


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
