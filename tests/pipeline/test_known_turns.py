"""KnownTurns against the plain read of the TurnLog table, through appends by its own writer
and another, deletions and table upkeep."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from lake.timelines import conversation_filter
from pipeline.ingest import Ingestor
from pipeline.known_turns import COLUMNS, KnownTurns
from tests.factories import BASE_TIME, make_record

CONVERSATIONS = [("acme", f"c-{i}") for i in range(6)]


def _oracle(store: LakeStore, asked: set[tuple[str, str]]) -> list[tuple[object, ...]]:
    rows = store.read(Table.TURN_LOGS, columns=list(COLUMNS), filter=conversation_filter(asked))
    return _sorted(rows)


def _sorted(rows: pa.Table) -> list[tuple[object, ...]]:
    return sorted(zip(*(rows[c].to_pylist() for c in COLUMNS), strict=True))


def _turns(rng: random.Random, first: int, n: int) -> list[str]:
    return [json.dumps(make_record(first + i, conversation=rng.choice(CONVERSATIONS)[1],
                                   at=BASE_TIME + timedelta(minutes=first + i)))
            for i in range(n)]


def test_kept_turns_equal_the_tables_through_appends_deletes_and_upkeep(
        tmp_path: Path) -> None:
    from pipeline.maintain import maintain

    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    store = LakeStore(settings.lake)
    mine, other = Ingestor(settings, store=store), Ingestor(settings)
    known = KnownTurns(store)
    rng = random.Random(7)
    assert known.read({CONVERSATIONS[0]}).num_rows == 0  # no table yet
    n = 0
    for step in range(24):
        op = rng.choice(["mine", "mine", "other", "delete", "upkeep"] if step else ["mine"])
        if op in ("mine", "other"):
            (mine if op == "mine" else other).ingest_records(_turns(rng, n, rng.randint(1, 4)))
            n += 4
        elif op == "delete":
            store.delete(Table.TURN_LOGS, f"conversation_id = '{rng.choice(CONVERSATIONS)[1]}'"
                         f" AND turn_id = 't-{rng.randrange(max(n, 1)):04d}'")
        else:
            maintain(settings, grace_s=0)
        asked = set(rng.sample(CONVERSATIONS, rng.randint(1, 3)))
        assert _sorted(known.read(asked)) == _oracle(store, asked), (step, op)


def test_an_erased_turn_recorded_again_is_new_again(tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    store = LakeStore(settings.lake)
    writer = Ingestor(settings, store=store)
    record = json.dumps(make_record(1))
    assert writer.ingest_records([record]).accepted == 1
    assert writer.ingest_records([record]).accepted == 0  # a duplicate, from the kept view
    store.delete(Table.TURN_LOGS, "turn_id = 't-0001'")  # another process erased it
    assert writer.ingest_records([record]).accepted == 1


def test_a_conversation_first_asked_after_another_writer_stored_it_is_read(
        tmp_path: Path) -> None:
    # The view lists the table's conversations to skip reads for ones never stored; one that
    # another writer stored after the listing must come from the files added since.
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    store = LakeStore(settings.lake)
    Ingestor(settings).ingest_records([json.dumps(make_record(0, conversation="c-0"))])
    known = KnownTurns(store)
    assert len(_sorted(known.read({("acme", "c-0")}))) == 1
    assert known.read({("acme", "c-1")}).num_rows == 0  # never stored: nothing to read
    Ingestor(settings).ingest_records([json.dumps(make_record(1, conversation="c-1")),
                                       json.dumps(make_record(2, conversation="c-2"))])
    for asked in ({("acme", "c-1")}, {("acme", "c-2")}, {("acme", "c-0"), ("acme", "c-2")}):
        assert _sorted(known.read(asked)) == _oracle(store, asked), asked
