"""What each node of a ChatGPT conversation tree is: the user's words, a visible answer, the
code the assistant ran, a tool's output, or something to leave out (and why).

Code interpreter runs are two nodes: an assistant message to ``recipient: "python"`` with
content type ``code``, then a ``tool`` message from ``python`` with content type
``execution_output`` (its ``metadata.aggregate_result`` tells success and lists generated
images). Browsing, file search and other tools follow the same pattern with their own
recipient and content types (``tether_browsing_display``, ``tether_quote``, ``text``).
Canvas writes are assistant messages to ``canmore.create_textdoc`` (content type ``code``,
JSON text ``{"name", "type", "content"}``) or ``canmore.update_textdoc`` (``{"updates":
[{"pattern", "replacement"}]}``); they are documents, whose text is kept whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

NodeKind = Literal["user", "answer", "code", "output", "call", "tool", "document"]
TEXT_CONTENT = ("text", "multimodal_text")
_REASONING = ("thoughts", "reasoning_recap")
_CODE_TOOLS = ("python", "jupyter")
_ASSET_PARTS = ("image_asset_pointer", "audio_asset_pointer", "video_container_asset_pointer")
_CANVAS_WRITES = ("canmore.create_textdoc", "canmore.update_textdoc")


@dataclass(frozen=True)
class FileRef:
    """A file a message names: an upload (attachment) or a generated image."""

    file_id: str
    name: str
    mime: str
    size: int


@dataclass(frozen=True)
class Node:
    """One message of the imported branch, classified."""

    kind: NodeKind
    message_id: str
    at: datetime
    text: str
    name: str = ""  # the tool (recipient or author name) for code, call, output and tool
    language: str = ""  # a code run's language; a document's canvas type ("code/python")
    title: str = ""  # a document's name
    failed: bool = False
    files: tuple[FileRef, ...] = ()


@dataclass(frozen=True)
class Skip:
    """A message left out, and why (counted by reason)."""

    reason: str


def classify(message: dict[str, Any], role: str, at: datetime,
             message_id: str) -> Node | Skip:
    """The node a message is, or why it is skipped."""
    metadata = _dict(message.get("metadata"))
    content = _dict(message.get("content"))
    content_type = content.get("content_type")
    recipient = message.get("recipient", "all")
    recipient = recipient if isinstance(recipient, str) and recipient else "all"
    author_name = _dict(message.get("author")).get("name")
    author_name = author_name if isinstance(author_name, str) and author_name else "tool"
    if role == "system":
        return Skip("system message")
    if content_type == "user_editable_context":
        return Skip("custom instructions (user_editable_context)")
    if metadata.get("is_visually_hidden_from_conversation") is True:
        return Skip("hidden message")
    if content_type in _REASONING:
        return Skip(f"reasoning ({content_type})")
    if role == "user":
        if content_type not in TEXT_CONTENT:
            return Skip(f"unsupported user content type: {content_type}")
        text, files = parts_text(content.get("parts"))
        files = attachments(metadata.get("attachments")) + files
        return (Node("user", message_id, at, text, files=_unique(files)) if text or files
                else Skip("empty message"))
    if role == "assistant":
        return _assistant(content, content_type, recipient, at, message_id)
    if role == "tool":
        return _tool(content, content_type, metadata, author_name, at, message_id)
    return Skip(f"unsupported author role: {role}")


def _assistant(content: dict[str, Any], content_type: Any, recipient: str, at: datetime,
               message_id: str) -> Node | Skip:
    if recipient != "all":
        text = _content_text(content)
        if recipient in _CODE_TOOLS:
            language = content.get("language")
            language = language if isinstance(language, str) and language != "unknown" \
                else "python"
            return Node("code", message_id, at, text, name=recipient, language=language)
        document = _canvas(text) if recipient in _CANVAS_WRITES else None
        if document is not None:
            title, kind, body = document
            return Node("document", message_id, at, body, name=recipient, language=kind,
                        title=title)
        return Node("call", message_id, at, text, name=recipient)
    if content_type not in TEXT_CONTENT:
        return Skip(f"unsupported assistant content type: {content_type}")
    text, files = parts_text(content.get("parts"))
    return Node("answer", message_id, at, text, files=files) if text.strip() \
        else Skip("empty message")


def _tool(content: dict[str, Any], content_type: Any, metadata: dict[str, Any],
          name: str, at: datetime, message_id: str) -> Node | Skip:
    result = _dict(metadata.get("aggregate_result"))
    text = _content_text(content)
    _, files = parts_text(content.get("parts"))
    generated = tuple(
        FileRef(str(m["image_url"]), f"output-{i + 1}.png", "image/png", 0)
        for i, m in enumerate(_list(result.get("messages")))
        if isinstance(m, dict) and isinstance(m.get("image_url"), str))
    if content_type == "execution_output" or name in _CODE_TOOLS:
        status = result.get("status")
        failed = status not in (None, "success") or bool(result.get("in_kernel_exception"))
        return Node("output", message_id, at, text, name=name, failed=failed,
                    files=_unique(files + generated))
    if not text and not files:
        return Skip(f"empty tool message ({name})")
    return Node("tool", message_id, at, text, name=name, files=files)


def _canvas(text: str) -> tuple[str, str, str] | None:
    """A canvas write's document as (name, type, text), or None when the call is not the JSON
    a canvas write carries. An update's text is its replacements in order: with the pattern
    ``.*`` that is the whole new document, otherwise the rewritten passages."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict):
        return None
    body = call.get("content")
    if not isinstance(body, str):
        body = "\n\n".join(u["replacement"] for u in _list(call.get("updates"))
                            if isinstance(u, dict) and isinstance(u.get("replacement"), str))
    if not body.strip():
        return None
    name, kind = call.get("name"), call.get("type")
    return (name.strip() if isinstance(name, str) and name.strip() else "canvas",
            kind if isinstance(kind, str) else "", body)


def _content_text(content: dict[str, Any]) -> str:
    """A tool-facing content's readable text, whatever its content type."""
    for key in ("text", "result", "summary"):
        value = content.get(key)
        if isinstance(value, str) and value.strip():
            return value
    if content.get("content_type") == "tether_quote":
        return " ".join(str(content[k]) for k in ("title", "url") if content.get(k))
    text, _ = parts_text(content.get("parts"))
    return text


def parts_text(parts: Any) -> tuple[str, tuple[FileRef, ...]]:
    """The text of a message's parts (non-text parts as a short bracketed marker) and the
    files its asset pointers name."""
    texts: list[str] = []
    files: list[FileRef] = []
    for part in _list(parts):
        if isinstance(part, str):
            if part.strip():
                texts.append(part)
        elif isinstance(part, dict):
            kind = part.get("content_type")
            if isinstance(part.get("text"), str):
                texts.append(str(part["text"]))
            elif kind in _ASSET_PARTS:
                texts.append("[image]" if kind == "image_asset_pointer" else f"[{kind}]")
                pointer = part.get("asset_pointer")
                if isinstance(pointer, str) and pointer:
                    size = part.get("size_bytes")
                    files.append(FileRef(pointer, "", "image/png" if kind ==
                                         "image_asset_pointer" else "application/octet-stream",
                                         size if isinstance(size, int) and size >= 0 else 0))
            elif isinstance(kind, str):
                texts.append(f"[{kind}]")
    return "\n".join(texts), tuple(files)


def attachments(raw: Any) -> tuple[FileRef, ...]:
    """The uploads listed in a message's ``metadata.attachments``."""
    found = []
    for item in _list(raw):
        if not isinstance(item, dict):
            continue
        name, file_id = item.get("name"), item.get("id")
        mime = item.get("mime_type") or item.get("mimeType")
        size = item.get("size")
        found.append(FileRef(
            file_id if isinstance(file_id, str) else "",
            name if isinstance(name, str) else "",
            mime if isinstance(mime, str) and mime else "application/octet-stream",
            size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0))
    return tuple(found)


def _unique(files: tuple[FileRef, ...]) -> tuple[FileRef, ...]:
    """Files without repeats of an id (an upload is named by its attachment and its image part:
    the attachment, which has the name, wins)."""
    seen: set[str] = set()
    kept = []
    for f in files:
        key = f.file_id.rsplit("://", 1)[-1]
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(f)
    return tuple(kept)


def epoch(value: Any) -> datetime | None:
    """A ChatGPT timestamp (seconds since the epoch, fractional) as an aware datetime."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
