"""The warm write path: a LiveWriter records turns that are searchable when it returns."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from lake.embedding.hashing import HashingEmbedder
from lake.index.manifest import read_current
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.live import LIBRARY_ADVICE, LiveWriter
from pipeline.prepare import prepare_group
from tests.factories import BASE_TIME, make_record


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts how often it is created and used."""

    created = 0

    def __init__(self) -> None:
        super().__init__(dim=64)
        CountingEmbedder.created += 1


def test_each_turn_is_searchable_when_record_returns(hashing_settings: Settings) -> None:
    embedder = CountingEmbedder()
    writer = LiveWriter(hashing_settings, embedder)
    service = SearchService(LakeStore(hashing_settings.lake), embedder=HashingEmbedder(64))
    words = ["kestrel", "marmot", "ocelot", "tapir"]
    for n, word in enumerate(words):
        report = writer.record([make_record(n, conversation=f"c-{n}", prompt=f"the {word} case",
                                            at=BASE_TIME + timedelta(minutes=n))])
        assert report.ingest.accepted == 1 and report.embedding.embedded == 2
        assert report.build is not None and len(report.build.built) == 1
        result = service.search(SearchRequest(word, Principal("acme", "u-ana"),
                                              as_of=BASE_TIME + timedelta(days=1)))
        assert [h.conversation_id for h in result.hits][:1] == [f"c-{n}"]
        assert result.stale_partitions == [] and result.unindexed_partitions == []
    current = read_current(hashing_settings.lake, "acme", "2026-03")
    assert current is not None
    # first turn: a base segment; the next ones: delta segments (compaction is due only
    # because deltas outgrow a 2-row base, so the count stays bounded)
    assert current[1].row_count == 8
    assert len(current[1].live_segments) <= hashing_settings.index_compact_segments
    assert CountingEmbedder.created == 1


def test_bad_records_are_quarantined_not_raised(hashing_settings: Settings) -> None:
    writer = LiveWriter(hashing_settings, HashingEmbedder(64))
    report = writer.record([json.dumps({"schema": "turnlake.turn.v1"}), make_record(1)])
    assert report.ingest.accepted == 1 and len(report.ingest.quarantined) == 1


def test_a_conflict_recorded_by_live_writer_gives_library_advice(
        hashing_settings: Settings) -> None:
    writer = LiveWriter(hashing_settings, HashingEmbedder(64))
    assert writer.record([make_record(0)]).ingest.accepted == 1
    report = writer.record([make_record(0, answer="another answer")]).ingest
    assert len(report.conflicts) == 1 and len(report.quarantined) == 1
    for entry in (*report.conflicts, *report.quarantined):
        assert entry.reason.startswith("conflict: turn t-0000"), entry.reason
        assert "--replace" not in entry.reason, entry.reason
        assert entry.reason.endswith(LIBRARY_ADVICE), entry.reason
        assert entry.field == "completion.text"
    # ingest() leaves the advice to its host (the HTTP service gives its own), and so does
    # the quarantine table: each front end says what it offers
    raw = writer.ingest([make_record(0, answer="a third answer")]).ingest
    assert [(q.conflict, q.reason.endswith("(differs in: completion.text)"))
            for q in raw.conflicts] == [(True, True)]
    stored = LakeStore(hashing_settings.lake).read(Table.QUARANTINE)["reason"].to_pylist()
    assert stored and all(r.endswith("(differs in: completion.text)") for r in stored), stored


def test_vectors_embedded_ahead_are_what_the_ingest_stores_and_it_computes_none(
        hashing_settings: Settings, tmp_path: Path) -> None:
    lines = [json.dumps(make_record(n, answer=f"answer {n} " + "ledger " * 400))
             for n in range(3)]
    group = prepare_group(lines, "<ahead>", hashing_settings, chunk_lines=2)
    ahead = LiveWriter(hashing_settings, HashingEmbedder(64)).embed_ahead(group)
    assert set(ahead) == {"acme"} and ahead["acme"]
    writer = LiveWriter(hashing_settings, HashingEmbedder(64))
    report = writer.ingest_prepared([group.sealed().opened()], vectors=ahead)
    assert report.ingest.kept == {("acme", str(make_record(n)["conversation_id"]),
                                   str(make_record(n)["turn_id"])) for n in range(3)}
    assert report.embedding.reused == report.ingest.rows_written > 0
    assert report.embedding.embedded == report.ingest.rows_written
    stored = LakeStore(hashing_settings.lake).read(Table.CONTENT_ROWS)
    again = LiveWriter(hashing_settings.with_(lake=tmp_path / "other"), HashingEmbedder(64))
    again.ingest_groups([("<inline>", lines)])
    inline = LakeStore(tmp_path / "other").read(Table.CONTENT_ROWS)
    key = ["row_id"]
    assert (stored.sort_by([(k, "ascending") for k in key])["embedding"].to_pylist()
            == inline.sort_by([(k, "ascending") for k in key])["embedding"].to_pylist())
