"""A seeded lake served by a real ``turnlake serve`` process, shared by the API tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pipeline.service.server import Server, make_keys, wait_until
from tests.reliability.lake_audit import turn_record


@dataclass(frozen=True)
class Served:
    """The shared server, its keys, and the ids of the seeded objects."""

    server: Server
    keys: dict[str, str]
    lake: Path
    own_ref: str  # a hosted file of u-ana's turn c-1/t-0000
    other_ref: str  # one of u-ben's turn c-2/t-0100
    zeta_ref: str  # one of tenant zeta's turn c-9/t-0200


def seed_records() -> dict[str, list[dict[str, object]]]:
    """The seeded turns, by the recorder that writes them."""
    return {
        "recorder": [turn_record(0, rich=True), turn_record(1),
                     turn_record(100, user="u-ben", conversation="c-2", rich=True),
                     turn_record(101, user="u-ben", conversation="c-3")],
        "zeta_recorder": [turn_record(200, tenant="zeta", user="u-zed", conversation="c-9",
                                      rich=True)],
    }


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server over a lake with turns of two users of acme and one of zeta."""
    lake = tmp_path_factory.mktemp("served") / "lake"
    keys = make_keys(lake)
    with Server(lake) as server:
        for recorder, records in seed_records().items():
            with server.client(keys[recorder]) as client:
                answer = client.post("/v1/turns", json={"turns": records})
                assert answer.status_code == 200, answer.text
                assert answer.json()["accepted"] == len(records), answer.text
        refs = {}
        for who, path in (("analyst", "c-1/turns/t-0000"), ("analyst", "c-2/turns/t-0100"),
                          ("zeta_admin", "c-9/turns/t-0200")):
            with server.client(keys[who]) as client:
                shown = client.get(f"/v1/conversations/{path}")
                assert shown.status_code == 200, shown.text
                refs[path] = shown.json()["files"][0]["ref"]
        with server.client(keys["analyst"]) as client:
            assert wait_until(lambda: len(client.post("/v1/search", json={
                "query": "forecast", "scope": "tenant", "max_per_conversation": 0}
                ).json()["hits"]) == 4), "the seeded turns never became searchable"
        yield Served(server, keys, lake, refs["c-1/turns/t-0000"], refs["c-2/turns/t-0100"],
                     refs["c-9/turns/t-0200"])
