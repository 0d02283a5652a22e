"""The group-commit writer in process: concurrent submissions share one commit, and each
hears its own turns' outcomes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import orjson
import pytest

from lake.embedding.hashing import HashingEmbedder
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline import prepare as prepare_module
from pipeline.ingest import TurnKey
from pipeline.prepare import PreparedChunk
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.outcomes import LineOutcome
from pipeline.service.writer import GroupWriter
from pipeline.sources import SourceLine, SourceProblem
from tests.factories import HeldIndexer
from tests.reliability.lake_audit import key_of, turn_record


def _lines(records: list[dict[str, object]]) -> tuple[list[str], list[TurnKey | None]]:
    return [orjson.dumps(r).decode() for r in records], [key_of(r) for r in records]


def test_concurrent_submissions_share_one_commit(hashing_settings: Settings) -> None:
    settings = hashing_settings.with_(commit_window_ms=400.0)
    metrics = ServiceMetrics()
    writer = GroupWriter(settings, embedder=HashingEmbedder(64), index=False, metrics=metrics)
    writer.start()
    futures: list[Future[list[LineOutcome]]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def submit(n: int) -> None:
        records = [turn_record(n * 10 + i, conversation=f"c-{n}") for i in range(5)]
        barrier.wait()
        future = writer.submit(*_lines(records))
        with lock:
            futures.append(future)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answers = [f.result(timeout=120) for f in futures]
    writer.close()
    assert all(o.status == "accepted" for answer in answers for o in answer)
    # One window of 400 ms took all four (submitted together): one commit of 20 turns.
    text = metrics.render().decode()
    assert "turnlake_commit_requests_count 1.0" in text
    assert "turnlake_commit_turns_sum 20.0" in text
    logs = LakeStore(settings.lake).read(Table.TURN_LOGS, columns=["batch_id"])
    assert logs.num_rows == 20 and len(set(logs["batch_id"].to_pylist())) == 1


def test_outcomes_in_a_group_follow_the_input_order(hashing_settings: Settings) -> None:
    writer = GroupWriter(hashing_settings, embedder=None, index=False)
    writer.start()
    first = turn_record(1)
    bad = {**turn_record(2), "writer": "poet"}
    foreign = turn_record(3, user="u-ben")  # c-1 is u-ana's (first is in the same commit)
    lines, keys = _lines([first, bad, first, foreign])
    outcomes = writer.submit(lines, keys).result(timeout=120)
    again = writer.submit(*_lines([first])).result(timeout=120)
    writer.close()
    assert [(o.status, o.field) for o in outcomes] == [
        ("accepted", None), ("rejected", "writer"), ("duplicate", None),
        ("rejected", "user_id")]
    assert [o.status for o in again] == ["duplicate"]


def test_a_closed_writer_refuses_new_turns(hashing_settings: Settings) -> None:
    from lake.errors import LakeError

    writer = GroupWriter(hashing_settings, embedder=None, index=False)
    writer.start()
    writer.close()
    with pytest.raises(LakeError, match="shutting down"):
        writer.submit(*_lines([turn_record(1)]))


def test_a_group_waits_for_as_many_submissions_as_the_last_one_held(
        hashing_settings: Settings) -> None:
    """Hosts answered by one commit come back together, but not within the window: the next
    group waits (up to commit_expect_ms) until as many as the last group held are in."""
    import time

    settings = hashing_settings.with_(commit_window_ms=300.0, commit_expect_ms=20_000.0)
    metrics = ServiceMetrics()
    writer = GroupWriter(settings, embedder=None, index=False, metrics=metrics)
    writer.start()

    def together(start: int, delays: list[float]) -> list[Future[list[LineOutcome]]]:
        futures: list[Future[list[LineOutcome]]] = []

        def submit(n: int, delay: float) -> None:
            time.sleep(delay)
            futures.append(writer.submit(*_lines([turn_record(start + n,
                                                              conversation=f"c-{start + n}")])))

        threads = [threading.Thread(target=submit, args=(n, d)) for n, d in enumerate(delays)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return futures

    first = together(0, [0.0, 0.0, 0.0])  # one window takes all three
    [f.result(timeout=120) for f in first]
    # Two of the next three come well after the window: the group still waits for them.
    second = together(10, [0.0, 0.8, 0.8])
    answers = [f.result(timeout=120) for f in second]
    writer.close()
    assert all(o.status == "accepted" for answer in answers for o in answer)
    text = metrics.render().decode()
    assert "turnlake_commit_requests_count 2.0" in text  # two commits, of three each
    assert "turnlake_commit_requests_sum 6.0" in text


def test_answers_wait_while_an_answered_turn_is_not_searchable_past_the_lag_bound(
        hashing_settings: Settings) -> None:
    settings = hashing_settings.with_(record_max_lag_s=1.0)
    writer = GroupWriter(settings, embedder=None, index=True)
    held = HeldIndexer()
    writer._indexer = held  # type: ignore[assignment]
    writer.start()
    try:
        first = [turn_record(1)]
        assert writer.submit(*_lines(first)).result(timeout=120)[0].status == "accepted"
        answered = time.monotonic()
        time.sleep(max(0.0, answered + 1.2 - time.monotonic()))  # past the bound, unindexed
        second = writer.submit(*_lines([turn_record(2)]))
        time.sleep(1.0)  # well within the longest hold
        assert not second.done()
        held.go.set()  # the first turn becomes searchable: the second is answered
        assert second.result(timeout=120)[0].status == "accepted"
    finally:
        held.go.set()
        writer.close()


class _FailingIndexer:
    """An index step that always fails."""

    def index(self, partitions: object, *, defer: bool = True) -> set[object]:
        raise RuntimeError("the index folder is gone")

    def close(self) -> None:
        pass


def test_a_failing_index_step_does_not_hold_recording(hashing_settings: Settings) -> None:
    writer = GroupWriter(hashing_settings.with_(record_max_lag_s=0.2), embedder=None,
                         index=True)
    writer._indexer = _FailingIndexer()  # type: ignore[assignment]
    writer.start()
    try:
        assert writer.submit(*_lines([turn_record(1)])).result(timeout=120)[0].status \
            == "accepted"
        time.sleep(0.5)  # past the bound: the first turn never becomes searchable
        # Answered at once rather than after the longest hold (60 s).
        second = writer.submit(*_lines([turn_record(2)])).result(timeout=30)
        assert second[0].status == "accepted"
    finally:
        writer.close()


def test_a_spooled_group_is_prepared_once_and_its_commit_keeps_what_the_answer_said(
        hashing_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision parses and projects the lines; the commit ingests what it prepared
    (lines are counted as they are prepared), and its report names the turns it kept."""
    prepared: list[int] = []
    real = prepare_module._prepare

    def counting(items: list[SourceLine | SourceProblem], settings: Settings,
                 staging: str | None = None) -> PreparedChunk:
        prepared.append(len(items))
        return real(items, settings, staging)

    monkeypatch.setattr(prepare_module, "_prepare", counting)
    metrics = ServiceMetrics()
    writer = GroupWriter(hashing_settings, embedder=HashingEmbedder(64), index=False,
                         metrics=metrics)
    assert writer.spooling
    writer.start(wait=True)
    try:
        records = [turn_record(n) for n in range(4)]
        bad = {**turn_record(9), "writer": "poet"}
        outcomes = writer.submit(*_lines([*records, records[0], bad])).result(timeout=120)
        assert writer.flush(120)
    finally:
        writer.close()
    assert [o.status for o in outcomes] == ["accepted"] * 4 + ["duplicate", "rejected"]
    assert sum(prepared) == 6  # each line once
    stored = LakeStore(hashing_settings.lake).read(Table.TURN_LOGS, columns=["turn_id"])
    assert sorted(stored["turn_id"].to_pylist()) == sorted(str(r["turn_id"]) for r in records)
    assert "turnlake_spool_divergences_total 0.0" in metrics.render().decode()
