"""Import a Claude.ai data export (``conversations.json``, or the export ``.zip`` holding it).

The file is one JSON array of conversations, parsed one conversation at a time (ijson). A
conversation's ``chat_messages`` form a tree through ``parent_message_uuid`` when the user edited
a prompt or retried an answer; only the branch ending at ``current_leaf_message_uuid`` (else at
the last message) is imported, as the ChatGPT importer keeps the current branch. Consecutive
human messages fold into one turn whose id is the first one's uuid. A message's ``content``
blocks are read when present (else its flat ``text``): text blocks are the answer, with their
citations; ``thinking`` keeps only its summaries, as a reasoning step; ``tool_use`` and
``tool_result`` are steps; ``token_budget`` blocks are counted and left out, as are the
placeholders the app writes for blocks it cannot show. Attachments keep their
``extracted_content`` as searchable text; files are named attachments without bytes (the export
ships none).
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import ijson

from lake.errors import RecordError
from lake.records import Attachment, Citation, TurnRecord
from pipeline.importers.agent_files import input_summary, time_of
from pipeline.importers.claude_events import result_text
from pipeline.importers.common import Identity, ImportStream, TurnDraft, stable_id
from pipeline.importers.text import compact_json, one_line

AGENT = "claude-ai"
EXPORT_MEMBER = "conversations.json"
# What the app writes in place of a block the device cannot show: not the assistant's words.
PLACEHOLDERS = ("This block is not supported on your current device yet.",)
_ROOT_PARENT = "00000000-0000-4000-8000-000000000000"


def iter_claude_ai(path: Path, *, tenant: str, user_id: str, app: str = AGENT,
                   agent: str = AGENT) -> ImportStream:
    """Turn records from a Claude.ai export: ``conversations.json`` or the export zip.
    Raises RecordError at once when the file is missing or a zip holds no conversations file."""
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    if not path.is_file():
        raise RecordError(f"Claude.ai export {path} does not exist or is not a file")
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == EXPORT_MEMBER]
        if not members:
            raise RecordError(f"Claude.ai export {path} is a zip without {EXPORT_MEMBER}")

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        source = str(path)
        index = 0
        with _open(path) as fh:
            head = fh.read(4096).lstrip()
        if not head.startswith(b"["):
            stream.problem(source, "byte 0", "export is not a JSON array of conversations",
                           head[:300])
            return
        with _open(path) as fh:
            try:
                for index, conversation in enumerate(ijson.items(fh, "item", use_float=True)):
                    yield from _conversation(conversation, index, source, identity, stream)
            except ijson.JSONError as exc:
                stream.problem(source, f"conversations[{index}]", "export is not valid JSON "
                               f"here, so nothing after it can be read: {exc}")

    return ImportStream(produce)


@contextmanager
def _open(path: Path) -> Iterator[IO[bytes]]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            member = min((n for n in archive.namelist()
                          if n.rsplit("/", 1)[-1] == EXPORT_MEMBER), key=lambda n: n.count("/"))
            with archive.open(member) as fh:
                yield fh
    else:
        with path.open("rb") as fh:
            yield fh


def _conversation(conversation: Any, index: int, source: str, identity: Identity,
                  stream: ImportStream) -> Iterator[TurnRecord]:
    where = f"conversations[{index}]"
    if not isinstance(conversation, dict) or not isinstance(conversation.get("uuid"), str):
        stream.problem(source, where, "conversation is not an object with a uuid",
                       compact_json(conversation, 300))
        return
    where = f"{where} uuid={conversation['uuid']}"
    messages = conversation.get("chat_messages")
    if not isinstance(messages, list):
        stream.problem(source, where, "conversation has no chat_messages list",
                       compact_json(conversation, 300))
        return
    valid = []
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("uuid"), str) \
                or time_of(message.get("created_at")) is None:
            stream.problem(source, f"{where} chat_messages[{n}]",
                           "message has no uuid or no valid created_at",
                           compact_json(message, 300))
            continue
        valid.append(message)
    branch = _branch(valid, conversation.get("current_leaf_message_uuid"))
    if len(branch) < len(valid):
        stream.skip("message on another branch", len(valid) - len(branch))
    drafts: list[TurnDraft] = []
    citations: dict[str, list[Citation]] = {}
    replied = False
    for message in branch:
        at = time_of(message["created_at"])
        assert at is not None
        if message.get("sender") == "human":
            text = _human_text(message)
            files = _attachments(message)
            if not text.strip() and not files:
                stream.skip("empty human message")
                continue
            if not drafts or replied:
                drafts.append(TurnDraft(stable_id(message["uuid"])))
                replied = False
            drafts[-1].add_user_text(text, at)
            drafts[-1].attachments.extend(files)
        elif message.get("sender") == "assistant":
            if not drafts:
                stream.skip("assistant message before any prompt")
                continue
            replied = True
            _assistant(drafts[-1], message, at, stream,
                       citations.setdefault(drafts[-1].turn_id, []))
        else:
            stream.skip(f"message from sender {message.get('sender')}")
    name = conversation.get("name")
    title = name if isinstance(name, str) and name.strip() else (
        drafts[0].submissions[0].text if drafts and drafts[0].submissions else "")
    conversation_id = stable_id(conversation["uuid"])
    for draft in drafts:
        record = draft.finish(stream, identity, conversation_id, one_line(title) or None,
                              source, f"{where} turn={draft.turn_id}")
        if record is not None and citations.get(draft.turn_id):
            record = record.model_copy(update={"citations": citations[draft.turn_id]})
        if record is not None:
            yield record


def _branch(messages: list[dict[str, Any]], leaf: Any) -> list[dict[str, Any]]:
    """The messages from the root down to the current leaf, or all of them in order when the
    export carries no parent links."""
    by_id = {m["uuid"]: m for m in messages}
    if not any(isinstance(m.get("parent_message_uuid"), str)
               and m["parent_message_uuid"] in by_id for m in messages):
        return messages
    node = by_id.get(leaf) if isinstance(leaf, str) else None
    node = node or messages[-1]
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    while node is not None and node["uuid"] not in seen:
        seen.add(node["uuid"])
        chain.append(node)
        parent = node.get("parent_message_uuid")
        node = by_id.get(parent) if isinstance(parent, str) and parent != _ROOT_PARENT else None
    chain.reverse()
    return chain


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _human_text(message: dict[str, Any]) -> str:
    texts = [str(b["text"]) for b in _blocks(message)
             if b.get("type") == "text" and isinstance(b.get("text"), str)]
    if texts:
        return "\n".join(texts)
    text = message.get("text")
    return text if isinstance(text, str) else ""


def _attachments(message: dict[str, Any]) -> list[Attachment]:
    found: list[Attachment] = []
    names: set[str] = set()
    for item in message.get("attachments") or []:
        if not isinstance(item, dict):
            continue
        name = str(item.get("file_name") or f"attachment-{len(found) + 1}")
        size = item.get("file_size")
        extracted = item.get("extracted_content")
        names.add(name)
        found.append(Attachment(
            name=name, mime=_mime(item.get("file_type"), name),
            size=size if isinstance(size, int) and size >= 0 else 0,
            text=extracted if isinstance(extracted, str) and extracted.strip() else None))
    for key in ("files", "files_v2"):
        for item in message.get(key) or []:
            if not isinstance(item, dict) or not isinstance(item.get("file_name"), str):
                continue
            if item["file_name"] in names:
                continue
            names.add(item["file_name"])
            kind = item.get("file_kind")
            mime = _mime(None, item["file_name"])
            if kind == "image" and not mime.startswith("image/"):
                mime = "image/*"
            found.append(Attachment(name=item["file_name"], mime=mime, size=0))
    return found


def _mime(value: Any, name: str) -> str:
    if isinstance(value, str) and "/" in value:
        return value
    import mimetypes

    guessed, _ = mimetypes.guess_type(name)
    if guessed:
        return guessed
    return f"text/{value}" if isinstance(value, str) and value else "application/octet-stream"


def _assistant(draft: TurnDraft, message: dict[str, Any], at: datetime, stream: ImportStream,
               citations: list[Citation]) -> None:
    blocks = _blocks(message)
    if not blocks:
        text = message.get("text")
        if isinstance(text, str) and text.strip() and text.strip() not in PLACEHOLDERS:
            draft.add_answer(text, at)
        return
    names: dict[str, str] = {}
    for block in blocks:
        kind = block.get("type")
        when = time_of(block.get("start_timestamp")) or at
        if kind == "text" and isinstance(block.get("text"), str):
            text = block["text"]
            if text.strip() in PLACEHOLDERS:
                stream.skip("placeholder for a block the app could not show")
            elif text.strip():
                draft.add_answer(text, max(when, at))
                citations.extend(_citations(block.get("citations")))
        elif kind == "thinking":
            summaries = block.get("summaries")
            text = "\n".join(str(s["summary"]) for s in summaries or []
                             if isinstance(s, dict) and isinstance(s.get("summary"), str))
            if text.strip():
                draft.add_step("reasoning", "completed", when, text)
            else:
                stream.skip("thinking block without a summary")
        elif kind == "tool_use":
            name = str(block.get("name") or "tool")
            if isinstance(block.get("id"), str):
                names[block["id"]] = name
            draft.add_step(name, "started", when, input_summary(name, block.get("input")))
        elif kind == "tool_result":
            name = str(block.get("name") or names.get(str(block.get("tool_use_id")), "tool"))
            display = block.get("display_content")
            text = _result_text(block.get("content"))
            if not text.strip() and isinstance(display, dict | list):
                text = compact_json(display)
            draft.add_step(name, "failed" if block.get("is_error") is True else "completed",
                           when, text)
        elif kind == "token_budget":
            stream.skip("token_budget block")
        else:
            stream.skip(f"unsupported block type: {kind}")


def _result_text(content: Any) -> str:
    """A tool result's text; a search result block reads as its title and URL."""
    if isinstance(content, list):
        parts = [" ".join(str(b[k]) for k in ("title", "url") if isinstance(b.get(k), str))
                 if isinstance(b, dict) and b.get("type") != "text" else result_text([b])
                 for b in content]
        return "\n".join(p for p in parts if p)
    return result_text(content)


def _citations(raw: Any) -> list[Citation]:
    found: list[Citation] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        nested = item.get("details")
        details: dict[str, Any] = nested if isinstance(nested, dict) else item
        url = details.get("url") or item.get("url")
        if isinstance(url, str) and url:
            title = details.get("title") or item.get("title") or url
            found.append(Citation(title=str(title), url=url))
    return found
