"""The Parquet files LakeStore writes, and reading back exactly the files an append added."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lake.errors import LakeError
from lake.settings import Settings
from lake.store import CHECKPOINT_INTERVAL, LakeStore
from lake.tables import Table
from lake.timelines import conversation_filter
from pipeline.ingest import Ingestor
from tests.factories import make_record, rich_record, write_jsonl

FREE_TEXT = {"payload", "blocks", "text", "data"}


def test_free_text_columns_carry_no_parquet_statistics(settings: Settings,
                                                       tmp_path: Path) -> None:
    Ingestor(settings).ingest_paths(
        [write_jsonl(tmp_path / "in.jsonl", [rich_record(i) for i in range(3)])])
    store = LakeStore(settings.lake)
    for table in (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.EVENTS):
        [path, *_] = sorted(store.path(table).rglob("*.parquet"))
        group = pq.read_metadata(path).row_group(0)
        columns = {group.column(i).path_in_schema: group.column(i)
                   for i in range(group.num_columns)}
        for name, column in columns.items():
            assert column.compression == "SNAPPY", (table, name)
            if name in FREE_TEXT:
                assert not column.is_stats_set, (table, name)
            elif name in ("conversation_id", "turn_id", "expires_at"):
                assert column.statistics.has_min_max, (table, name)


def test_read_files_reads_exactly_the_named_files_with_their_partition_values(
        settings: Settings, tmp_path: Path) -> None:
    ingestor = Ingestor(settings)
    ingestor.ingest_paths([write_jsonl(tmp_path / "a.jsonl", [make_record(0, tenant="acme"),
                                                             make_record(1, tenant="beta")])])
    store = LakeStore(settings.lake)
    before = store.data_files(Table.TURN_LOGS)
    ingestor.ingest_paths([write_jsonl(tmp_path / "b.jsonl", [make_record(2, tenant="beta")])])
    added = store.data_files(Table.TURN_LOGS) - before
    assert added
    got = store.read_files(Table.TURN_LOGS, added, columns=["tenant", "month", "turn_id"])
    assert got.column("turn_id").to_pylist() == ["t-0002"]
    assert got.column("tenant").to_pylist() == ["beta"]
    everything = store.read_files(Table.TURN_LOGS, store.data_files(Table.TURN_LOGS),
                                  columns=["tenant", "turn_id"])
    assert sorted(zip(everything["tenant"].to_pylist(), everything["turn_id"].to_pylist(),
                      strict=True)) == [("acme", "t-0000"), ("beta", "t-0001"), ("beta", "t-0002")]
    assert store.read_files(Table.TURN_LOGS, (), columns=["turn_id"]).num_rows == 0
    with pytest.raises(LakeError, match="not a data file"):
        store.read_files(Table.TURN_LOGS, {"tenant=acme/month=2026-03/nope.parquet"},
                         columns=["turn_id"])


def test_tables_checkpoint_often_and_an_older_lake_is_brought_to_the_interval(
        settings: Settings, tmp_path: Path) -> None:
    ingestor = Ingestor(settings)
    ingestor.ingest_paths([write_jsonl(tmp_path / "a.jsonl", [make_record(0)])])
    store = LakeStore(settings.lake)
    dt = store.open(Table.TURN_LOGS)
    assert dt is not None
    assert dt.metadata().configuration["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL)
    # a lake made before: the table property is gone, as delta-rs's default of 100 would be
    dt.alter.set_table_properties({"delta.checkpointInterval": "100"})
    for n in range(1, CHECKPOINT_INTERVAL + 2):
        ingestor.ingest_paths([write_jsonl(tmp_path / f"{n}.jsonl", [make_record(n)])])
    dt = store.open(Table.TURN_LOGS)
    assert dt is not None
    assert dt.metadata().configuration["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL)
    log = store.path(Table.TURN_LOGS) / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet")), "no checkpoint after an interval's commits"
    assert store.read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == CHECKPOINT_INTERVAL + 2


def test_a_conversation_read_skips_the_files_whose_statistics_rule_it_out(
        settings: Settings, tmp_path: Path) -> None:
    ingestor = Ingestor(settings)
    for n in range(6):  # a file per commit, as a live writer leaves them
        ingestor.ingest_paths([write_jsonl(tmp_path / f"{n}.jsonl",
                                           [make_record(n, conversation=f"c-{n}")])])
    store = LakeStore(settings.lake)
    dt = store.open(Table.TURN_LOGS)
    assert dt is not None
    assert "conversation_id" in dt.metadata().configuration["delta.dataSkippingStatsColumns"]
    wanted = conversation_filter([("acme", "c-3")])
    assert wanted is not None
    fragments = list(store.dataset(Table.TURN_LOGS).get_fragments(filter=wanted))
    assert len(fragments) == 1
    assert store.read(Table.TURN_LOGS, columns=["turn_id"],
                      filter=wanted)["turn_id"].to_pylist() == ["t-0003"]


def test_a_local_table_is_read_through_arrows_own_file_system(settings: Settings,
                                                              tmp_path: Path) -> None:
    tenant = "Acme_2-x"  # ids are [A-Za-z0-9_-]: no partition folder needs escaping
    # deltalake's default Python file system left pre-buffering arrow I/O threads that needed
    # the interpreter while it shut down: commands aborted at exit (134) after their output
    Ingestor(settings).ingest_paths(
        [write_jsonl(tmp_path / "in.jsonl", [make_record(i, tenant=tenant) for i in range(3)])])
    store = LakeStore(settings.lake)
    dataset = store.dataset(Table.CONTENT_ROWS)
    assert isinstance(dataset.filesystem, pafs.SubTreeFileSystem)
    assert isinstance(dataset.filesystem.base_fs, pafs.LocalFileSystem)
    rows = store.read(Table.CONTENT_ROWS, columns=["tenant", "text"])
    assert rows.num_rows == 6 and set(rows["tenant"].to_pylist()) == {tenant}


def test_a_sparse_read_gives_what_a_filtered_read_gives(settings: Settings,
                                                        tmp_path: Path) -> None:
    ingestor = Ingestor(settings)
    # Each file holds two conversations far apart in name: statistics rule none of them out.
    for n, pair in enumerate((("c-a", "c-z"), ("c-b", "c-y"), ("c-c", "c-x"))):
        ingestor.ingest_paths([write_jsonl(tmp_path / f"{n}.jsonl", [
            make_record(2 * n, conversation=pair[0]),
            make_record(2 * n + 1, conversation=pair[1])])])
    store = LakeStore(settings.lake)
    columns = ["conversation_id", "turn_id", "payload"]
    for wanted in ("c-b", "c-x", "c-none"):
        expr = conversation_filter([("acme", wanted)])
        assert expr is not None
        sparse = store.read_sparse(Table.TURN_LOGS, columns=columns, filter=expr)
        assert sparse.column_names == columns
        assert sparse.sort_by("turn_id").equals(
            store.read(Table.TURN_LOGS, columns=columns, filter=expr).sort_by("turn_id"))
        assert set(sparse["conversation_id"].to_pylist()) == (
            set() if wanted == "c-none" else {wanted})
