from __future__ import annotations

import json
from pathlib import Path

from factories import make_record, rich_record, write_jsonl

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from lake.timelines import refresh_timelines, sql_conversations
from pipeline.ingest import Ingestor


def _timelines(store: LakeStore) -> dict[tuple[str, str], dict[str, object]]:
    rows = store.read(Table.TIMELINES).to_pylist()
    keyed = {(r["tenant"], r["conversation_id"]): r for r in rows}
    assert len(keyed) == len(rows), "one timeline row per conversation"
    return keyed


def test_a_refresh_mixing_known_and_new_conversations_keeps_one_row_each(
        settings: Settings, tmp_path: Path) -> None:
    first = [make_record(i, conversation="c-old") for i in range(2)]
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "a.jsonl", first)])
    more = ([make_record(i, conversation="c-old") for i in range(2, 4)]
            + [rich_record(i, conversation="c-new") for i in range(3)])
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "b.jsonl", more)])
    store = LakeStore(settings.lake)
    timelines = _timelines(store)
    assert set(timelines) == {("acme", "c-old"), ("acme", "c-new")}
    assert timelines[("acme", "c-old")]["turn_count"] == 4
    assert timelines[("acme", "c-old")]["last_turn_id"] == "t-0003"
    assert timelines[("acme", "c-new")]["turn_count"] == 3
    assert len(json.loads(str(timelines[("acme", "c-new")]["blocks"]))) > 3
    # Refreshing again (both conversations now known) replaces the rows with equal ones.
    assert refresh_timelines(store, [("acme", "c-old"), ("acme", "c-new")]) == 2
    again = _timelines(store)
    for key, row in timelines.items():
        assert {**again[key], "updated_at": None} == {**row, "updated_at": None}


def test_a_conversation_without_turn_logs_loses_its_timeline(settings: Settings,
                                                              tmp_path: Path) -> None:
    records = [make_record(0, conversation="c-1"), make_record(1, conversation="c-2")]
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "a.jsonl", records)])
    store = LakeStore(settings.lake)
    store.delete(Table.TURN_LOGS, sql_conversations([("acme", "c-1")]))
    written = refresh_timelines(store, [("acme", "c-1"), ("acme", "c-2"), ("acme", "c-3")])
    assert written == 1
    assert set(_timelines(store)) == {("acme", "c-2")}
