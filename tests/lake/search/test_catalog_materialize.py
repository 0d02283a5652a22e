from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from lake.errors import AccessDenied, QueryError, RefError, RefExpired, RefNotFound
from lake.records import Submission
from lake.search.access import Principal
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.ingest import Ingestor
from tests.factories import BASE_TIME, make_record, rich_record, write_jsonl

ANA = Principal("acme", "u-ana")
BEN = Principal("acme", "u-ben")
ANALYST = Principal("acme", analyst=True)
AS_OF = BASE_TIME + timedelta(days=2)
REF = "conv:fi:conv_c-1.turn_t-0002.files/forecast.csv"


@pytest.fixture
def store(settings: Settings, tmp_path: Path) -> LakeStore:
    records = [make_record(i, at=BASE_TIME + timedelta(days=i - 3)) for i in (0, 1)]
    records += [rich_record(2), make_record(3),
                make_record(4, user="u-ben", conversation="c-ben"),
                make_record(5, conversation="c-short", ttl_days=1,
                            at=BASE_TIME - timedelta(days=5))]
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", records)])
    return LakeStore(settings.lake)


def test_turns_in_order_with_previews(store: LakeStore) -> None:
    turns = TurnCatalog(store).turns(ANA, "c-1", as_of=AS_OF)
    assert [t.turn_id for t in turns] == ["t-0000", "t-0001", "t-0002", "t-0003"]
    assert [t.ordinal for t in turns] == [1, 2, 3, 4]
    assert turns[2].first_user_message == "the openpyxl workbook shows wrong hours"
    assert turns[0].last_completion.startswith("answer number 0")


@pytest.mark.parametrize(("phrase", "expected"), [
    ("first turn", ["t-0000"]), ("the last turn", ["t-0003"]), ("3rd turn", ["t-0002"]),
    ("the 2nd to last turn", ["t-0002"]),
])
def test_ordinal_phrases(store: LakeStore, phrase: str, expected: list[str]) -> None:
    turns = TurnCatalog(store).resolve(ANA, phrase, conversation_id="c-1", as_of=AS_OF)
    assert [t.turn_id for t in turns] == expected


def test_time_phrases(store: LakeStore) -> None:
    catalog = TurnCatalog(store)
    # AS_OF is 2026-03-12; BASE_TIME (turns 2, 3) is 2026-03-10; turn 0 on 03-07, turn 1 on 03-08
    got = catalog.resolve(ANA, "2026-03-10", as_of=AS_OF)
    assert [t.turn_id for t in got] == ["t-0002", "t-0003"]
    assert [t.ordinal for t in got] == [3, 4]
    last_week = catalog.resolve(ANA, "last week", as_of=AS_OF)
    assert [t.turn_id for t in last_week] == ["t-0000", "t-0001"]
    assert catalog.resolve(ANA, "in March 2026", as_of=AS_OF)[0].turn_id == "t-0000"


def test_catalog_access_and_expiry(store: LakeStore) -> None:
    catalog = TurnCatalog(store)
    # an end user gets one answer for another user's conversation, an expired one and none
    refusals = []
    for conversation in ("c-ben", "c-short", "c-none"):  # another's, past its TTL, never
        with pytest.raises(AccessDenied) as refused:
            catalog.turns(ANA, conversation, as_of=AS_OF)
        refusals.append(str(refused.value).replace(conversation, "C"))
    assert len(set(refusals)) == 1
    assert [t.turn_id for t in catalog.turns(ANALYST, "c-ben", as_of=AS_OF)] == ["t-0004"]
    assert catalog.turns(ANALYST, "c-short", as_of=AS_OF) == []
    with pytest.raises(QueryError, match="has 4 turns"):
        catalog.nth(ANA, "c-1", 9, as_of=AS_OF)
    names = [c.conversation_id for c in catalog.conversations(ANA, as_of=AS_OF)]
    assert names == ["c-1"]
    assert {c.conversation_id for c in catalog.conversations(ANALYST, as_of=AS_OF)} == {
        "c-1", "c-ben"}


def test_materialize_rich_turn_with_files(store: LakeStore) -> None:
    turn = TurnMaterializer(store).turn(ANA, "c-1", "t-0002", as_of=AS_OF)
    assert [s["event_type"] for s in turn.submissions] == ["prompt", "followup", "steer"]
    assert turn.ordinal == 3 and turn.writer == "rich"
    assert [f.ref for f in turn.files] == [REF]
    assert turn.files[0].name == "forecast.csv" and turn.files[0].size == 17
    assert [s["status"] for s in turn.steps] == ["started", "completed"]
    assert turn.citations[0]["title"] == "openpyxl docs"
    assert any(e["type"] == "badge.cost" for e in turn.events)
    assert turn.usage == {"tokens_in": 120, "tokens_out": 80, "cost_usd": 0.01,
                          "duration_ms": 4000}
    assert turn.attachments[0]["name"] == "march.xlsx"
    with pytest.raises(AccessDenied, match=r"may not read turn c-1/t-0002$"):
        TurnMaterializer(store).turn(BEN, "c-1", "t-0002", as_of=AS_OF)
    with pytest.raises(AccessDenied, match=r"may not read turn c-1/t-9999$"):  # none: alike
        TurnMaterializer(store).turn(BEN, "c-1", "t-9999", as_of=AS_OF)
    with pytest.raises(QueryError):
        TurnMaterializer(store).turn(ANALYST, "c-1", "t-9999", as_of=AS_OF)


def test_a_materialized_turns_parts_are_the_record_models_own(store: LakeStore) -> None:
    turn = TurnMaterializer(store).turn(ANA, "c-1", "t-0002", as_of=AS_OF)
    parts = turn.parts()
    stored = rich_record(2)
    assert [s.model_dump(mode="json") for s in parts.submissions] == \
        [Submission.model_validate(s).model_dump(mode="json") for s in stored["submissions"]]
    assert [a.name for a in parts.attachments] == [a["name"] for a in stored["attachments"]]
    assert [s.status for s in parts.steps] == ["started", "completed"]
    assert parts.steps == sorted(parts.steps, key=lambda s: s.at)
    assert parts.citations[0].url == "https://example.com/openpyxl"
    assert parts.usage is not None and parts.usage.tokens_in == 120
    assert parts.feedback is not None and parts.feedback.rating == 1
    assert [e.seq for e in parts.events] == [int(e["seq"]) for e in turn.events]
    cost = next(e for e in parts.events if e.type == "badge.cost")
    assert cost.data == next(e["data"] for e in turn.events if e["type"] == "badge.cost")


def test_ref_resolution_errors_are_distinct(store: LakeStore) -> None:
    materializer = TurnMaterializer(store)
    card, data = materializer.resolve(ANA, REF, as_of=AS_OF)
    assert data == b"month,hours\n3,12\n" and card.mime == "text/csv"
    with pytest.raises(RefError):
        materializer.resolve(ANA, "conv:fi:conv_c-1.turn_t-0002.files/../x", as_of=AS_OF)
    with pytest.raises(RefNotFound):
        materializer.resolve(ANA, REF.replace("forecast", "nothing"), as_of=AS_OF)
    with pytest.raises(AccessDenied):
        materializer.resolve(BEN, REF, as_of=AS_OF)
    with pytest.raises(RefExpired):
        materializer.resolve(ANA, REF, as_of=AS_OF + timedelta(days=400))
    with pytest.raises(RefNotFound):
        materializer.resolve(Principal("globex", "u-ana"), REF, as_of=AS_OF)


def test_untitled_conversations_across_months_are_named_by_their_first_prompt(
        settings: Settings, tmp_path: Path) -> None:
    # Conversations starting in different months, each going on into a later one: the title
    # is the first prompt, however many months the read of the earliest one has to span.
    start = BASE_TIME.replace(day=20)
    records = []
    for n, (conversation, months_back) in enumerate((("c-old", 3), ("c-new", 1))):
        first = start - timedelta(days=31 * months_back)
        for i, at in enumerate((first, first + timedelta(days=20), start)):
            records.append(make_record(
                10 * n + i, conversation=conversation, at=at, conversation_title=None,
                prompt=f"{conversation} prompt {i}"))
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "months.jsonl", records)])
    titles = TurnCatalog(LakeStore(settings.lake)).titles(ANALYST, ["c-new", "c-old"])
    assert titles == {"c-old": "c-old prompt 0", "c-new": "c-new prompt 0"}
