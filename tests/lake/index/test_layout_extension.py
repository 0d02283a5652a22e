"""A layout and row columns extended by one appended segment equal those computed afresh.

A live writer publishes a delta segment per recorded turn; a warm search service extends the
previous view's numbering and decoded columns by that segment instead of sorting and decoding
every row again. These are the pure functions behind it, checked against the full versions.
"""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from lake.index.partition import ROLE_ORDER, RowColumns
from lake.index.segments import SORT_KEY, SegmentLayout

EPOCH = datetime(2026, 3, 1, tzinfo=UTC)
# few values, so segments share users, conversations, turn ids and even whole keys
USERS = ["u-b", "u-a", "u-c", "u-aa", "ü-d"]
CONVERSATIONS = ["c-1", "c-0", "c-10", "c-2"]
TURNS = ["t-1", "t-0", "t-2"]
ROLE_NAMES = [*ROLE_ORDER, "unknown-role"]

row = st.fixed_dictionaries({
    "user_id": st.sampled_from(USERS), "conversation_id": st.sampled_from(CONVERSATIONS),
    "turn_id": st.sampled_from(TURNS), "role": st.sampled_from(ROLE_NAMES),
    "seq": st.integers(0, 3), "minute": st.integers(0, 10_000), "text": st.text(max_size=8)})
segment = st.lists(row, min_size=1, max_size=12)


def _sorted_table(rows: list[dict[str, object]], start: int) -> pa.Table:
    """A segment's rows as a full build writes them: sorted by the build's key."""
    frame = pl.DataFrame({
        "row_id": [f"r{start + i}" for i in range(len(rows))],
        "user_id": [r["user_id"] for r in rows],
        "conversation_id": [r["conversation_id"] for r in rows],
        "turn_id": [r["turn_id"] for r in rows],
        "role": [r["role"] for r in rows],
        "seq": pl.Series([r["seq"] for r in rows], dtype=pl.Int64),
        "turn_at": [EPOCH + timedelta(minutes=int(str(r["minute"]))) for r in rows],
        "expires_at": [EPOCH + timedelta(days=90, minutes=int(str(r["minute"])))
                       for r in rows],
        "text": [r["text"] for r in rows],
    }).with_columns(pl.col("role").replace_strict(ROLE_ORDER, default=99).alias("_role_order"))
    return frame.sort(SORT_KEY, maintain_order=True).drop("_role_order").to_arrow()


def _tables(segments: list[list[dict[str, object]]]) -> list[pa.Table]:
    tables, start = [], 0
    for rows in segments:
        tables.append(_sorted_table(rows, start))
        start += len(rows)
    return tables


def _grown(tables: list[pa.Table]) -> SegmentLayout:
    layout = SegmentLayout.of(tables[:1], ROLE_ORDER)
    for table in tables[1:]:
        extended = layout.extended(table, ROLE_ORDER)
        assert extended is not None
        layout = extended
    return layout


@given(st.lists(segment, min_size=2, max_size=5))
def test_an_extended_layout_numbers_rows_as_a_full_sort(
        segments: list[list[dict[str, object]]]) -> None:
    tables = _tables(segments)
    full, grown = SegmentLayout.of(tables, ROLE_ORDER), _grown(tables)
    assert grown.rows.equals(full.rows)
    for name in ("order", "inverse", "offsets"):
        np.testing.assert_array_equal(getattr(grown, name), getattr(full, name), err_msg=name)
    assert len(grown.globals_) == len(full.globals_)
    for mine, theirs in zip(grown.globals_, full.globals_, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    # the scope split of both agrees too (it is what every search uses)
    allowed = np.arange(0, int(full.offsets[-1]), 2, dtype=np.int64)
    for mine, theirs in zip(grown.split(allowed), full.split(allowed), strict=True):
        np.testing.assert_array_equal(mine, theirs)


@given(st.lists(segment, min_size=2, max_size=5))
def test_extended_columns_equal_columns_decoded_afresh(
        segments: list[list[dict[str, object]]]) -> None:
    tables = _tables(segments)
    columns, _ = _grown_columns(tables)
    fresh = RowColumns.from_rows(SegmentLayout.of(tables, ROLE_ORDER).rows)
    assert _decoded(columns) == _decoded(fresh)


def _grown_columns(tables: list[pa.Table]) -> tuple[RowColumns, SegmentLayout]:
    """Columns decoded from the first table, then extended by each further one."""
    layout = SegmentLayout.of(tables[:1], ROLE_ORDER)
    columns = RowColumns.from_rows(layout.rows)
    for table in tables[1:]:
        grown = layout.extended(table, ROLE_ORDER)
        assert grown is not None
        columns, layout = columns.extended(table, grown.globals_[-1]), grown
    return columns, layout


def _decoded(columns: RowColumns) -> dict[str, object]:
    """What a search can read from the columns, free of how codes and turns are numbered;
    and a check that the look-up structures agree with the codes."""
    docs = np.arange(columns.turn_numbers.size)
    out: dict[str, object] = {}
    for name, coded in columns.coded.items():
        assert coded.index == {v: i for i, v in enumerate(coded.values)}, name
        out[name] = [coded.values[c] for c in coded.codes.tolist()]
    assert columns.users is columns.coded["user_id"].values
    assert columns.user_index is columns.coded["user_id"].index
    assert columns.conversation_index is columns.coded["conversation_id"].index
    out["user_docs"] = {u: columns.docs_of_user(u).tolist() for u in columns.users}
    turns = columns.turn_first_docs.size
    assert sorted(set(columns.turn_numbers.tolist())) == list(range(turns))
    assert np.all(np.diff(columns.turn_keys) > 0) and columns.turn_keys.size == turns
    keys = (columns.conversation_codes.astype(np.int64) << 32) | columns.turn_codes
    found = columns.turn_key_numbers[np.searchsorted(columns.turn_keys, keys)]
    np.testing.assert_array_equal(found, columns.turn_numbers)
    first = columns.turn_first_docs[columns.turn_numbers]
    # a turn's first doc holds the turn and comes no later than any of its docs
    np.testing.assert_array_equal(columns.turn_numbers[first], columns.turn_numbers)
    assert np.all(first <= docs)
    out["turn_first_doc"] = first.tolist()
    out["turn_at_us"] = columns.turn_at_us.tolist()
    out["expires_us"] = columns.expires_us.tolist()
    return out


def test_a_segment_of_another_schema_is_not_merged_in_place() -> None:
    tables = _tables([[{"user_id": "u-a", "conversation_id": "c-0", "turn_id": "t-0",
                        "role": "completion", "seq": 0, "minute": 1, "text": "x"}]] * 2)
    other = tables[1].append_column("extra", pa.array([1]))
    assert SegmentLayout.of(tables[:1], ROLE_ORDER).extended(other, ROLE_ORDER) is None


def test_a_row_without_a_key_value_leaves_the_merge_to_the_full_sort() -> None:
    tables = _tables([[{"user_id": "u-a", "conversation_id": "c-0", "turn_id": "t-0",
                        "role": "completion", "seq": 0, "minute": 1, "text": "x"}]] * 2)
    seq = tables[1].schema.get_field_index("seq")
    missing = tables[1].set_column(seq, "seq", pa.array([None], pa.int64()))
    assert SegmentLayout.of(tables[:1], ROLE_ORDER).extended(missing, ROLE_ORDER) is None


@given(st.lists(segment, min_size=1, max_size=4))
def test_turn_neighbours_follow_turn_time_in_full_and_extended_columns(
        segments: list[list[dict[str, object]]]) -> None:
    # a conversation belongs to one user (the lake's rule), so name it after its user here
    tables = _tables([[{**r, "conversation_id": f"{r['user_id']}/{r['conversation_id']}"}
                       for r in rows] for rows in segments])
    # each extension carries the earlier neighbours and sorts the touched conversations again
    columns, layout = _grown_columns(tables)
    fresh = RowColumns.from_rows(SegmentLayout.of(tables, ROLE_ORDER).rows)
    assert _neighbours(columns) == _neighbours(fresh) == _plain_neighbours(layout.rows)


Key = tuple[str, str, str]


def _neighbours(columns: RowColumns) -> dict[Key, tuple[Key | None, Key | None]]:
    """Every turn's neighbours by name, asked in a shuffled order."""
    def name(turn: int) -> Key | None:
        if turn < 0:
            return None
        doc = int(columns.turn_first_docs[turn])
        return (columns.users[columns.user_codes[doc]],
                columns.conversations[columns.conversation_codes[doc]],
                columns.turn_names[columns.turn_codes[doc]])

    turns = np.random.default_rng(7).permutation(columns.turn_first_docs.size)
    before, after = columns.turn_neighbours(turns)
    return {name(int(t)): (name(int(b)), name(int(a)))  # type: ignore[misc]
            for t, b, a in zip(turns.tolist(), before.tolist(), after.tolist(), strict=True)}


def _plain_neighbours(rows: pa.Table) -> dict[Key, tuple[Key | None, Key | None]]:
    """The oracle: per conversation, its turns sorted by (first row's time, turn id)."""
    first: dict[Key, object] = {}
    for r in rows.to_pylist():
        first.setdefault((r["user_id"], r["conversation_id"], r["turn_id"]), r["turn_at"])
    by_conversation: dict[tuple[str, str], list[Key]] = {}
    for key in sorted(first, key=lambda k: (first[k], k[2])):
        by_conversation.setdefault(key[:2], []).append(key)
    out: dict[Key, tuple[Key | None, Key | None]] = {}
    for turns in by_conversation.values():
        for i, key in enumerate(turns):
            out[key] = (turns[i - 1] if i else None, turns[i + 1] if i + 1 < len(turns) else None)
    return out


def test_an_extension_by_no_rows_keeps_the_neighbours_it_carries() -> None:
    rows = [{"user_id": "u", "conversation_id": "u/c", "turn_id": f"t-{i}", "role": "prompt",
             "seq": 0, "minute": 4 - i, "text": "x"} for i in range(4)]  # later ids, earlier
    base, _ = _tables([rows, rows[:1]])
    columns = RowColumns.from_rows(SegmentLayout.of([base], ROLE_ORDER).rows)
    expected = _neighbours(columns)
    same = columns.extended(base.slice(0, 0), np.zeros(0, np.int64))
    # carried, not sorted again (the later ids have the earlier times)
    assert np.array_equal(same.neighbour_turns, columns.neighbour_turns)
    assert _neighbours(same) == expected == _plain_neighbours(base)


def test_extending_columns_while_another_thread_asks_for_neighbours() -> None:
    # A search on the old view works out its turns' neighbours while a search on the new view
    # extends it. (When the orders were a dict filled per conversation, iterating it as it grew
    # raised "dictionary changed size during iteration" in 17 of 20 rounds; the neighbours are
    # now published once, whole, and an extension reads them only after.)
    rows = [{"user_id": f"u-{i % 7}", "conversation_id": f"u-{i % 7}/c-{i}", "turn_id": "t-0",
             "role": "prompt", "seq": 0, "minute": i, "text": "x"} for i in range(3000)]
    base, added = _tables([rows, [{**rows[0], "turn_id": "t-1", "minute": 9000}]])
    layout = SegmentLayout.of([base], ROLE_ORDER)
    grown = layout.extended(added, ROLE_ORDER)
    assert grown is not None
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for _ in range(20):
            columns = RowColumns.from_rows(layout.rows)
            asker = threading.Thread(target=lambda c=columns: [
                c.turn_neighbours(np.array([t])) for t in range(c.turn_first_docs.size)])
            asker.start()
            while asker.is_alive():
                columns.extended(added, grown.globals_[-1])
            asker.join()
    finally:
        sys.setswitchinterval(interval)
