"""Answering from the spool changes when a recording is answered, never what the answer is:
random sequences of groups (new turns, repeats, conflicting repeats, turns of another user's
conversation, bad lines) get the same outcomes and leave the same lake as when every group
is answered after its commit."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.service.outcomes import LineOutcome
from pipeline.service.writer import GroupWriter
from tests.reliability.lake_audit import key_of, turn_record

Group = list[str]


def _scenario(seed: int) -> list[Group]:
    rng = random.Random(seed)
    owners = {"c-1": "u-ana", "c-2": "u-ben", "c-3": "u-ana"}
    sent: list[dict[str, Any]] = []
    groups: list[Group] = []
    for _ in range(rng.randint(3, 7)):
        group: Group = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.choice(["new", "new", "repeat", "conflict", "foreign", "bad"])
            if kind in ("repeat", "conflict") and sent:
                record = dict(rng.choice(sent))
                if kind == "conflict":
                    record["conversation_title"] = f"retitled {rng.randint(0, 9)}"
            elif kind == "bad":
                group.append(rng.choice(["{not json", orjson.dumps(
                    {"schema": "turnlake.turn.v1", "tenant": "acme"}).decode()]))
                continue
            else:
                conversation = rng.choice(sorted(owners))
                user = owners[conversation] if kind != "foreign" else "u-eve"
                record = turn_record(rng.randint(0, 12), user=user, conversation=conversation)
            sent.append(record)
            group.append(orjson.dumps(record).decode())
        groups.append(group)
    return groups


def _run(settings: Settings, groups: list[Group]) -> tuple[list[list[LineOutcome]], Any]:
    writer = GroupWriter(settings, embedder=None, index=False)
    writer.start()
    try:
        answers = []
        for group in groups:
            keys = []
            for line in group:
                try:
                    keys.append(key_of(orjson.loads(line)))
                except (orjson.JSONDecodeError, KeyError):
                    keys.append(None)  # as the service's intake: a line naming no turn
            answers.append(writer.submit(group, keys).result(timeout=120))
        assert writer.flush(timeout_s=120)
    finally:
        writer.close()
    logs = LakeStore(settings.lake).read(Table.TURN_LOGS,
                                         columns=["conversation_id", "turn_id", "payload"])
    quarantined = LakeStore(settings.lake).read(Table.QUARANTINE, columns=["line", "reason"])
    return answers, (sorted(zip(*(logs[c].to_pylist() for c in logs.column_names),
                                strict=True)),
                     sorted(r.split(" (", 1)[0] for r in quarantined["reason"].to_pylist()))


@pytest.mark.parametrize("seed", range(6))
def test_spooled_answers_and_lake_equal_committed_ones(tmp_path: Path, seed: int) -> None:
    groups = _scenario(seed)
    spooled = Settings(lake=tmp_path / "spooled", embedding_model="hashing-64")
    committed = spooled.with_(lake=tmp_path / "committed", record_spool=False)
    answers, lake = _run(spooled, groups)
    assert (answers, lake) == _run(committed, groups)
    statuses = {o.status for answer in answers for o in answer}
    assert "accepted" in statuses
    assert not list((tmp_path / "spooled" / "_spool").iterdir())  # all committed, spool gone
