"""A partition's rows and their decoded columns: order, per-user doc ids, role masks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.index.manifest import local_build
from lake.index.partition import (
    CONTENT_COLUMNS,
    LOG_COLUMNS,
    PartitionIndex,
    joined_rows,
    live_rows,
    running_utf8_sizes,
)
from lake.index.status import partition_statuses
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.jobs import run_ingest
from tests.factories import make_record, rich_record, write_jsonl


@pytest.fixture
def part(hashing_settings: Settings, tmp_path: Path) -> PartitionIndex:
    # three users whose turns arrive interleaved and whose conversation ids sort interleaved,
    # so neither input order nor conversation order is user order
    records = []
    for turn in range(12):
        user = ("u-cy", "u-ana", "u-ben")[turn % 3]
        maker = rich_record if turn % 4 == 0 else make_record
        records.append(maker(turn, user=user, conversation=f"c-{turn % 4}{user}"))
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(hashing_settings.lake)
    (status,) = partition_statuses(store).values()
    assert status.manifest is not None
    return PartitionIndex(local_build(store.root, status.manifest), status.manifest)


def test_rows_of_a_user_and_of_a_turn_are_contiguous(part: PartitionIndex) -> None:
    users = part.rows.column("user_id").to_pylist()
    turns = list(zip(part.rows.column("conversation_id").to_pylist(),
                     part.rows.column("turn_id").to_pylist(), strict=True))
    assert users == sorted(users)
    for values in (users, turns):
        runs = [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]
        assert len(runs) == len(set(values))  # each value forms one run


def test_docs_of_user_are_exactly_that_users_rows(part: PartitionIndex) -> None:
    cols = part.columns
    users = np.array(part.rows.column("user_id").to_pylist())
    for user in ("u-ana", "u-ben", "u-cy"):
        docs = cols.docs_of_user(user)
        assert docs.dtype == np.int64
        assert docs.tolist() == np.flatnonzero(users == user).tolist()
    assert cols.docs_of_user("u-nobody").size == 0


def test_role_mask(part: PartitionIndex) -> None:
    cols = part.columns
    assert cols.role_mask(cols.roles) is None
    mask = cols.role_mask(["user"])
    assert mask is not None
    assert [r for r, ok in zip(cols.roles, mask.tolist(), strict=True) if ok] == ["user"]
    assert not cols.role_mask([]).any()  # type: ignore[union-attr]


def test_visible_docs_follow_expiry_between_calls(part: PartitionIndex) -> None:
    # a tenant scope's answer is kept until the next of its rows expires: over a walk of
    # as-of times, forwards and back, with rows expiring in between, every answer must equal
    # the filters applied afresh
    rng = np.random.default_rng(3)
    base = part.columns
    n = base.expires_us.size
    cols = dataclasses.replace(base, expires_us=rng.integers(0, 40, n).astype(np.int64))
    users = np.array(part.rows.column("user_id").to_pylist())
    conversations = np.array(part.rows.column("conversation_id").to_pylist())
    roles = np.array(part.rows.column("role").to_pylist())
    times = cols.turn_at_us
    filters = [dict(user_id=None, conversation_id=None, roles=list(base.roles)),
               dict(user_id=None, conversation_id=None, roles=["user"]),
               dict(user_id=None, conversation_id=str(conversations[0]), roles=list(base.roles)),
               dict(user_id="u-ana", conversation_id=None, roles=["assistant", "user"]),
               dict(user_id=None, conversation_id="c-nowhere", roles=list(base.roles))]
    window = (int(times.min()) + 1, int(times.max()))
    for as_of in [0, 3, 3, 10, 5, 39, 40, 12, 12, 25]:
        for f in filters:
            for since, until in [(None, None), window]:
                want = cols.expires_us > as_of
                if f["user_id"] is not None:
                    want &= users == f["user_id"]
                if f["conversation_id"] is not None:
                    want &= conversations == f["conversation_id"]
                want &= np.isin(roles, f["roles"])
                if since is not None:
                    want &= (times >= since) & (times < until)
                got = cols.visible_docs(**f, since_us=since, until_us=until,  # type: ignore[arg-type]
                                        as_of_us=as_of)
                assert got.dtype == np.int64
                assert got.tolist() == np.flatnonzero(want).tolist(), (as_of, f, since)


def test_turn_docs_are_each_turns_run_of_docs(part: PartitionIndex) -> None:
    cols = part.columns
    turns = np.unique(cols.turn_numbers)
    starts, ends = cols.turn_docs(turns)
    for turn, start, end in zip(turns.tolist(), starts.tolist(), ends.tolist(), strict=True):
        assert np.flatnonzero(cols.turn_numbers == turn).tolist() == list(range(start, end))


def test_vectors_of_docs_are_the_stored_ones(part: PartitionIndex) -> None:
    semantic = part.semantic
    assert semantic is not None
    every = np.arange(part.rows.num_rows, dtype=np.int64)
    found, vectors = semantic.vectors(every)
    assert found.size == vectors.shape[0] > 0
    # a stored row is a unit row rounded to float16: within 5e-4 of unit length
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=5e-4)
    query = vectors[0] / np.linalg.norm(vectors[0])  # as a search takes it
    scores = dict(semantic.search(query, limit=part.rows.num_rows))
    assert sorted(scores) == found.tolist()  # exactly the docs with a vector
    for doc, vector in zip(found.tolist(), vectors, strict=True):
        assert float(vector @ query) == pytest.approx(scores[doc], abs=1e-5)
    some, _ = semantic.vectors(found[1::2])
    assert some.tolist() == found[1::2].tolist()
    assert semantic.vectors(np.zeros(0, np.int64))[1].shape == (0, semantic.dim)


def test_a_build_records_where_its_time_went(part: PartitionIndex) -> None:
    seconds = part.manifest.seconds_by_kind
    assert set(seconds) == {"read", "rows", "semantic", "lexical", "trigram"}
    assert all(s >= 0 for s in seconds.values())
    # the parts are timed one after another within the build
    assert sum(seconds.values()) <= part.manifest.build_seconds


def test_text_bytes_before_are_the_running_utf8_sizes_of_the_texts(
        hashing_settings: Settings, tmp_path: Path) -> None:
    records = [make_record(t, prompt=p, answer=a) for t, (p, a) in enumerate([
        ("Déploiement échoué", "délai dépassé après 30 s 🚀"),
        ("日本語のテキスト", "ok"), ("plain words", "more plain words")])]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(hashing_settings.lake)
    (status,) = partition_statuses(store).values()
    assert status.manifest is not None
    part = PartitionIndex(local_build(store.root, status.manifest), status.manifest)
    sizes = [len((t or "").encode()) for t in part.rows.column("text").to_pylist()]
    assert part.text_bytes_before.tolist() == [0, *np.cumsum(sizes).tolist()]
    starts, ends = part.columns.turn_docs(np.unique(part.columns.turn_numbers))
    before = part.text_bytes_before
    assert (before[ends] - before[starts]).sum() == sum(sizes)


@given(st.lists(st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=6), max_size=4),
       st.integers(0, 3), st.sampled_from([pa.string(), pa.large_string(), pa.string_view()]))
def test_running_utf8_sizes_read_sliced_large_and_view_chunks(
        chunks: list[list[str | None]], cut: int, kind: pa.DataType) -> None:
    # a chunk may be a slice of a longer array: its offsets then start past zero
    arrays = [pa.array(["skipped"] * cut + c, kind).slice(cut) for c in chunks]
    column = pa.chunked_array(arrays, kind)
    texts = [t for c in chunks for t in c]
    expected = np.cumsum([0] + [len((t or "").encode("utf-8", "surrogatepass")) for t in texts])
    assert running_utf8_sizes(column).tolist() == expected.tolist()


def test_a_null_whose_offsets_span_bytes_counts_nothing() -> None:
    # valid, null, valid: the null's offsets (3 -> 7) cover bytes another writer left there
    validity = pa.py_buffer(bytes([0b101]))
    offsets = pa.py_buffer(np.array([0, 3, 7, 9], np.int32).tobytes())
    texts = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, pa.py_buffer(b"abcdefghi")])
    assert texts.to_pylist() == ["abc", None, "hi"]
    assert running_utf8_sizes(pa.chunked_array([texts])).tolist() == [0, 3, 3, 5]


def test_live_rows_read_from_a_partitions_files_equal_a_filtered_scan(
        hashing_settings: Settings, tmp_path: Path) -> None:
    # two tenants, then an append and a replaced turn, so each partition's rows sit in
    # several files and the table holds the other partition's files around them
    first = [make_record(turn, tenant=tenant, conversation=f"c-{tenant}-{turn % 2}")
             for tenant in ("acme", "globex") for turn in range(6)]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "a.jsonl", first)])
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "b.jsonl", [
        make_record(7, tenant="acme", conversation="c-acme-0", prompt="appended later"),
        make_record(8, tenant="globex", conversation="c-globex-1")])])
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "c.jsonl", [
        make_record(1, tenant="acme", conversation="c-acme-1", prompt="replaced text")])],
        replace=True)
    store = LakeStore(hashing_settings.lake)
    content_version = store.version(Table.CONTENT_ROWS)
    logs_version = store.version(Table.TURN_LOGS)
    assert content_version is not None and logs_version is not None
    texts = {}
    for tenant, month in partition_statuses(store):
        live = live_rows(store, tenant, month, content_version, logs_version, "hashing-64")
        where = (ds.field("tenant") == tenant) & (ds.field("month") == month)
        scanned = joined_rows(
            store.read(Table.CONTENT_ROWS, version=content_version, filter=where,
                       columns=CONTENT_COLUMNS),
            store.read(Table.TURN_LOGS, version=logs_version, filter=where,
                       columns=LOG_COLUMNS), "hashing-64")
        assert live.rows.height > 0 and live.rows.equals(scanned.rows)
        assert live.dim == scanned.dim and np.array_equal(live.vectors, scanned.vectors)
        texts[tenant] = live.rows["text"].to_list()
    assert "replaced text" in texts["acme"] and "appended later" in texts["acme"]
    assert not any("replaced" in t or "appended" in t for t in texts["globex"])
