"""Import a ChatGPT data export (``conversations.json``, or the export ``.zip`` holding it).

The file is one JSON array of conversations; it is parsed with ijson one conversation at a
time, so memory is bounded by the largest conversation rather than by the export.

Each conversation is a tree of message nodes (``mapping``). Only the branch ending at
``current_node`` is imported: regenerated answers and edited prompts on other branches were not
what the user ended up seeing. Along that branch, consecutive user messages fold into one turn
(prompt, then follow-ups) whose id is the first user message's id; the visible assistant messages
after them are joined, in order, with a blank line into the completion, because ChatGPT splits
one answer around tool calls (text, browse, text) and the last piece alone would lose the start.
"""

from __future__ import annotations

import codecs
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import ijson

from lake.errors import RecordError
from lake.records import Attachment, TurnRecord
from pipeline.importers.common import (
    Identity,
    ImportStream,
    TurnDraft,
    compact_json,
    one_line,
    stable_id,
)

_EXPORT_MEMBER = "conversations.json"
_HEAD_BYTES = 4096
_TEXT_CONTENT = ("text", "multimodal_text")
_SKIPPED_ROLES = {"system": "system message", "tool": "tool message"}


def iter_chatgpt(path: Path, *, tenant: str, user_id: str, app: str = "chatgpt",
                 agent: str = "chatgpt") -> ImportStream:
    """Turn records from a ChatGPT export: ``conversations.json`` or the export zip.

    Raises RecordError at once when the file is missing, a zip lacks ``conversations.json``, or an
    identity part is not a valid id; malformed conversations and nodes become problems on the
    returned stream and the rest of the export is still imported.
    """
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    if not path.is_file():
        raise RecordError(f"ChatGPT export {path} does not exist or is not a file")
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            _zip_member(archive, path)

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        yield from _ExportImport(path, identity, stream).records()

    return ImportStream(produce)


@dataclass(frozen=True)
class _Message:
    message_id: str
    role: str
    text: str
    at: datetime
    attachments: tuple[Attachment, ...]


class _ExportImport:
    """The import of one export file."""

    def __init__(self, path: Path, identity: Identity, stream: ImportStream) -> None:
        self._path = path
        self._source = str(path)
        self._identity = identity
        self._stream = stream

    def records(self) -> Iterator[TurnRecord]:
        """Yield the turns of each conversation as the parser reaches it."""
        parsed = 0
        with _open_export(self._path) as raw:
            reader = _Utf8Repair(raw)
            first = reader.head().lstrip()[:1]
            if first not in (b"[", b"{"):
                self._stream.problem(self._source, "byte 0", "export is not a JSON array of "
                                     "conversations", reader.head())
                return
            # A single conversation object (one file of a split export) is accepted as well.
            prefix = "" if first == b"{" else "item"
            try:
                for conversation in ijson.items(reader, prefix, use_float=True):
                    parsed += 1
                    yield from self._conversation(parsed - 1, conversation)
            except ijson.JSONError as exc:
                self._stream.problem(self._source, f"conversations[{parsed}]",
                                     "export is not valid JSON here, so nothing after it can be "
                                     f"read: {str(exc).splitlines()[0]}")
            if reader.first_bad_offset is not None:
                self._stream.problem(self._source, f"byte {reader.first_bad_offset}",
                                     "export has bytes that are not valid UTF-8; they were "
                                     "read as U+FFFD")

    def _conversation(self, index: int, conversation: Any) -> Iterator[TurnRecord]:
        where = f"conversations[{index}]"
        if not isinstance(conversation, dict):
            self._stream.problem(self._source, where, "conversation is not a JSON object",
                                 compact_json(conversation))
            return
        external = conversation.get("conversation_id") or conversation.get("id")
        if not isinstance(external, str) or not external:
            self._stream.problem(self._source, where, "conversation has no id",
                                 compact_json(conversation))
            return
        where = f"{where} id={external}"
        mapping = conversation.get("mapping")
        current = conversation.get("current_node")
        if not isinstance(mapping, dict) or not mapping:
            self._stream.problem(self._source, where, "conversation has no mapping of nodes",
                                 compact_json(conversation))
            return
        if not isinstance(current, str) or current not in mapping:
            self._stream.problem(self._source, where,
                                 f"current_node {current!r} is not a node of the mapping",
                                 compact_json(conversation))
            return
        fallback = _epoch(conversation.get("create_time"))
        messages = [m for node in self._branch(mapping, current, where)
                    if (m := self._message(node, fallback, where)) is not None]
        drafts = self._fold(messages)
        raw_title = conversation.get("title")
        if not isinstance(raw_title, str) or not raw_title.strip():
            raw_title = drafts[0].submissions[0].text if drafts else ""
        title = one_line(raw_title) or None
        conversation_id = stable_id(external)
        for draft in drafts:
            record = draft.finish(self._stream, self._identity, conversation_id, title,
                                  self._source, f"{where} turn={draft.turn_id}")
            if record is not None:
                yield record

    def _branch(self, mapping: dict[str, Any], current: str, where: str) -> list[dict[str, Any]]:
        """The nodes from the root down to ``current``, following parent links upwards."""
        chain: list[dict[str, Any]] = []
        seen: set[str] = set()
        node_id: Any = current
        while node_id is not None:
            if not isinstance(node_id, str) or node_id in seen or node_id not in mapping:
                reason = ("parent links form a cycle"
                          if isinstance(node_id, str) and node_id in seen
                          else f"parent {node_id!r} is not a node of the mapping")
                self._stream.problem(self._source, f"{where} node={chain[-1].get('id')}",
                                     f"{reason}; the branch above it is not imported")
                break
            seen.add(node_id)
            node = mapping[node_id]
            if not isinstance(node, dict):
                self._stream.problem(self._source, f"{where} node={node_id}",
                                     "node is not a JSON object; the branch above it is not "
                                     "imported", compact_json(node))
                break
            chain.append({**node, "id": node_id})
            node_id = node.get("parent")
        chain.reverse()
        return chain

    def _message(self, node: dict[str, Any], fallback: datetime | None,
                 where: str) -> _Message | None:
        """The node's message if it is a visible user or assistant text, else None (counted)."""
        message = node.get("message")
        if message is None:
            return None  # the tree's root (and some placeholders) carry no message
        node_where = f"{where} node={node['id']}"
        if not isinstance(message, dict):
            self._stream.problem(self._source, node_where, "message is not a JSON object",
                                 compact_json(message))
            return None
        author = message.get("author")
        role = author.get("role") if isinstance(author, dict) else None
        metadata = message.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        content = message.get("content")
        content = content if isinstance(content, dict) else {}
        if not isinstance(role, str):
            self._stream.problem(self._source, node_where, "message has no author role",
                                 compact_json(message))
            return None
        if role not in ("user", "assistant"):
            self._stream.skip(_SKIPPED_ROLES.get(role, f"unsupported author role: {role}"))
            return None
        if metadata.get("is_visually_hidden_from_conversation") is True:
            self._stream.skip("hidden message")
            return None
        if role == "assistant" and message.get("recipient", "all") != "all":
            self._stream.skip("tool call")
            return None
        if content.get("content_type") not in _TEXT_CONTENT:
            self._stream.skip(f"unsupported content type: {content.get('content_type')}")
            return None
        at = _epoch(message.get("create_time")) or fallback
        if at is None:
            self._stream.problem(self._source, node_where, "message has no create_time",
                                 compact_json(message))
            return None
        attachments = tuple(self._attachments(metadata.get("attachments"), node_where))
        text = "\n".join(p for p in map(_part_text, _list(content.get("parts"))) if p.strip())
        if not text and not attachments:
            self._stream.skip("empty message")
            return None
        message_id = message.get("id")
        return _Message(message_id if isinstance(message_id, str) and message_id else node["id"],
                        role, text, at, attachments)

    def _attachments(self, raw: Any, where: str) -> Iterator[Attachment]:
        for item in _list(raw):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(item, dict) or not isinstance(name, str) or not name:
                self._stream.problem(self._source, where, "attachment has no name",
                                     compact_json(item))
                continue
            mime = item.get("mime_type") or item.get("mimeType")
            size = item.get("size")
            yield Attachment(
                name=name, mime=mime if isinstance(mime, str) else "application/octet-stream",
                size=size if isinstance(size, int) and not isinstance(size, bool)
                and size >= 0 else 0)

    def _fold(self, messages: list[_Message]) -> list[TurnDraft]:
        drafts: list[TurnDraft] = []
        answered = False
        for message in messages:
            if message.role == "user":
                if not drafts or answered:
                    drafts.append(TurnDraft(stable_id(message.message_id)))
                    answered = False
                drafts[-1].add_user_text(message.text, message.at)
                drafts[-1].attachments.extend(message.attachments)
            elif not drafts:
                self._stream.skip("assistant message before any prompt")
            else:
                previous = drafts[-1].completion
                text = f"{previous.text}\n\n{message.text}" if previous else message.text
                drafts[-1].complete(text, message.at)
                answered = True
        return drafts


@contextmanager
def _open_export(path: Path) -> Iterator[IO[bytes]]:
    """The export's JSON as a buffered binary stream, read from inside a zip when given one."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive, archive.open(_zip_member(archive, path)) as fh:
            yield fh
    else:
        with path.open("rb") as fh:
            yield fh


def _zip_member(archive: zipfile.ZipFile, path: Path) -> str:
    names = [n for n in archive.namelist()
             if n == _EXPORT_MEMBER or n.endswith("/" + _EXPORT_MEMBER)]
    if not names:
        raise RecordError(f"ChatGPT export {path} is a zip without {_EXPORT_MEMBER}")
    return min(names, key=len)


class _Utf8Repair:
    """A byte reader that passes UTF-8 through and replaces invalid bytes with U+FFFD.

    ijson stops at the first invalid byte, which would lose the rest of the export; replacing
    keeps the damage to the one string, and ``first_bad_offset`` lets the import report it.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._read = 0
        self._written = 0
        self._head = b""
        self.first_bad_offset: int | None = None

    def head(self) -> bytes:
        """The first bytes of the stream, without consuming them."""
        if not self._head:
            self._head = self._repaired(_HEAD_BYTES)
        return self._head

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` input bytes, repaired; may return a few bytes fewer or more."""
        if size == 0:
            return b""  # ijson probes with read(0) to tell bytes from text streams
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._repaired(size)

    def _repaired(self, size: int) -> bytes:
        out = b""
        # ijson takes an empty read as the end of input, so read on while the decoder has only
        # buffered the start of a character split across reads.
        while not out:
            pending_before = self._decoder.getstate()[0]
            chunk = self._raw.read(size)
            out = self._decoder.decode(chunk, final=not chunk).encode("utf-8")
            self._read += len(chunk)
            self._written += len(out)
            if self.first_bad_offset is None:
                self._locate_replacement(pending_before, chunk)
            if not chunk:
                break
        return out

    def _locate_replacement(self, pending_before: bytes, chunk: bytes) -> None:
        # Valid UTF-8 re-encodes to exactly the bytes it came from, so a difference means this
        # read replaced something; decoding it strictly tells where.
        complete = self._read - len(self._decoder.getstate()[0])
        if self._written == complete:
            return
        start = self._read - len(chunk) - len(pending_before)
        try:
            (pending_before + chunk).decode("utf-8")
            self.first_bad_offset = start
        except UnicodeDecodeError as exc:
            self.first_bad_offset = start + exc.start


def _part_text(part: Any) -> str:
    """The text of one content part; non-text parts become a short bracketed marker."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        if isinstance(part.get("text"), str):
            return str(part["text"])
        kind = part.get("content_type")
        if kind == "image_asset_pointer":
            return "[image]"
        return f"[{kind}]" if isinstance(kind, str) else ""
    return ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _epoch(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None
