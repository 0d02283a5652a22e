"""The ChatGPT importer on shapes the hand-written fixtures lack: messages without
``create_time``, canvas documents, answers split at "Continue generating", and uploads with
non-ASCII names (exports written here, imported into real lakes under tmp_path)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from lake.search.access import Principal
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from lake.workspace import WorkspacePuller
from pipeline.importers import ImportResult, iter_chatgpt
from pipeline.importers.chatgpt import _safe_name
from pipeline.ingest import Ingestor

T0 = 1735722000.0  # 2025-01-01T09:00:00Z
AS_OF = datetime(2025, 2, 1, tzinfo=UTC)
ANA = Principal(tenant="acme", user_id="u-ana")
DOCUMENT = "# Lighthouses\n\n" + " ".join(
    f"Paragraph {i} about the keeper of the lighthouse." for i in range(60)
) + " The final line mentions the albatross."


def _message(node_id: str, role: str, at: float | None, parts: list[Any] | None = None, *,
             content: dict[str, Any] | None = None, recipient: str = "all",
             name: str | None = None, metadata: dict[str, Any] | None = None,
             end_turn: bool | None = None) -> dict[str, Any]:
    return {"id": node_id, "author": {"role": role, "name": name}, "create_time": at,
            "content": content or {"content_type": "text", "parts": parts},
            "end_turn": end_turn, "metadata": metadata or {}, "recipient": recipient}


def _conversation(conversation_id: str, messages: list[dict[str, Any]], *,
                  create_time: float | None = T0) -> dict[str, Any]:
    """A conversation whose messages form one chain under a message-less root."""
    ids = ["root"] + [m["id"] for m in messages]
    mapping: dict[str, Any] = {"root": {"message": None, "parent": None, "children": ids[1:2]}}
    for n, message in enumerate(messages, start=1):
        mapping[message["id"]] = {"message": message, "parent": ids[n - 1],
                                  "children": ids[n + 1:n + 2]}
    return {"id": conversation_id, "title": conversation_id, "create_time": create_time,
            "mapping": mapping, "current_node": ids[-1]}


def _write(folder: Path, *conversations: dict[str, Any]) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "conversations.json"
    path.write_text(json.dumps(list(conversations), ensure_ascii=False), encoding="utf-8")
    return path


def _import(path: Path) -> ImportResult:
    return iter_chatgpt(path, tenant="acme", user_id="u-ana").collect()


def _ingest(settings: Settings, path: Path) -> LakeStore:
    report = Ingestor(settings).ingest_records(iter_chatgpt(path, tenant="acme",
                                                            user_id="u-ana"))
    assert report.quarantined == []
    return LakeStore(settings.lake)


def _rows(store: LakeStore, role: str) -> list[tuple[str, str]]:
    rows = store.read(Table.CONTENT_ROWS, columns=["turn_id", "text"],
                      filter=ds.field("role") == role).to_pylist()
    return sorted((r["turn_id"], r["text"]) for r in rows)


def test_a_user_message_without_time_keeps_its_place_in_the_tree(settings: Settings,
                                                                 tmp_path: Path) -> None:
    path = _write(tmp_path / "export", _conversation("c-grains", [
        _message("u1", "user", T0 + 10, ["How do I cook quinoa?"]),
        _message("a1", "assistant", T0 + 30, ["Rinse it, then simmer 15 minutes."]),
        _message("u2", "user", None, ["And couscous?"]),
        _message("a2", "assistant", T0 + 60, ["Pour boiling water over it."]),
    ]))
    store = _ingest(settings, path)
    turns = TurnCatalog(store).turns(ANA, "c-grains", as_of=AS_OF)
    # Not the conversation's start (T0), which made the second turn the first.
    assert [(t.ordinal, t.turn_id) for t in turns] == [(1, "u1"), (2, "u2")]
    start = datetime.fromtimestamp(T0, UTC)
    assert turns[1].started_at == start + timedelta(seconds=30, microseconds=1)


def test_an_answer_without_time_in_a_conversation_without_time_is_kept(
        tmp_path: Path) -> None:
    result = _import(_write(tmp_path / "export", _conversation("c-axolotl", [
        _message("u0", "user", None, ["Hello"]),
        _message("a0", "assistant", None, ["Hi!"]),
        _message("x1", "user", T0, ["Tell me about the axolotl"]),
        _message("y1", "assistant", None, ["Axolotls regrow limbs."]),
    ], create_time=None)))
    assert result.problems == []
    first, second = result.records
    start = datetime.fromtimestamp(T0, UTC)
    # Before the first known time, nodes precede it; after it, they follow the latest one.
    assert (first.started_at, first.ended_at) == (start - timedelta(microseconds=2),
                                                  start - timedelta(microseconds=1))
    assert (second.completion.text, second.completion.status) == (
        "Axolotls regrow limbs.", "completed")
    assert second.ended_at == start + timedelta(microseconds=1)


def test_a_canvas_document_is_kept_whole_and_searchable(settings: Settings,
                                                        tmp_path: Path) -> None:
    create = json.dumps({"name": "lighthouse_essay", "type": "document", "content": DOCUMENT})
    update = json.dumps({"updates": [{"pattern": ".*", "multiple": True,
                                      "replacement": DOCUMENT + " And a petrel."}]})
    path = _write(tmp_path / "export", _conversation("c-canvas", [
        _message("u1", "user", T0 + 1, ["Write an essay about lighthouses in canvas"]),
        _message("c1", "assistant", T0 + 2, content={"content_type": "code",
                                                     "language": "json", "text": create},
                 recipient="canmore.create_textdoc"),
        _message("t1", "tool", T0 + 3, ["Successfully created text document"],
                 name="canmore.create_textdoc"),
        _message("c2", "assistant", T0 + 4, content={"content_type": "code",
                                                     "language": "json", "text": update},
                 recipient="canmore.update_textdoc"),
        _message("a1", "assistant", T0 + 5, ["I've drafted the essay in the canvas."]),
    ]))
    (turn,) = _import(path).records
    assert [(a.name, a.mime, a.size, a.text) for a in turn.attachments] == [
        ("lighthouse_essay.md", "text/markdown", len(DOCUMENT), DOCUMENT),
        ("canvas.txt", "text/plain", len(DOCUMENT) + 14, DOCUMENT + " And a petrel.")]
    # The steps name the documents instead of holding a clipped copy of them.
    assert [(s.name, s.detail) for s in turn.steps] == [
        ("canmore.create_textdoc", "lighthouse_essay (document)"),
        ("canmore.create_textdoc", "Successfully created text document"),
        ("canmore.update_textdoc", "canvas")]
    store = _ingest(settings, path)
    assert [text.endswith("albatross.") for _, text in _rows(store, "attachment")] == [
        True, False]


def test_a_long_tool_detail_clip_is_counted(tmp_path: Path) -> None:
    result = _import(_write(tmp_path / "export", _conversation("c-browse", [
        _message("u1", "user", T0, ["Look it up"]),
        _message("t1", "tool", T0 + 1, ["x" * 600], name="browser"),
        _message("a1", "assistant", T0 + 2, ["Found it."]),
    ])))
    assert result.counted["tool detail clipped to 500 characters"] == 1


def test_every_piece_of_a_split_answer_is_in_the_searchable_completion(
        settings: Settings, tmp_path: Path) -> None:
    path = _write(tmp_path / "export", _conversation("c-heron", [
        _message("u1", "user", T0, ["What is in this photo?"]),
        _message("a1", "assistant", T0 + 10, ["It is a grey heron standing in water."],
                 end_turn=False),
        _message("a2", "assistant", T0 + 15, ["Herons hunt fish by waiting motionless."],
                 end_turn=True),
    ]))
    store = _ingest(settings, path)
    assert _rows(store, "assistant") == [("u1", "It is a grey heron standing in water.\n\n"
                                                "Herons hunt fish by waiting motionless.")]


def test_a_hosted_upload_keeps_its_unicode_name_and_its_attachment_names_the_bytes(
        settings: Settings, tmp_path: Path) -> None:
    upload = {"id": "file-AbC123", "name": "héron photo.png", "size": 5,
              "mime_type": "image/png"}
    path = _write(tmp_path / "export", _conversation("c-photo", [
        _message("u1", "user", T0, ["What bird is this?"], metadata={"attachments": [upload]}),
        _message("a1", "assistant", T0 + 1, ["A grey heron."]),
    ]))
    (path.parent / "file-AbC123-héron photo.png").write_bytes(b"\x89PNG!")
    (turn,) = _import(path).records
    assert [h.path for h in turn.hosted_files] == ["files/héron photo.png"]
    assert [(a.name, a.ref) for a in turn.attachments] == [
        ("héron photo.png", "conv:fi:conv_c-photo.turn_u1.files/héron photo.png")]
    store = _ingest(settings, path)
    report = WorkspacePuller(store).pull(ANA, ["c-photo/u1"], tmp_path / "work", as_of=AS_OF)
    assert [(i.status, i.kind, i.path) for i in report.items] == [
        ("pulled", "file", "files/héron photo.png"),
        ("pulled", "attachment", "user.attachments/héron photo.png")]
    turn_view = TurnMaterializer(store).turn(ANA, "c-photo", "u1", as_of=AS_OF)
    assert [f.path for f in turn_view.files] == ["files/héron photo.png"]


def test_file_names_keep_letters_of_any_script_and_lose_what_is_unsafe() -> None:
    assert _safe_name("Ünïcødé 報告.pdf", 0) == "Ünïcødé 報告.pdf"
    assert _safe_name("C:\\Users\\ana\\report.pdf", 0) == "report.pdf"
    assert _safe_name("bad\u202ename:50%.txt", 0) == "bad_name_50_.txt"
    assert _safe_name("e\u0301t\u00e9.txt", 0) == "\u00e9t\u00e9.txt"  # NFC
    assert _safe_name("a\nb\u2028c.txt", 0) == "a_b_c.txt"
    assert _safe_name("..", 2) == "file-3"
    assert _safe_name("é" * 200 + ".txt", 0) == "file-1"  # over 255 bytes in UTF-8
