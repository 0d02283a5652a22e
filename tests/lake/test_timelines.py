from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import TURN_LOGS, Table
from lake.timelines import (
    TIMELINE_SOURCE_COLUMNS,
    TimelineUpdate,
    appended_timelines,
    compute_timelines,
    refresh_timelines,
    sql_conversations,
)
from pipeline.ingest import Ingestor
from pipeline.live import LiveWriter
from tests.factories import make_record, rich_record, write_jsonl


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


def test_writing_an_update_leaves_it_as_it_was_given(settings: Settings,
                                                      tmp_path: Path) -> None:
    """An update is a value: writing it narrows what it was given to a new set, so the same
    update written again (or read by its caller) still names every conversation it had."""
    records = [make_record(0, conversation="c-1"), make_record(1, conversation="c-2")]
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "a.jsonl", records)])
    store = LakeStore(settings.lake)
    computed = compute_timelines(store, [("acme", "c-1")])
    present = {("acme", "c-1"), ("acme", "c-2")}  # a caller's set: not changed either
    update = TimelineUpdate(computed.rows, computed.live, computed.gone,
                            present)  # type: ignore[arg-type]
    assert update.write(store) == update.write(store) == 1
    assert update.present == present == {("acme", "c-1"), ("acme", "c-2")}
    assert update.live == {("acme", "c-1")}
    assert set(_timelines(store)) == {("acme", "c-1"), ("acme", "c-2")}


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


_T0 = datetime(2026, 5, 1, tzinfo=UTC)
# A turn's part of a timeline: (minutes after _T0, title, blocks, minutes it lasted, expiry day)
_turn = st.tuples(st.integers(0, 20), st.sampled_from([None, "", "Budget", "Q3 plan"]),
                  st.sampled_from(["[]", '[{"k": 1}]', '[{"k": 2}, {"k": 3}]']),
                  st.integers(0, 30), st.one_of(st.none(), st.integers(0, 400)))


_Turn = tuple[int, str | None, str, int, int | None]


def _logs(turns: list[tuple[str, int, _Turn]]) -> pa.Table:
    """TurnLogs (the timeline's source columns) of (conversation, turn number, turn) triples."""
    rows = []
    for conversation, number, (minute, title, blocks, lasted, expiry) in turns:
        start = _T0 + timedelta(minutes=minute)
        rows.append({
            "tenant": "acme", "conversation_id": conversation, "turn_id": f"t-{number:03d}",
            "app": "desk", "agent": f"agent-{number % 2}", "user_id": "u-1", "title": title,
            "started_at": start, "ended_at": start + timedelta(minutes=lasted), "blocks": blocks,
            "expires_at": None if expiry is None else _T0 + timedelta(days=expiry)})
    return pa.Table.from_pylist(
        rows, pa.schema([TURN_LOGS.field(c) for c in TIMELINE_SOURCE_COLUMNS]))


def _rows(store: LakeStore, logs: pa.Table) -> dict[tuple[str, str], dict[str, object]]:
    pairs = set(zip(logs["tenant"].to_pylist(), logs["conversation_id"].to_pylist(),
                    strict=True))
    rows = compute_timelines(store, pairs, complete=logs).rows.to_pylist()
    return {(r["tenant"], r["conversation_id"]): {**r, "updated_at": None} for r in rows}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(_turn, min_size=1, max_size=6),
                          st.lists(_turn, min_size=1, max_size=4)), min_size=1, max_size=4))
def test_a_timeline_grown_from_its_stored_row_equals_one_recomputed_from_every_turn(
        tmp_path_factory: pytest.TempPathFactory,
        conversations: list[tuple[list[_Turn], list[_Turn]]]) -> None:
    store = LakeStore(tmp_path_factory.mktemp("lake"))
    before: list[tuple[str, int, _Turn]] = []
    after: list[tuple[str, int, _Turn]] = []
    for c, (old, new) in enumerate(conversations):
        last = max(turn[0] for turn in old)
        before += [(f"c-{c}", n, turn) for n, turn in enumerate(old)]
        # The new turns start after every stored one (later minute, or the same minute and a
        # later turn id), as a live host's next turns do.
        after += [(f"c-{c}", len(old) + n, (last + minute, title, blocks, lasted, expiry))
                  for n, (minute, title, blocks, lasted, expiry) in enumerate(new)]
    stored = compute_timelines(store, {("acme", f"c-{c}") for c in range(len(conversations))},
                               complete=_logs(before)).rows
    grown = appended_timelines(stored, _logs(after))
    expected = _rows(store, pa.concat_tables([_logs(before), _logs(after)]))
    got = {(r["tenant"], r["conversation_id"]): {**r, "updated_at": None}
           for r in grown.to_pylist()}
    assert got == expected


def test_live_batches_grow_timelines_and_a_late_turn_recomputes_them(
        settings: Settings) -> None:
    writer = LiveWriter(settings, embed=False)
    writer.ingest([make_record(i, conversation="c-1") for i in range(0, 3)]
                  + [rich_record(3, conversation="c-2")])
    # c-1 grows from its stored row; c-2 gets a turn that started before its stored one, so
    # its timeline is recomputed; c-3 is new.
    writer.ingest([make_record(i, conversation="c-1", conversation_title="Renamed")
                   for i in range(3, 5)]
                  + [make_record(1, conversation="c-2")]
                  + [make_record(9, conversation="c-3")])
    writer.ingest([make_record(5, conversation="c-1", conversation_title="")])
    store = LakeStore(settings.lake)
    ingested = _timelines(store)
    assert ingested[("acme", "c-1")]["turn_count"] == 6
    assert ingested[("acme", "c-1")]["title"] == "Renamed"
    assert ingested[("acme", "c-2")]["last_turn_id"] == "t-0003"
    refresh_timelines(store, list(ingested))
    refreshed = _timelines(store)
    assert set(refreshed) == set(ingested) == {("acme", "c-1"), ("acme", "c-2"), ("acme", "c-3")}
    for key, row in ingested.items():
        assert {**refreshed[key], "updated_at": None} == {**row, "updated_at": None}


def test_a_stored_timeline_that_miscounts_its_turns_is_recomputed_not_grown(
        settings: Settings) -> None:
    writer = LiveWriter(settings, embed=False)
    writer.ingest([make_record(i, conversation="c-1") for i in range(3)])
    store = LakeStore(settings.lake)
    # A timeline row left behind by something other than the writer: it counts one turn.
    row = store.read(Table.TIMELINES)
    store.replace_where(Table.TIMELINES, row.set_column(
        row.schema.get_field_index("turn_count"), "turn_count", pa.array([1], pa.int32())),
        sql_conversations([("acme", "c-1")]))
    writer.ingest([make_record(3, conversation="c-1")])
    assert _timelines(store)[("acme", "c-1")]["turn_count"] == 4
