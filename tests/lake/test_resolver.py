"""Every namespace's addresses resolve through one resolver, under the file refs' rules."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from lake.addresses import parse_address, row_address_of_id
from lake.deletion.target import ErasureTarget
from lake.errors import AccessDenied, RefError, RefExpired, RefNotFound
from lake.resolver import RefResolver, ResolvedFile, ResolvedRecord
from lake.search.access import Principal
from lake.search.materialize import MaterializedTurn, TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.ingest import Ingestor
from pipeline.jobs import run_ingest
from pipeline.maintain import maintain
from pipeline.retention import erase
from tests.factories import BASE_TIME, make_record, rich_record, write_jsonl

ANA = Principal("acme", "u-ana")
BEN = Principal("acme", "u-ben")
ANALYST = Principal("acme", analyst=True)
AS_OF = BASE_TIME + timedelta(days=2)
FILE = "conv:fi:conv_c-1.turn_t-0002.files/forecast.csv"


def _rich(summary: str | None = None) -> dict[str, object]:
    record = rich_record(2)
    if summary is not None:
        record["summary"] = summary
    record["completion"] = {**record["completion"], "text": (  # type: ignore[dict-item]
        f"Produced the final forecast at {FILE}. Earlier: conv:ar:conv_c-1.turn_t-0001.record, "
        "conv:tc:conv_c-1.turn_t-0002.steps/9 and conv:xx:nothing.")}
    return record


@pytest.fixture
def store(settings: Settings, tmp_path: Path) -> LakeStore:
    records = [make_record(1), _rich(), make_record(4, user="u-ben", conversation="c-ben"),
               make_record(5, conversation="c-short", ttl_days=1)]
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", records)])
    return LakeStore(settings.lake)


def _turn(store: LakeStore, who: Principal = ANA, turn: str = "t-0002",
          as_of: object = AS_OF) -> MaterializedTurn:
    return TurnMaterializer(store).turn(who, "c-1", turn, as_of=as_of)  # type: ignore[arg-type]


def _resolve(store: LakeStore, ref: str, who: Principal = ANA,
             as_of: object = AS_OF) -> ResolvedRecord:
    got = RefResolver(TurnMaterializer(store)).resolve(who, ref, as_of=as_of)  # type: ignore[arg-type]
    assert isinstance(got, ResolvedRecord)
    return got


def test_each_namespace_resolves_to_its_object(store: LakeStore) -> None:
    shown = _turn(store)
    addresses = shown.addresses
    assert addresses is not None and shown.edition is not None
    record = _resolve(store, addresses.record)
    assert record.value["turn_id"] == "t-0002" and record.value["addresses"]["record"] == \
        addresses.record
    assert _resolve(store, addresses.completion).value == shown.completion
    assert [_resolve(store, a).value for a in addresses.submissions] == shown.submissions
    assert [_resolve(store, a).value for a in addresses.attachments] == shown.attachments
    assert [_resolve(store, a).value for a in addresses.citations] == shown.citations
    steps = [_resolve(store, a) for a in addresses.steps]
    assert [s.value for s in steps] == shown.steps and {s.namespace for s in steps} == {"tc"}
    events = [_resolve(store, a) for a in addresses.events]
    assert [e.value for e in events] == shown.events and {e.namespace for e in events} == {"ev"}
    rows = {a.split(":")[1]: [] for a in addresses.rows}  # type: dict[str, list[str]]
    for address in addresses.rows:
        got = _resolve(store, address)
        assert got.address == address and got.edition == shown.edition
        rows[got.namespace].append(got.value["role"])
        assert got.value["text"]  # the row's own searchable text
    assert rows == {"so": ["user", "user", "user", "assistant", "attachment"],
                    "ws": ["summary"], "su": ["anchor", "anchor", "note"]}
    assert _resolve(store, "conv:ws:conv_c-1.turn_t-0002.summary").value["text"] == \
        shown.summary
    got = RefResolver(TurnMaterializer(store)).resolve(ANA, FILE, as_of=AS_OF)
    assert isinstance(got, ResolvedFile) and got.data == b"month,hours\n3,12\n"


def test_an_address_without_edition_names_the_current_one(store: LakeStore) -> None:
    shown = _turn(store)
    assert shown.addresses is not None
    got = _resolve(store, "conv:so:conv_c-1.turn_t-0002.user/1")
    assert got.address == shown.addresses.rows[1] and got.value["event_type"] == "followup"
    # the timeline's block refs are addresses too
    assert _resolve(store, "conv:ar:conv_c-1.turn_t-0002.submissions/2").value["text"] == \
        "actually, use UTC"


def test_one_answer_for_another_users_object_and_for_none(store: LakeStore) -> None:
    shown = _turn(store)
    assert shown.addresses is not None
    resolver = RefResolver(TurnMaterializer(store))
    refusals = set()
    for ref in (shown.addresses.record, shown.addresses.steps[0], shown.addresses.rows[0],
                shown.addresses.events[0], FILE):
        for missing in (ref.replace("t-0002", "t-0999"), ref):  # none, then ana's own
            with pytest.raises(AccessDenied) as refused:
                resolver.resolve(BEN, missing, as_of=AS_OF)
            refusals.add(str(refused.value).replace("t-0999", "t-0002"))
        assert len(refusals) == 1, refusals
        refusals.clear()
        with pytest.raises(RefNotFound):
            resolver.resolve(ANALYST, ref.replace("t-0002", "t-0999"), as_of=AS_OF)
        with pytest.raises(RefNotFound):  # another tenant's object is as absent
            resolver.resolve(Principal("globex", analyst=True), ref, as_of=AS_OF)
    assert resolver.resolve(ANALYST, shown.addresses.record, as_of=AS_OF)


def test_an_index_past_the_end_is_missing_and_a_bad_path_is_malformed(store: LakeStore) -> None:
    resolver = RefResolver(TurnMaterializer(store))
    for ref in ("conv:tc:conv_c-1.turn_t-0002.steps/9", "conv:ev:conv_c-1.turn_t-0002.events/99",
                "conv:su:conv_c-1.turn_t-0002.note/5", "conv:ar:conv_c-1.turn_t-0002.citations/3"):
        with pytest.raises(RefNotFound):
            resolver.resolve(ANALYST, ref, as_of=AS_OF)
    for ref, message in (("conv:tc:conv_c-1.turn_t-0002.call/1", "steps/<i>"),
                         ("conv:so:conv_c-1.turn_t-0002.summary", "user/<seq>"),
                         ("conv:ws:conv_c-1.turn_t-0002.summary/0", "summary"),
                         ("conv:ar:conv_c-1.turn_t-0002.record@XYZ", "edition"),
                         ("conv:ev:conv_c-1.turn_t-0002.events/01", "index")):
        with pytest.raises(RefError, match=message):
            resolver.resolve(ANA, ref, as_of=AS_OF)


def test_an_expired_object_is_410_until_purged(store: LakeStore) -> None:
    resolver = RefResolver(TurnMaterializer(store))
    short = "conv:so:conv_c-short.turn_t-0005.user/0"
    assert _resolve(store, short, as_of=BASE_TIME).value["text"]
    for ref in (short, "conv:ar:conv_c-short.turn_t-0005.record"):
        with pytest.raises(RefExpired, match="expired at"):
            resolver.resolve(ANA, ref, as_of=AS_OF)


def test_refs_written_in_the_text_are_listed_with_what_they_lead_to(store: LakeStore) -> None:
    mentions = {m.ref: m for m in _turn(store).mentions}
    assert mentions[FILE].status == "found" and mentions[FILE].address == FILE
    record = mentions["conv:ar:conv_c-1.turn_t-0001.record"]
    assert record.status == "found" and record.address is not None
    assert parse_address(record.address).edition is not None
    assert mentions["conv:tc:conv_c-1.turn_t-0002.steps/9"].status == "missing"
    assert "conv:xx:nothing." not in mentions  # not a namespace: not a ref
    assert {m.source for m in mentions.values()} == {"completion"}


def test_addresses_survive_maintain_and_erasure_makes_them_missing(
        store: LakeStore, settings: Settings) -> None:
    before = _turn(store)
    assert before.addresses is not None
    maintain(settings, sleep=lambda _s: None, grace_s=0)
    after = _turn(store)
    assert after.addresses == before.addresses
    for address in (after.addresses.record, after.addresses.rows[0]):
        assert _resolve(store, address).address == address
    erase(settings, ErasureTarget("acme", conversation_id="c-1", turn_id="t-0002"),
          actor="test", settle=None)
    resolver = RefResolver(TurnMaterializer(store))
    every = [before.addresses.record, before.addresses.completion, *before.addresses.steps,
             *before.addresses.events, *before.addresses.rows, FILE]
    for address in every:
        with pytest.raises(AccessDenied):
            resolver.resolve(ANA, address, as_of=AS_OF)
        with pytest.raises(RefNotFound):
            resolver.resolve(ANALYST, address, as_of=AS_OF)


def test_a_superseded_edition_does_not_lead_to_its_successor(
        store: LakeStore, settings: Settings, tmp_path: Path) -> None:
    old = _turn(store)
    assert old.addresses is not None
    changed = _rich(summary="Goal: a different summary entirely.")
    run_ingest(settings, [write_jsonl(tmp_path / "again.jsonl", [changed])], embed=False,
               index=False, replace=True)
    new = _turn(store)
    assert new.addresses is not None and new.edition != old.edition
    resolver = RefResolver(TurnMaterializer(store))
    for address in (old.addresses.record, old.addresses.rows[4], old.addresses.steps[0]):
        with pytest.raises(RefNotFound, match="superseded") as gone:
            resolver.resolve(ANA, address, as_of=AS_OF)
        assert new.addresses.record in str(gone.value)
    assert _resolve(store, new.addresses.rows[4]).value["text"] == \
        "Goal: a different summary entirely."


def test_a_hits_row_id_makes_its_address() -> None:
    assert row_address_of_id("c-1.t-0002.anchor.1", "anchor", "0123456789") == \
        "conv:su:conv_c-1.turn_t-0002.anchor/1@0123456789"
    assert row_address_of_id("c-1.t-0002.assistant.0", "assistant", None) == \
        "conv:so:conv_c-1.turn_t-0002.assistant"
