"""Every hit carries its matched row's address and its turn record's, and both resolve."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from lake.addresses import parse_address
from lake.embedding.hashing import HashingEmbedder
from lake.resolver import RefResolver, ResolvedRecord
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, rich_record, write_jsonl

AS_OF = BASE_TIME + timedelta(days=1)
ANA = Principal("acme", "u-ana")


def test_hits_carry_addresses_that_lead_back_to_the_row_and_turn(
        hashing_settings: Settings, tmp_path: Path) -> None:
    records = [rich_record(0, conversation="c-sheet"),
               make_record(1, conversation="c-deploy", prompt="ERR_CONNECTION_RESET on staging",
                           answer="restarted the ingress")]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(hashing_settings.lake)
    service = SearchService(store, embedder=HashingEmbedder(64))
    resolver = RefResolver(TurnMaterializer(store))
    roles = set()
    for query in ("ingress", "openpyxl", "timezone UTC summary", "march forecast sheet hours"):
        for hit in service.search(SearchRequest(query, ANA, as_of=AS_OF,
                                                roles=("user", "assistant", "summary",
                                                       "anchor", "attachment"))).hits:
            assert hit.address is not None and hit.turn_address is not None
            row = resolver.resolve(ANA, hit.address, as_of=AS_OF)
            assert isinstance(row, ResolvedRecord)
            assert row.value["row_id"] == hit.row_id and row.value["text"] == hit.text
            turn = resolver.resolve(ANA, hit.turn_address, as_of=AS_OF)
            assert isinstance(turn, ResolvedRecord)
            assert turn.value["turn_id"] == hit.turn_id
            assert turn.value["addresses"]["record"] == hit.turn_address
            assert hit.address in turn.value["addresses"]["rows"]
            roles.add((hit.role, parse_address(hit.address).namespace))
            assert hit.to_json()["address"] == hit.address
            # and the agent and app that recorded the turn, as its TurnLog says
            assert (hit.agent, hit.app) == (turn.value["agent"], turn.value["app"])
            assert hit.agent and hit.to_json()["agent"] == hit.agent
    assert {("assistant", "so"), ("anchor", "su")} <= roles, roles


def test_a_replaced_turns_hits_carry_its_new_edition(hashing_settings: Settings,
                                                     tmp_path: Path) -> None:
    first = make_record(1, conversation="c-deploy", prompt="ERR_CONNECTION_RESET on staging",
                        answer="restarted the ingress")
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", [first])])
    store = LakeStore(hashing_settings.lake)
    service = SearchService(store, embedder=HashingEmbedder(64))
    resolver = RefResolver(TurnMaterializer(store))
    request = SearchRequest("ingress", ANA, as_of=AS_OF)
    before = service.search(request).hits[0]
    assert service.search(request).hits[0].address == before.address  # remembered
    again = make_record(1, conversation="c-deploy", prompt="ERR_CONNECTION_RESET on staging",
                        answer="restarted the ingress and the proxy")
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "again.jsonl", [again])],
               replace=True)
    after = service.search(request).hits[0]
    assert after.address is not None and before.address is not None
    assert after.address != before.address
    row = resolver.resolve(ANA, after.address, as_of=AS_OF)
    assert isinstance(row, ResolvedRecord) and row.value["text"] == after.text


def test_appended_turns_are_learned_from_their_files_not_a_month_scan(
        hashing_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = [make_record(n, conversation=f"c-{n}", prompt=f"quokka{n} deploy question",
                           answer=f"quokka{n} answer") for n in range(3)]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(hashing_settings.lake)
    service = SearchService(store, embedder=HashingEmbedder(64))
    scans: list[object] = []
    scan = LakeStore.read

    def counted(self: LakeStore, table: Table, **kwargs: object) -> object:
        if table is Table.TURN_LOGS and kwargs.get("filter") is not None:
            scans.append(kwargs["filter"])
        return scan(self, table, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LakeStore, "read", counted)
    first = service.search(SearchRequest("quokka1", ANA, as_of=AS_OF)).hits[0]
    assert first.turn_address is not None and len(scans) == 1
    # a live writer's commits: each adds files; the new turns come from those files alone
    for n in (3, 4):
        record = make_record(n, conversation=f"c-{n}", prompt=f"quokka{n} deploy question",
                             answer=f"quokka{n} answer")
        run_ingest(hashing_settings, [write_jsonl(tmp_path / f"{n}.jsonl", [record])])
        hit = service.search(SearchRequest(f"quokka{n}", ANA, as_of=AS_OF)).hits[0]
        assert hit.turn_id == record["turn_id"] and hit.turn_address is not None
        assert (hit.agent, hit.app) == (record["agent"], record["app"])
    again = service.search(SearchRequest("quokka1", ANA, as_of=AS_OF)).hits[0]
    assert again.turn_address == first.turn_address
    assert len(scans) == 1, "no month was scanned again"
