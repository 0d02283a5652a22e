from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
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


def test_timelines_from_a_batch_s_own_turn_logs_equal_a_refresh_from_the_table(
        settings: Settings, tmp_path: Path) -> None:
    # Batches of 4: c-long spans three batches (known after the first), the others are new
    # in the batch that holds all of their turns.
    records = ([make_record(i, conversation="c-long") for i in range(5)]
               + [rich_record(i, conversation="c-rich") for i in range(5, 8)]
               + [make_record(i, conversation="c-long") for i in range(8, 10)]
               + [make_record(i, conversation=f"c-{i}") for i in range(10, 13)])
    Ingestor(settings.with_(ingest_batch_turns=4)).ingest_paths(
        [write_jsonl(tmp_path / "a.jsonl", records)])
    store = LakeStore(settings.lake)
    ingested = _timelines(store)
    assert ingested[("acme", "c-long")]["turn_count"] == 7
    assert ingested[("acme", "c-rich")]["turn_count"] == 3
    refresh_timelines(store, list(ingested))
    refreshed = _timelines(store)
    assert set(refreshed) == set(ingested)
    for key, row in ingested.items():
        assert {**refreshed[key], "updated_at": None} == {**row, "updated_at": None}


def test_complete_turn_logs_given_to_a_refresh_replace_the_table_scan(
        settings: Settings, tmp_path: Path) -> None:
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "a.jsonl", [
        make_record(0, conversation="c-1"), rich_record(1, conversation="c-2")])])
    store = LakeStore(settings.lake)
    before = _timelines(store)
    logs = store.read(Table.TURN_LOGS)
    c2 = logs.filter(pc.equal(logs["conversation_id"], "c-2"))
    # Only what was asked for is written, even when ``complete`` holds more.
    assert refresh_timelines(store, [("acme", "c-1")], complete=c2) == 1
    # What ``complete`` holds is used instead of the table: an edited title shows.
    edited = c2.set_column(c2.schema.get_field_index("title"), "title",
                           pa.array(["edited"] * c2.num_rows, pa.string()))
    assert refresh_timelines(store, [("acme", "c-1"), ("acme", "c-2")], complete=edited) == 2
    after = _timelines(store)
    assert after[("acme", "c-2")]["title"] == "edited"
    assert {**after[("acme", "c-1")], "updated_at": None} == {
        **before[("acme", "c-1")], "updated_at": None}
