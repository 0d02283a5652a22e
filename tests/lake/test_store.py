"""The Parquet files LakeStore writes."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from factories import rich_record, write_jsonl

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import Ingestor

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
