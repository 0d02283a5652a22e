"""The comparison harness: fusion helpers, query sets, the COPY stream, and (when the optional
bench packages are installed) LanceDB and a real Postgres answering on a few rows."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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


def test_cpu_info_reads_model_and_flags() -> None:
    from bench.compare.pg_server import cpu_info

    text = ("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n\n"
            "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    cpu = cpu_info(text)
    assert cpu.model == "AMD EPYC" and "avx2" in cpu.flags and "avx512f" not in cpu.flags
    assert cpu.simd == ["sse2", "avx", "avx2", "fma"]
    assert cpu_info("").model == "unknown"


def test_report_names_failed_systems_and_the_cpu() -> None:
    from bench.compare.report import render

    lat = {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "mean_ms": 1.5, "n": 10}
    results = {
        "mode": "quick", "started": "2026-12-01T00:00:00",
        "machine": {"cores": 2, "cpu": "AMD EPYC", "cpu_simd": ["avx2", "fma"],
                    "memory_gib": 8, "python": "3.11", "os": "linux", "versions": {},
                    "load_avg_at_start": [1.0]},
        "postgres": {"pgvector": "baseline", "rejected": {"bundled": "crashes the server"}},
        "scale": {"rows": 10, "queries": 2, "rounds": 1, "build": {},
                  "systems": {"turnlake": {"arms": {"hybrid": lat}, "peak_rss_kib": 1024}},
                  "ratios": {}, "failed": {"postgres": "build: worker failed: signal 4"}},
    }
    text = render(results, [])
    assert "| postgres | build: worker failed: signal 4 |" in text
    assert "SIMD flags: avx2 fma" in text and "pgvector used: baseline" in text
    assert "refused here: bundled: crashes the server" in text
    assert "| turnlake | hybrid | 1.00 |" in text


def test_a_failing_system_leaves_the_section() -> None:
    from bench.compare.runner import Postgres, _section

    section = _section(Postgres(None, failed="start: no binaries"))
    assert section.systems == ["turnlake", "lancedb"]
    assert section.failed == {"postgres": "start: no binaries"}
    logged: list[str] = []
    section.fail("lancedb", "build", RuntimeError("disk full"), logged.append)
    assert section.systems == ["turnlake"] and section.failed["lancedb"] == "build: disk full"
    assert logged == ["lancedb failed at build: disk full"]


@pytest.fixture
def pg_root() -> Iterator[Path]:
    """A folder for Postgres data outside pytest's basetemp: every pytest session that starts
    (other runs share the machine) resets /tmp/pytest-of-<user> to 0700, which locks the
    unprivileged server account out of a data folder below it mid-run."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="turnlake-pg-test-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _vector_or_skip(root: Path) -> Any:
    """The pgvector build this CPU runs; skips when the bundled Postgres cannot start here
    or no installed pgvector build runs on this CPU (the reasons are in the skip message)."""
    pytest.importorskip("psycopg")
    from bench.compare.pg_server import ServerUnavailable, choose_vector

    try:
        vector, rejected = choose_vector(root)
    except ServerUnavailable as exc:
        pytest.skip(f"the bundled postgres cannot run here: {exc}")
    if vector is None:
        pytest.skip(f"no pgvector build runs on this CPU: {rejected}")
    return vector


@contextmanager
def _server(data: Path, **options: Any) -> Iterator[Any]:
    """running(), skipping the test when the server cannot start (a loaded box may be too
    slow, the bundle may be absent); failures after the start still fail."""
    from bench.compare.pg_server import ServerUnavailable, running

    cm = running(data, **options)
    try:
        server = cm.__enter__()
    except ServerUnavailable as exc:
        pytest.skip(f"the bundled postgres cannot run here: {exc}")
    try:
        yield server
    except BaseException as exc:
        if not cm.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        cm.__exit__(None, None, None)


@pytest.mark.slow
def test_a_server_that_will_not_stop_is_killed(pg_root: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal

    from bench.compare import pg_server

    monkeypatch.setattr(pg_server, "STOP_STEPS", (("fast", 2), ("immediate", 2)))
    with _server(pg_root / "pg") as server:
        os.kill(server.pid, signal.SIGSTOP)  # a stopped postmaster answers no pg_ctl stop
    state = Path(f"/proc/{server.pid}/stat")
    # gone, or a zombie waiting for init to reap it
    assert not state.exists() or state.read_text().split(")")[-1].split()[0] in ("Z", "X")
    assert not (pg_root / "pg").exists()


@pytest.mark.slow
def test_postgres_arms_answer_in_scope(pg_root: Path) -> None:
    from bench.compare.pg_sys import PgSystem, build

    vector = _vector_or_skip(pg_root)
    with _server(pg_root / "pg", vector=vector) as server:
        built = build(server.conninfo, _rows())
        assert built["index_bytes_each"]["rows_hnsw"] > 0
        system = PgSystem(server.conninfo, SearchSettings(k=3, as_of=NOW))
        try:
            found = _search_all(system, system.arms)
        finally:
            system.close()
    assert found["semantic"][0] == ("c-0", "t-0")
    assert found["lexical"][0] == ("c-0", "t-0")
    assert found["kd-lexical"] == [("c-0", "t-0")]
    assert all(t in {"t-0", "t-2", "t-4"} for turns in found.values() for _, t in turns)
    assert not (pg_root / "pg").exists()


def test_a_run_whose_sections_cannot_run_still_writes_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `python -m bench.compare --quick` alone: no LoCoMo data here, and a scale section that
    # stops; the report says both, in a sentence each, and is written
    import bench.compare.runner as runner
    import bench.locomo
    from bench.compare.report import write_report

    monkeypatch.setattr(bench.locomo, "LOCOMO", tmp_path / "absent" / "locomo10.json")
    monkeypatch.setattr(runner, "_start_postgres", lambda *a, **k: runner.Postgres(
        None, failed="start: not in this test"))

    def stops(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("disk full")

    monkeypatch.setattr(runner, "compare_scale", stops)
    results = runner.run("quick", rounds=1, n_queries=20, variants=["minimal"],
                         work_dir=tmp_path / "work")
    assert results["scale_skipped"] == "scale section stopped: RuntimeError: disk full"
    assert results["locomo_skipped"].startswith("LoCoMo section skipped: no LoCoMo data at ")
    text = write_report(results, tmp_path).read_text()
    assert "scale section stopped: RuntimeError: disk full." in text
    assert "LoCoMo section skipped: no LoCoMo data at" in text
