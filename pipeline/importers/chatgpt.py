"""Import a ChatGPT data export (``conversations.json``, its shards, or the export ``.zip``).

Each file is one JSON array of conversations; it is parsed with ijson one conversation at a
time, so memory is bounded by the largest conversation rather than by the export.

Each conversation is a tree of message nodes (``mapping``). Only the branch ending at
``current_node`` is imported: regenerated answers and edited prompts on other branches were not
what the user ended up seeing. Along that branch, consecutive user messages fold into one turn
(prompt, then follow-ups) whose id is the first user message's id. Every visible assistant
message of the turn is kept in order: the last is the completion, the earlier ones
``assistant.message`` events. Code interpreter runs become a started and a completed (or
failed) step plus a ``panel.code`` event (code, language, output) for replay; other tool calls
and tool messages (browsing, file search) become steps. Uploaded and generated files the export
ships are hosted as files of their turn. See :mod:`pipeline.importers.chatgpt_nodes`.
"""

from __future__ import annotations

import base64
import mimetypes
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import ijson

from lake.records import Attachment, HostedFile, LiveEvent, TurnRecord
from pipeline.importers.chatgpt_export import Export, Utf8Repair
from pipeline.importers.chatgpt_nodes import FileRef, Node, Skip, classify, epoch
from pipeline.importers.common import Identity, ImportStream, TurnDraft, stable_id
from pipeline.importers.text import compact_json, one_line

# Files larger than this stay attachments without bytes (the lake's default limit is 50 MiB).
MAX_HOSTED_BYTES = 25 * 1024 * 1024
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]+")


def iter_chatgpt(path: Path, *, tenant: str, user_id: str, app: str = "chatgpt",
                 agent: str = "chatgpt") -> ImportStream:
    """Turn records from a ChatGPT export: ``conversations.json`` (or one of its
    ``conversations-NNN.json`` shards) or the export zip.

    Raises RecordError at once when the file is missing, a zip holds no conversations file, or
    an identity part is not a valid id; malformed conversations and nodes become problems on
    the returned stream and the rest of the export is still imported.
    """
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    export = Export(path)

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        for shard in export.shards:
            yield from _ExportImport(export, shard, identity, stream).records()

    return ImportStream(produce)


class _Turn(TurnDraft):
    """A turn draft that also collects the files its messages name."""

    def __init__(self, turn_id: str) -> None:
        super().__init__(turn_id)
        self.files: list[FileRef] = []
        self.pending_code: Node | None = None


class _ExportImport:
    """The import of one conversations file of an export."""

    def __init__(self, export: Export, shard: str, identity: Identity,
                 stream: ImportStream) -> None:
        self._export = export
        self._shard = shard
        self._source = str(export.path)
        self._shard_prefix = f"{shard} " if export.is_zip and len(export.shards) > 1 else ""
        self._identity = identity
        self._stream = stream

    def records(self) -> Iterator[TurnRecord]:
        """Yield the turns of each conversation as the parser reaches it."""
        parsed = 0
        with self._export.open_shard(self._shard) as raw:
            reader = Utf8Repair(raw)
            first = reader.head().lstrip()[:1]
            if first not in (b"[", b"{"):
                self._stream.problem(self._source, f"{self._shard_prefix}byte 0",
                                     "export is not a JSON array of conversations",
                                     reader.head())
                return
            # A single conversation object (one file of a split export) is accepted as well.
            prefix = "" if first == b"{" else "item"
            try:
                for conversation in ijson.items(reader, prefix, use_float=True):
                    parsed += 1
                    yield from self._conversation(parsed - 1, conversation)
            except ijson.JSONError as exc:
                self._stream.problem(self._source, f"{self._shard_prefix}conversations[{parsed}]",
                                     "export is not valid JSON here, so nothing after it can be "
                                     f"read: {str(exc).splitlines()[0]}")
            if reader.first_bad_offset is not None:
                self._stream.problem(self._source,
                                     f"{self._shard_prefix}byte {reader.first_bad_offset}",
                                     "export has bytes that are not valid UTF-8; they were "
                                     "read as U+FFFD")

    def _conversation(self, index: int, conversation: Any) -> Iterator[TurnRecord]:
        where = f"{self._shard_prefix}conversations[{index}]"
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
        fallback = epoch(conversation.get("create_time"))
        nodes = [m for node in self._branch(mapping, current, where)
                 if (m := self._node(node, fallback, where)) is not None]
        drafts = self._fold(nodes)
        raw_title = conversation.get("title")
        if not isinstance(raw_title, str) or not raw_title.strip():
            raw_title = drafts[0].submissions[0].text if drafts else ""
        title = one_line(raw_title) or None
        conversation_id = stable_id(external)
        for draft in drafts:
            self._host(draft, where)
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

    def _node(self, node: dict[str, Any], fallback: Any, where: str) -> Node | None:
        """The node's message classified, or None (counted, or reported when malformed)."""
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
        if not isinstance(role, str):
            self._stream.problem(self._source, node_where, "message has no author role",
                                 compact_json(message))
            return None
        at = epoch(message.get("create_time")) or fallback
        if at is None:
            self._stream.problem(self._source, node_where, "message has no create_time",
                                 compact_json(message))
            return None
        message_id = message.get("id")
        classified = classify(message, role, at, message_id if isinstance(message_id, str)
                              and message_id else str(node["id"]))
        if isinstance(classified, Skip):
            self._stream.skip(classified.reason)
            return None
        return classified

    def _fold(self, nodes: list[Node]) -> list[_Turn]:
        drafts: list[_Turn] = []
        replied = False
        for node in nodes:
            if node.kind == "user":
                if not drafts or replied:
                    drafts.append(_Turn(stable_id(node.message_id)))
                    replied = False
                drafts[-1].add_user_text(node.text, node.at)
                drafts[-1].files.extend(node.files)
                continue
            if not drafts:
                self._stream.skip("assistant message before any prompt")
                continue
            replied = True
            self._assistant_node(drafts[-1], node)
        return drafts

    def _assistant_node(self, turn: _Turn, node: Node) -> None:
        turn.files.extend(node.files)
        if node.kind == "answer":
            previous = turn.completion
            if previous is not None:
                # ChatGPT splits one answer around tool calls: the earlier pieces stay, in order.
                turn.events.append(LiveEvent(type="assistant.message", at=previous.at,
                                             data={"text": previous.text}))
                self._stream.count("earlier assistant message kept as event")
            turn.complete(node.text, node.at)
        elif node.kind == "code":
            turn.add_step(node.name, "started", node.at, node.text)
            turn.pending_code = node
            self._stream.count("code run")
        elif node.kind == "output":
            code = turn.pending_code
            turn.pending_code = None
            turn.add_step(code.name if code else node.name, "failed" if node.failed
                          else "completed", node.at, node.text)
            turn.events.append(LiveEvent(type="panel.code", at=node.at, data={
                "code": code.text if code else "", "language": code.language if code
                else "python", "output": node.text, "status": "failed" if node.failed
                else "completed"}))
            self._stream.count("code panel")
        elif node.kind == "call":
            turn.add_step(node.name, "started", node.at, node.text)
            self._stream.count(f"tool call ({node.name})")
        else:
            turn.add_step(node.name, "completed", node.at, node.text)
            self._stream.count(f"tool message ({node.name})")

    def _host(self, turn: _Turn, where: str) -> None:
        """Attachments for the files the turn's messages name, with the bytes hosted as files
        of the turn when the export ships them."""
        used: set[str] = set()
        for n, ref in enumerate(turn.files):
            shipped = self._export.shipped(ref.file_id) if ref.file_id else None
            shipped_name, size = shipped if shipped else ("", None)
            name = _safe_name(ref.name or shipped_name or f"file-{n + 1}", n)
            while name in used:
                name = f"{n + 1}-{name}"
            used.add(name)
            mime = ref.mime if ref.mime != "application/octet-stream" else (
                mimetypes.guess_type(name)[0] or ref.mime)
            if size is not None and size <= MAX_HOSTED_BYTES:
                data = self._export.file_bytes(ref.file_id)
                turn.hosted_files.append(HostedFile(path=f"files/{name}", mime=mime,
                                                    content_b64=base64.b64encode(data).decode()))
                self._stream.count("file hosted from the export")
            elif size is not None:
                self._stream.skip("file too large to host")
            turn.attachments.append(Attachment(name=name, mime=mime,
                                               size=size if size is not None else ref.size))
        del where  # files missing from the export are normal (exports omit old uploads)


def _safe_name(name: str, index: int) -> str:
    """A file name fit for ``files/<name>``: its base name, with unusual characters replaced."""
    base = PurePosixPath(name.replace("\\", "/")).name
    cleaned = _UNSAFE_NAME.sub("_", base).strip(" .")
    return cleaned or f"file-{index + 1}"
