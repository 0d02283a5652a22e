"""Compaction weighs segments by what indexing them again costs (pipeline.index_build.
Compaction): short turns published one by one next to a few very long ones never index the
long ones again — neither a new base nor a merge of too many deltas takes them — and the
partition still answers exactly as a full rebuild."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.feather as feather
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lake.embedding.hashing import HashingEmbedder
from lake.index.deferred import DeferredSize
from lake.index.manifest import PartitionManifest, partition_dir, read_current
from lake.index.segments import ROWS_FILE
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.index_build import Compaction, build_indexes, segment_costs
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, rebuilt_copy

MODEL = "hashing-64"
AS_OF = BASE_TIME + timedelta(days=30)
PART = ("acme", "2026-03")
DEFAULTS = Compaction()  # the settings' thresholds: 8 segments, deltas over 0.10 of the base
QUERIES = ["deploy question", "ledger cache", "shortmark7 answer", "quota", "longmark2"]


def _long_answer(seed: int, words: int) -> str:
    rng = random.Random(seed)
    body = " ".join(f"{rng.choice(['ledger', 'cache', 'quota'])}{rng.randrange(10_000)}"
                    for _ in range(words))
    return f"longmark{seed} {body}"


def _record(n: int, answer: str | None = None) -> dict[str, object]:
    return make_record(n, user="u-ana", conversation=f"c-{n % 3}",
                       prompt=f"shortmark{n} deploy question",
                       answer=answer or f"shortmark{n} deploy answer",
                       at=BASE_TIME + timedelta(minutes=7 * n))


class Lake:
    """A lake indexed after every commit as a live writer does, counting the bytes of text
    that each step's new segments hold: what the index steps indexed (again)."""

    def __init__(self, root: Path, compaction: Compaction) -> None:
        self.settings = Settings(lake=root, embedding_model=MODEL)
        self.compaction = compaction
        self.seen: set[str] = set()
        self.indexed_bytes = 0

    def commit(self, records: list[dict[str, object]]) -> PartitionManifest:
        """Commit ``records`` and bring the index up to date; the live manifest."""
        report = run_ingest(self.settings, records=[json.dumps(r) for r in records],
                            index=False)
        build_indexes(LakeStore(self.settings.lake), model=MODEL,
                      partitions=report.ingest.partitions, compaction=self.compaction)
        live = self.live()
        for segment in live.live_segments:
            if segment not in self.seen:
                self.seen.add(segment)
                self.indexed_bytes += _text_bytes(self.folder() / segment)
        return live

    def live(self) -> PartitionManifest:
        current = read_current(self.settings.lake, *PART)
        assert current is not None
        return current[1]

    def folder(self) -> Path:
        return partition_dir(self.settings.lake, *PART)


def _text_bytes(segment: Path) -> int:
    """The bytes of text a segment folder's rows hold (read from the folder itself, not from
    a manifest: the count does not take the code's word for it)."""
    texts = feather.read_table(segment / ROWS_FILE, columns=["text"]).column("text")
    return int(pc.sum(pc.binary_length(texts)).as_py() or 0)


def _hits(lake: Path) -> list[object]:
    service = SearchService(LakeStore(lake), embedder=HashingEmbedder(64))
    out: list[object] = []
    for query in QUERIES:
        result = service.search(SearchRequest(query, Principal("acme", analyst=True),
                                              scope="tenant", as_of=AS_OF, k=20))
        out.append([(h.row_id, h.turn_id, {g: (r.rank, round(r.score, 6)) if r else None
                                           for g, r in h.ranks.items()}, round(h.score, 6))
                    for h in result.hits])
    return out


def test_short_turns_after_a_long_one_never_index_it_again(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", DEFAULTS)
    lake.commit([_record(n) for n in range(12)])
    long_answer = _long_answer(1, 40_000)  # ~460 KB, in a partition of 12 short turns
    lake.commit([_record(1001, long_answer)])
    with_long = lake.live()  # the long turn outweighed the base's 12 turns: a new base
    before = lake.indexed_bytes
    for n in range(12, 42):
        lake.commit([_record(n)])
    # Counted by rows, as before, these 30 turns (60 rows beside a base of 26) made a new base
    # every two turns, each indexing the long answer again: ~15 times its bytes.
    assert lake.indexed_bytes - before < len(long_answer) // 10
    live = lake.live()
    assert live.live_segments[0] == with_long.live_segments[0], "the base was kept"
    assert len(live.live_segments) <= DEFAULTS.max_segments
    assert _hits(lake.settings.lake) == _hits(rebuilt_copy(lake.settings.lake, tmp_path, MODEL))


def test_a_merge_of_short_deltas_keeps_a_long_delta_before_them(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", DEFAULTS)
    lake.commit([_record(n) for n in range(12)]
                + [_record(1000 + k, _long_answer(k, 10_000)) for k in range(5)])
    # a long turn a tenth the size of the base's long ones: it stays a delta
    long_delta = lake.commit([_record(1010, _long_answer(10, 3_000))])
    heavy = long_delta.live_segments[-1]
    assert len(long_delta.live_segments) == 2
    before = lake.indexed_bytes
    heavy_bytes = _text_bytes(lake.folder() / heavy)
    merged = 0
    for n in range(12, 36):
        live = lake.commit([_record(n)])
        assert heavy in live.live_segments, f"turn {n}: the long delta was indexed again"
        assert len(live.live_segments) <= DEFAULTS.max_segments
        merged += len(live.live_segments) < len(long_delta.live_segments) + 1
        long_delta = live
    assert merged >= 2, "merges of the short deltas happened"
    assert lake.indexed_bytes - before < heavy_bytes
    assert _hits(lake.settings.lake) == _hits(rebuilt_copy(lake.settings.lake, tmp_path, MODEL))


def test_long_turns_one_after_another_are_each_indexed_a_bounded_number_of_times(
        tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake", DEFAULTS)
    lake.commit([_record(n) for n in range(12)])
    longs = [_long_answer(k, 10_000) for k in range(8)]
    before = lake.indexed_bytes
    for k, answer in enumerate(longs):
        lake.commit([_record(1000 + k, answer)])
    # By the ratio alone each new long turn outweighed a tenth of a base of long turns, and
    # its rebase indexed every earlier one again (the k-th cost k long turns): their text
    # was indexed 4.5 times over. A heavy delta waiting for the base's weight: 2.0 times.
    times = (lake.indexed_bytes - before) / sum(len(a) for a in longs)
    assert times < 3, f"the long turns' text was indexed {times:.1f} times"
    assert len(lake.live().live_segments) <= DEFAULTS.max_segments
    assert _hits(lake.settings.lake) == _hits(rebuilt_copy(lake.settings.lake, tmp_path, MODEL))


def test_a_heavy_delta_waits_for_the_whole_bases_weight() -> None:
    def manifest(texts: list[int], rows: list[int]) -> PartitionManifest:
        return replace(_manifest(texts), segment_rows=rows)

    policy = Compaction(max_segments=8, max_delta_ratio=0.1)
    # light rows past a tenth of the base: a new base
    assert policy.rebase_due(manifest([10_000, 2_000], [100, 20]))
    assert policy.rebase_due(manifest([10_000, 600, 600], [100, 6, 6]))
    # a heavy delta (few rows, past a tenth in bytes) waits until the deltas weigh the base
    assert not policy.rebase_due(manifest([9_500_000, 9_000_000], [100, 2]))
    assert policy.rebase_due(manifest([9_500_000, 9_000_000, 9_000_000], [100, 2, 2]))
    # short turns published beside it do not bring it in before they weigh the share
    assert not policy.rebase_due(manifest([9_500_000, 9_000_000, 12_000], [200, 2, 48]))
    assert not policy.rebase_due(manifest([9_500_000, 12_000], [200, 48]),
                                 DeferredSize(rows=2, text_bytes=9_000_000))
    # under a tenth of the base: no new base, whatever the rows
    assert not policy.rebase_due(manifest([9_000_000, 2_000], [1, 20]))
    # what the partition defers counts as a delta
    assert policy.rebase_due(manifest([1_000], [4]), DeferredSize(rows=1, text_bytes=9_000))
    assert not policy.rebase_due(manifest([9_000_000], [100]),
                                 DeferredSize(rows=1, text_bytes=2_000_000))


def _manifest(texts: list[int]) -> PartitionManifest:
    return PartitionManifest(
        tenant="acme", month="2026-03", build_id=f"s{len(texts) - 1}", content_version=1,
        logs_version=1, content_fingerprint="", logs_fingerprint="", row_count=len(texts),
        turn_count=len(texts), embedded_rows=0, model=None, dim=0, semantic_kind="none",
        built_at="", build_seconds=0.0, segments=[f"s{i}" for i in range(len(texts))],
        segment_rows=[1] * len(texts), segment_text_bytes=texts)


def test_merge_start_keeps_deltas_that_outweigh_those_after_them() -> None:
    manifest = _manifest
    policy = Compaction(max_segments=3, max_delta_ratio=10.0)
    assert segment_costs(manifest([100, 44])) == [356, 300]
    # equal short deltas all merge; a delta far heavier than those after it stays
    assert policy.merge_start(manifest([10**6, 100, 100, 100])) == 1
    assert policy.merge_start(manifest([10**6, 10**5, 100, 100])) == 2
    # a run of sizes each more than twice the rest: no merge of two keeps to the rule
    assert policy.merge_start(manifest([10**6, 10**5, 10**4, 100])) is None
    assert not policy.merge_due(manifest([10**6, 10**5, 10**4, 100]))
    assert policy.merge_due(manifest([10**6, 10**5, 100, 100]))
    # older manifests without text bytes are weighed by rows, as before
    older = manifest([1, 1, 1, 1])
    assert segment_costs(replace(older, segment_text_bytes=[])) == [1, 1, 1, 1]


appends = st.lists(st.tuples(st.booleans(), st.integers(1, 3)), min_size=3, max_size=7)


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=appends)
def test_random_short_and_long_appends_search_like_a_full_rebuild(
        tmp_path: Path, steps: list[tuple[bool, int]]) -> None:
    root = tmp_path / f"lake-{uuid.uuid4().hex[:8]}"
    # few segments allowed and a lax base ratio: merges that keep long deltas happen often
    lake = Lake(root, Compaction(max_segments=3, max_delta_ratio=4.0))
    lake.commit([_record(n) for n in range(4)])
    n = 4
    for long, count in steps:
        lake.commit([_record(n + i, _long_answer(n + i, 3_000) if long and i == 0 else None)
                     for i in range(count)])
        n += count
    assert _hits(root) == _hits(rebuilt_copy(root, tmp_path / root.name, MODEL))
