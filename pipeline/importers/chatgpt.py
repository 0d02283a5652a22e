"""Import a ChatGPT data export (``conversations.json``, its shards, or the export ``.zip``).

Each file is one JSON array of conversations; it is parsed with ijson one conversation at a
time, so memory is bounded by the largest conversation rather than by the export.

Each conversation is a tree of message nodes (``mapping``). Only the branch ending at
``current_node`` is imported: regenerated answers and edited prompts on other branches were not
what the user ended up seeing. Along that branch, consecutive user messages fold into one turn
(prompt, then follow-ups) whose id is the first user message's id. The visible assistant
messages of the turn are joined, in order, into its completion: ChatGPT splits one answer
around tool calls and at "Continue generating", and the completion is what search finds. A
message without ``create_time`` takes the time of its nearest neighbour on the branch. Code
interpreter runs become a started and a completed (or failed) step plus a ``panel.code`` event
(code, language, output) for replay; other tool calls and tool messages (browsing, file search)
become steps. A canvas document is a step plus an attachment holding its whole text (so it is
searchable). Uploaded and generated files the export ships are hosted as files of their turn,
and their attachments refer to them. See :mod:`pipeline.importers.chatgpt_nodes`.
"""

from __future__ import annotations

import base64
import mimetypes
import unicodedata
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import ijson

from lake.errors import RefError
from lake.records import Attachment, HostedFile, LiveEvent, TurnRecord
from lake.refs import file_ref, normalize_relative_path
from pipeline.importers.chatgpt_export import Export, Utf8Repair
from pipeline.importers.chatgpt_nodes import FileRef, Node, Skip, classify, epoch
from pipeline.importers.common import Identity, ImportStream, TurnDraft, stable_id
from pipeline.importers.text import DETAIL_CHARS, compact_json, one_line

# Files larger than this stay attachments without bytes (the lake's default limit is 50 MiB).
MAX_HOSTED_BYTES = 25 * 1024 * 1024
# What a file name cannot carry into a path on every system: separators, what Windows
# refuses, and "%" (a reader that percent-decodes would see another name). Control, format
# (bidi overrides, zero-width), private-use and unassigned characters, and line and
# paragraph separators go too (see _safe_name); letters of any script stay.
_UNSAFE_NAME_CHARS = frozenset('/\\:*?"<>|%')
_UNSAFE_NAME_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# File extensions of canvas document types (``type`` of canmore.create_textdoc).
_CANVAS_EXTENSIONS = {"document": ".md", "code/python": ".py", "code/javascript": ".js",
                      "code/typescript": ".ts", "code/react": ".jsx", "code/html": ".html"}
# The step between a filled-in message time and the known one it follows (or precedes).
_TICK = timedelta(microseconds=1)


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
        self.documents: list[Node] = []
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
        branch = self._branch(mapping, current, where)
        nodes = [m for node, at in zip(branch, _branch_times(branch, conversation), strict=True)
                 if (m := self._node(node, at, where)) is not None]
        drafts = self._fold(nodes)
        raw_title = conversation.get("title")
        if not isinstance(raw_title, str) or not raw_title.strip():
            raw_title = drafts[0].submissions[0].text if drafts else ""
        title = one_line(raw_title) or None
        conversation_id = stable_id(external)
        for draft in drafts:
            self._host(draft, conversation_id)
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

    def _node(self, node: dict[str, Any], at: datetime | None, where: str) -> Node | None:
        """The node's message classified, at ``at`` (see :func:`_branch_times`), or None
        (counted, or reported when malformed)."""
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
        if at is None:
            self._stream.problem(self._source, node_where, "message has no create_time, nor "
                                 "has any other message of the branch or the conversation",
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
            if turn.add_answer(node.text, node.at):
                self._stream.count("assistant message joined to the answer")
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
        elif node.kind == "document":
            # A canvas document is often the answer itself: the step only names it, and its
            # whole text becomes an attachment's (searchable) text rather than a clipped detail.
            turn.add_step(node.name, "started", node.at,
                          f"{node.title} ({node.language})" if node.language else node.title)
            turn.documents.append(node)
            self._stream.count("canvas document kept as attachment text")
        else:
            turn.add_step(node.name, "started" if node.kind == "call" else "completed",
                          node.at, node.text)
            self._stream.count(f"tool {'call' if node.kind == 'call' else 'message'} "
                               f"({node.name})")
            if len(node.text) > DETAIL_CHARS:
                # A step's detail is clipped (common.TurnDraft.add_step); say so, not silently.
                self._stream.count(f"tool detail clipped to {DETAIL_CHARS} characters")

    def _host(self, turn: _Turn, conversation_id: str) -> None:
        """Attachments for the files the turn's messages name, with the bytes hosted as files
        of the turn (and the attachment's ``ref`` naming them) when the export ships them;
        then one attachment per canvas document, holding its text.

        Files missing from the export are normal (exports omit old uploads): they stay
        attachments without bytes."""
        used: set[str] = set()

        def unique(name: str, n: int) -> str:
            while name in used:
                name = f"{n + 1}-{name}"
            used.add(name)
            return name

        for n, ref in enumerate(turn.files):
            shipped = self._export.shipped(ref.file_id) if ref.file_id else None
            shipped_name, size = shipped if shipped else ("", None)
            name = unique(_safe_name(ref.name or shipped_name or f"file-{n + 1}", n), n)
            mime = ref.mime if ref.mime != "application/octet-stream" else (
                mimetypes.guess_type(name)[0] or ref.mime)
            hosted_ref = None
            if size is not None and size <= MAX_HOSTED_BYTES:
                data = self._export.file_bytes(ref.file_id)
                turn.hosted_files.append(HostedFile(path=f"files/{name}", mime=mime,
                                                    content_b64=base64.b64encode(data).decode()))
                # The attachment names its bytes, so that pull and ref resolve find them.
                hosted_ref = file_ref(conversation_id, turn.turn_id, f"files/{name}")
                self._stream.count("file hosted from the export")
            elif size is not None:
                self._stream.skip("file too large to host")
            turn.attachments.append(Attachment(name=name, mime=mime, ref=hosted_ref,
                                               size=size if size is not None else ref.size))
        for n, document in enumerate(turn.documents, start=len(turn.files)):
            extension = _CANVAS_EXTENSIONS.get(document.language, ".txt")
            name = unique(_safe_name(document.title + extension, n), n)
            turn.attachments.append(Attachment(
                name=name, mime=mimetypes.guess_type(name)[0] or "text/plain",
                size=len(document.text.encode("utf-8")), text=document.text))


def _branch_times(branch: list[dict[str, Any]],
                  conversation: dict[str, Any]) -> list[datetime | None]:
    """The time of each node of the branch: its message's ``create_time``, else the nearest
    known time along the branch, so that turns keep the tree's order.

    A missing time follows the latest time before it on the branch (never the conversation's
    start, which would put a later turn first); nodes before any known time precede the first
    one. Each filled time is a microsecond from its neighbour, so that no two turns tie and
    their order (and ordinals) cannot fall to a tie-break. Only a branch without any time
    falls back to the conversation's ``create_time`` (or ``update_time``); None when it has
    neither either.
    """
    known = [epoch(node["message"].get("create_time"))
             if isinstance(node.get("message"), dict) else None for node in branch]
    times: list[datetime | None] = []
    latest: datetime | None = None
    for at in known:
        if at is None and latest is not None:
            at = latest + _TICK
        if at is not None:
            latest = at if latest is None else max(latest, at)
        times.append(at)
    first, anchor = next(((i, at) for i, at in enumerate(times) if at is not None),
                         (len(times), None))
    if anchor is None:
        start = epoch(conversation.get("create_time")) or epoch(conversation.get("update_time"))
        return [None if start is None else start + i * _TICK for i in range(len(branch))]
    return [anchor - (first - i) * _TICK for i in range(first)] + times[first:]


def _safe_name(name: str, index: int) -> str:
    """A file name fit for ``files/<name>``: its base name (NFC), with the characters that are
    unsafe in a path replaced by ``_``; ``file-<n>`` when nothing usable is left."""
    base = unicodedata.normalize("NFC", PurePosixPath(name.replace("\\", "/")).name)
    cleaned = "".join(
        "_" if ch in _UNSAFE_NAME_CHARS or unicodedata.category(ch) in _UNSAFE_NAME_CATEGORIES
        else ch for ch in base).strip(" .")
    try:
        # The lake's own check (length in bytes, "..", drive letters) has the last word.
        return normalize_relative_path(cleaned) if cleaned else f"file-{index + 1}"
    except RefError:
        return f"file-{index + 1}"
