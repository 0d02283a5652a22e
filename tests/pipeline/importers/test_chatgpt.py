"""The ChatGPT importer: the hand-written export fixture (branches, folded prompts, answer
pieces), then shapes it lacks — messages without ``create_time``, canvas documents, answers
split at "Continue generating", uploads with non-ASCII names — in exports written here and
imported into real lakes under tmp_path."""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from lake.errors import RecordError
from lake.records import TurnRecord
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

EXPORT = Path(__file__).parent / "fixtures" / "chatgpt" / "conversations.json"
SOURDOUGH = "665d8f10-2b3c-8004-a1b2-c3d4e5f6a7b8"
REPORT = "6667a2b0-9c8d-8004-b1c2-d3e4f5a6b7c8"


def _import(path: Path = EXPORT) -> ImportResult:
    return iter_chatgpt(path, tenant="acme", user_id="u-ana").collect()


def _turns(result: ImportResult, conversation: str) -> list[TurnRecord]:
    return [r for r in result.records if r.conversation_id == conversation]


def test_only_the_branch_ending_at_current_node_is_imported() -> None:
    first, _ = _turns(_import(), SOURDOUGH)
    assert first.turn_id == "b7c8d9e0-2f1a-4b3c-9d4e-5f6a7b8c9d0e"
    assert first.completion.text.startswith("Feed it about 8 hours before you mix the dough")
    every_text = " ".join(r.to_json() for r in _import().records)
    assert "first answer, later regenerated" not in every_text


def test_consecutive_user_messages_fold_and_every_answer_piece_is_kept_in_order() -> None:
    _, second = _turns(_import(), SOURDOUGH)
    assert [(s.text, s.event_type, s.batch) for s in second.submissions] == [
        ("And if I keep it in the fridge during the week?", "prompt", 0),
        ("Also: should the weekly feed use rye or wheat flour?", "followup", 1),
    ]
    # The answer split around the browsing call is one completion, its pieces in order.
    assert second.completion.text == (
        "In the fridge, feed it once a week and take it out 12 hours before baking.\n\n"
        "Keep feeding it rye: it stays more active in the cold than wheat.")
    assert second.events == []
    assert [(s.name, s.status) for s in second.steps] == [("browser", "started"),
                                                          ("browser", "completed")]
    assert second.started_at.isoformat() == "2024-06-03T09:03:22.120000+00:00"
    assert second.ended_at.isoformat() == "2024-06-03T09:03:53.008000+00:00"
    assert (second.conversation_title, second.writer, second.app, second.agent) == (
        "Sourdough starter schedule", "minimal", "chatgpt", "chatgpt")


def test_attachments_and_image_parts() -> None:
    turn, _ = _turns(_import(), REPORT)
    assert turn.submissions[0].text == (
        "[image]\nSummarize the revenue chart and the attached report in three bullets.")
    assert [(a.name, a.mime, a.size) for a in turn.attachments] == [
        ("q2-revenue.png", "image/png", 48213), ("Q2 report.pdf", "application/pdf", 391022)]


def test_hidden_system_and_tool_messages_and_unanswered_turns_are_counted() -> None:
    result = _import()
    assert result.skipped == {"system message": 1,
                              "custom instructions (user_editable_context)": 1}
    assert result.counted == {"tool call (browser)": 1, "tool message (browser)": 1,
                              "assistant message joined to the answer": 1,
                              "turn without answer (interrupted)": 1}
    # A prompt the assistant never answered keeps the user's words.
    _, unanswered = _turns(result, REPORT)
    assert unanswered.submissions[0].text == "And how does that compare with Q3 guidance?"
    assert (unanswered.completion.text, unanswered.completion.status) == ("", "interrupted")


def test_malformed_conversations_and_nodes_are_problems_and_the_rest_continues() -> None:
    result = _import()
    assert [(p.location, p.reason) for p in result.problems] == [
        ("conversations[2] id=666ab120-0000-8004-9999-000000000000",
         "conversation has no mapping of nodes"),
        ("conversations[3] id=team workspace/666c 9d10 node=broken",
         "message is not a JSON object"),
    ]
    assert result.problems[1].raw == '"this node was damaged"'
    (regex_turn,) = [r for r in result.records if r.conversation_title == "Regex for ISO dates"]
    assert regex_turn.conversation_id.startswith("team_workspace_666c_9d10-")
    assert regex_turn.turn_id.startswith("q1-msg_user_1-")
    assert len(result.records) == 5


def test_truncated_export_keeps_the_conversations_before_the_cut(tmp_path: Path) -> None:
    raw = EXPORT.read_bytes()
    path = tmp_path / "conversations.json"
    path.write_bytes(raw[: raw.index(b'"title": "Quarterly report review"') + 200])
    result = _import(path)
    assert [r.conversation_id for r in result.records] == [SOURDOUGH, SOURDOUGH]
    (problem,) = result.problems
    assert problem.location == "conversations[1]"
    assert problem.reason.startswith("export is not valid JSON here")


def test_non_utf8_bytes_are_replaced_and_reported(tmp_path: Path) -> None:
    raw = EXPORT.read_bytes()
    damaged = raw.replace(b"Saturday morning?", b"Saturday \xff\xfe morning?")
    bad_at = damaged.index(b"\xff")
    path = tmp_path / "conversations.json"
    path.write_bytes(damaged)
    result = _import(path)
    assert len(result.records) == 5
    assert result.records[0].submissions[0].text.endswith("Saturday \ufffd\ufffd morning?")
    (problem,) = [p for p in result.problems if "UTF-8" in p.reason]
    assert problem.location == f"byte {bad_at}"


def test_zip_export_and_single_conversation_file(tmp_path: Path) -> None:
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(EXPORT, "conversations.json")
        zf.writestr("user.json", "{}")
    assert [r.to_json() for r in _import(archive).records] == [
        r.to_json() for r in _import().records]
    single = tmp_path / "one.json"
    single.write_text(json.dumps(json.loads(EXPORT.read_text())[1]))
    assert [r.conversation_id for r in _import(single).records] == [REPORT, REPORT]


def test_bad_inputs_raise_record_error(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="does not exist"):
        iter_chatgpt(tmp_path / "nope.json", tenant="acme", user_id="u-ana")
    empty_zip = tmp_path / "export.zip"
    with zipfile.ZipFile(empty_zip, "w") as zf:
        zf.writestr("user.json", "{}")
    with pytest.raises(RecordError, match=r"without conversations\.json"):
        iter_chatgpt(empty_zip, tenant="acme", user_id="u-ana")
    with pytest.raises(RecordError, match="user_id"):
        iter_chatgpt(EXPORT, tenant="acme", user_id="ana@example.com")


def test_importing_twice_into_a_lake_accepts_then_finds_duplicates(settings: Settings) -> None:
    report = Ingestor(settings).ingest_records(
        iter_chatgpt(EXPORT, tenant="acme", user_id="u-ana"))
    assert (report.accepted, report.duplicates, report.quarantined) == (5, 0, [])
    again = Ingestor(settings).ingest_records(
        iter_chatgpt(EXPORT, tenant="acme", user_id="u-ana"))
    assert (again.accepted, again.duplicates, again.quarantined) == (0, 5, [])


# -- shapes the hand-written fixture lacks (exports written here) -----------------------------

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
