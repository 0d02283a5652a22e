"""The group writer's per-key fair share (pipeline/service/fairness.py), in process: a large
request goes alone, a key late to be searchable is held alone, and a key that used the
writer for long waits while another key records."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import orjson

from lake.settings import Settings
from pipeline.ingest import TurnKey
from pipeline.service.fairness import FairShare
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.writer import GroupWriter
from tests.factories import HeldIndexer
from tests.reliability.lake_audit import key_of, turn_record


def _lines(records: list[dict[str, object]]) -> tuple[list[str], list[TurnKey | None]]:
    return [orjson.dumps(r).decode() for r in records], [key_of(r) for r in records]


@contextlib.contextmanager
def _key_a_answered(settings: Settings) -> Iterator[tuple[GroupWriter, HeldIndexer]]:
    """A started writer whose index step waits for the test, after key a's first turn is
    answered; the index step is let go and the writer closed on the way out."""
    writer = GroupWriter(settings, embedder=None, index=True)
    held = HeldIndexer()
    writer._indexer = held  # type: ignore[assignment]
    writer.start()
    try:
        assert writer.submit(*_lines([turn_record(1, conversation="c-a")]),
                             sharer="acme/a").result(timeout=120)[0].status == "accepted"
        yield writer, held
    finally:
        held.go.set()
        writer.close()


def test_a_large_request_is_committed_in_a_group_of_its_own(
        hashing_settings: Settings) -> None:
    # Without the spool each group is one commit; a long window would take all three.
    settings = hashing_settings.with_(record_spool=False, commit_window_ms=400.0,
                                      record_fair_share_bytes=4_000)
    metrics = ServiceMetrics()
    writer = GroupWriter(settings, embedder=None, index=False, metrics=metrics)
    writer.start()
    try:
        large = turn_record(1, conversation="c-big")
        large["completion"]["text"] = "deploy " * 2_000  # type: ignore[index]
        futures = [writer.submit(*_lines([large]), sharer="acme/big"),
                   writer.submit(*_lines([turn_record(2, conversation="c-a")]),
                                 sharer="acme/small"),
                   writer.submit(*_lines([turn_record(3, conversation="c-b")]),
                                 sharer="acme/other")]
        answers = [f.result(timeout=120) for f in futures]
    finally:
        writer.close()
    assert all(o.status == "accepted" for answer in answers for o in answer)
    text = metrics.render().decode()
    # The large request alone, the two small ones of other keys together.
    assert "turnlake_commit_requests_count 2.0" in text
    assert "turnlake_commit_requests_sum 3.0" in text


def test_a_key_late_to_be_searchable_is_held_and_others_are_not(
        hashing_settings: Settings) -> None:
    with _key_a_answered(hashing_settings.with_(record_max_lag_s=0.5)) as (writer, held):
        time.sleep(0.8)  # past the bound: key a's group is late
        again = writer.submit(*_lines([turn_record(2, conversation="c-a")]), sharer="acme/a")
        other = writer.submit(*_lines([turn_record(3, conversation="c-b")]), sharer="acme/b")
        # Key b is answered while the index step is still held; key a waits for it.
        assert other.result(timeout=30)[0].status == "accepted"
        assert not again.done()
        held.go.set()
        assert again.result(timeout=120)[0].status == "accepted"


def test_a_key_that_used_the_writer_for_long_waits_while_another_records(
        hashing_settings: Settings) -> None:
    with _key_a_answered(hashing_settings.with_(record_max_lag_s=0.3)) as (writer, held):
        time.sleep(3.0)  # key a's group holds the writer's index step for 3 s...
        held.go.set()
        writer.flush(120)
        deadline = time.monotonic() + 60
        while writer.backlog()["unsearchable_groups"] and time.monotonic() < deadline:
            time.sleep(0.02)
        # ...so while key b records, key a's next request waits about as long.
        other = writer.submit(*_lines([turn_record(3, conversation="c-b")]), sharer="acme/b")
        again = writer.submit(*_lines([turn_record(2, conversation="c-a")]), sharer="acme/a")
        assert other.result(timeout=30)[0].status == "accepted"
        assert writer.backlog()["paused_keys"] == 1
        time.sleep(0.5)
        assert not again.done()
        assert again.result(timeout=120)[0].status == "accepted"  # once its pause ended


def test_a_key_alone_is_never_paused() -> None:
    fair = FairShare(share_bytes=100, lag_s=0.5, most_hold_s=60)
    fair.seen("a", 0.0)
    fair.answered(1, ["a"], acked=0.0, large=False)
    assert fair.held("a", 1.0, index_failing=False) == "late"
    assert fair.held("a", 1.0, index_failing=True) is None  # a failing index step holds none
    fair.searchable(1, {"a": 10}, 4.0, 4.0)  # the steps spent 4 s on it: a is charged 4 s
    assert fair.held("a", 5.0, index_failing=False) is None  # nobody else records
    fair.seen("b", 5.0)
    assert fair.held("a", 5.0, index_failing=False) == "paused"
    assert fair.held("a", 8.1, index_failing=False) is None  # 4 s after it became searchable
    assert fair.held("b", 5.0, index_failing=False) is None


def test_a_group_late_behind_another_keys_large_request_holds_nobody_but_that_key() -> None:
    fair = FairShare(share_bytes=100, lag_s=0.5, most_hold_s=60)
    fair.answered(1, ["big"], acked=0.0, large=True)
    fair.answered(2, ["small"], acked=0.1, large=False)
    assert fair.held("big", 0.2, index_failing=False) == "late"  # one large in flight
    assert fair.held("small", 5.0, index_failing=False) is None  # late behind big's
    fair.searchable(1, {"big": 1_000}, 5.0, 5.0)
    assert fair.held("small", 5.1, index_failing=False) == "late"  # now its own delay
    fair.seen("small", 5.1)
    assert fair.held("big", 5.1, index_failing=False) == "paused"  # while small records
