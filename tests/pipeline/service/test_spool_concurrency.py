"""Hosts recording the same turns at once through the spool: each turn is answered
`accepted` exactly once, and what is stored is exactly what those answers accepted."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import orjson

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.outcomes import LineOutcome
from pipeline.service.steps import TurnKey
from pipeline.service.writer import GroupWriter
from tests.reliability.lake_audit import key_of, turn_record

HOSTS = 6
REQUESTS = 8


def _host(writer: GroupWriter, seed: int, answers: list[tuple[str, TurnKey, LineOutcome]],
          lock: threading.Lock) -> None:
    rng = random.Random(seed)
    for _ in range(REQUESTS):
        records = []
        for _ in range(rng.randint(1, 5)):
            record = turn_record(rng.randint(0, 15), conversation=rng.choice(["c-1", "c-2"]))
            if rng.random() < 0.3:  # the same turn with other content: a conflict
                record["conversation_title"] = f"host {seed}"
            records.append(record)
        lines = [orjson.dumps(r).decode() for r in records]
        outcomes = writer.submit(lines, [key_of(r) for r in records]).result(timeout=120)
        with lock:
            answers.extend(zip(lines, (key_of(r) for r in records), outcomes, strict=True))


def test_concurrent_hosts_get_one_acceptance_per_turn_and_the_lake_holds_those(
        tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64",
                        commit_window_ms=2.0)
    metrics = ServiceMetrics()
    writer = GroupWriter(settings, embedder=None, index=False, metrics=metrics)
    writer.start()
    answers: list[tuple[str, TurnKey, LineOutcome]] = []
    lock = threading.Lock()
    try:
        hosts = [threading.Thread(target=_host, args=(writer, seed, answers, lock))
                 for seed in range(HOSTS)]
        for thread in hosts:
            thread.start()
        for thread in hosts:
            thread.join(timeout=300)
        assert writer.flush(timeout_s=120)
    finally:
        writer.close()
    accepted = [(key, orjson.loads(line)) for line, key, o in answers if o.status == "accepted"]
    assert len({key for key, _ in accepted}) == len(accepted)  # each turn accepted once
    logs = LakeStore(settings.lake).read(Table.TURN_LOGS,
                                         columns=["tenant", "conversation_id", "turn_id",
                                                  "payload"])
    stored = {(t, c, n): orjson.loads(p) for t, c, n, p in zip(
        *(logs[name].to_pylist() for name in logs.column_names), strict=True)}
    assert stored.keys() == {key for key, _ in accepted}
    for key, record in accepted:  # the content answered `accepted` is the content stored
        assert stored[key]["conversation_title"] == record["conversation_title"], key
    rejected = [o for _, _, o in answers if o.status == "rejected"]
    assert rejected and all("conflict" in (o.reason or "") for o in rejected)
    assert "turnlake_spool_divergences_total 0.0" in metrics.render().decode()
