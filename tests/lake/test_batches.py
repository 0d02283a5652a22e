"""indexable_versions: an index build never reads a batch's rows without its TurnLogs."""

from __future__ import annotations

import json
from pathlib import Path

from lake.batches import indexable_versions
from lake.embedding.hashing import HashingEmbedder
from lake.faults import Faults
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import Ingestor
from pipeline.live import LiveWriter
from tests.factories import make_record


def _versions(store: LakeStore) -> tuple[int | None, int | None]:
    return store.version(Table.CONTENT_ROWS), store.version(Table.TURN_LOGS)


def test_a_batch_between_its_rows_and_its_turn_logs_is_left_out(settings: Settings) -> None:
    Ingestor(settings).ingest_records([json.dumps(make_record(0))])
    store = LakeStore(settings.lake)
    before = _versions(store)
    seen: dict[str, tuple[tuple[int | None, int | None], tuple[int | None, int | None]]] = {}

    def look(point: str) -> None:
        if point in ("batch.after_bytes", "batch.after_turn_logs", "batch.after_timelines"):
            seen[point] = (indexable_versions(store), _versions(store))

    Ingestor(settings, faults=Faults(look)).ingest_records([json.dumps(make_record(1))])
    # Rows committed, TurnLogs not: the content version from before the batch.
    indexable, latest = seen["batch.after_bytes"]
    assert latest[0] == before[0] + 1  # type: ignore[operator]
    assert indexable == before
    # Once its TurnLogs are committed, the batch's rows count (its manifest still exists).
    for point in ("batch.after_turn_logs", "batch.after_timelines"):
        indexable, latest = seen[point]
        assert indexable == latest
    assert indexable_versions(store) == _versions(store)


def test_a_manifest_that_names_no_versions_gives_the_plain_reading(settings: Settings) -> None:
    Ingestor(settings).ingest_records([json.dumps(make_record(0))])
    store = LakeStore(settings.lake)
    folder = Path(settings.lake) / "_batches"
    folder.mkdir(exist_ok=True)
    (folder / "b-old.json").write_text(json.dumps({"batch_id": "b-old", "file_keys": [],
                                                   "conversations": []}))
    (folder / "b-torn.json").write_text('{"batch_id": "b-to')
    assert indexable_versions(store) == _versions(store)


def test_an_index_step_between_a_batch_s_rows_and_turn_logs_leaves_a_delta_to_append(
        hashing_settings: Settings) -> None:
    """The race a live writer's indexer ran into: before, the second step found TurnLogs
    whose rows it had counted as covered, and rebuilt the whole partition."""
    settings = hashing_settings.with_(index_compact_ratio=1e9, index_compact_segments=1000)
    writer = LiveWriter(settings, HashingEmbedder(64))
    writer.record([make_record(n) for n in range(10)])
    steps = []

    def index_now(point: str) -> None:
        if point == "batch.after_bytes":
            steps.append(writer.index({("acme", "2026-03")}))

    racing = Ingestor(settings, faults=Faults(index_now))
    racing.ingest_records([json.dumps(make_record(n)) for n in range(10, 13)])
    assert len(steps) == 1
    report = writer.index({("acme", "2026-03")})
    assert report.appended == ["acme/2026-03"]
    assert report.compacted == []
