"""``GET /v1/refs/{ref}`` on a real server: every namespace's address, a hit's, the one
refusal, 410 when expired, missing after erasure, and the answer's model in OpenAPI."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.pipeline.service.conftest import Served
from tests.pipeline.service.server import wait_until
from tests.reliability.lake_audit import file_bytes, turn_record


def _turn(client: httpx.Client, path: str) -> dict[str, Any]:
    shown = client.get(f"/v1/conversations/{path}")
    assert shown.status_code == 200, shown.text
    turn: dict[str, Any] = shown.json()
    return turn


def _get(client: httpx.Client, ref: str, **params: str) -> httpx.Response:
    return client.get(f"/v1/refs/{ref}", params=params)


def test_every_namespace_resolves_over_http(served: Served) -> None:
    with served.server.client(served.keys["user"]) as client:
        turn = _turn(client, "c-1/turns/t-0000")
        addresses = turn["addresses"]
        record = _get(client, addresses["record"])
        assert record.status_code == 200 and record.headers["content-type"] == \
            "application/json"
        assert record.json()["value"]["turn_id"] == "t-0000"
        assert _get(client, addresses["completion"]).json()["value"] == turn["completion"]
        assert _get(client, addresses["steps"][0]).json()["value"] == turn["steps"][0]
        assert _get(client, addresses["events"][0]).json()["value"] == turn["events"][0]
        namespaces = {}
        for address in addresses["rows"]:
            row = _get(client, address)
            assert row.status_code == 200, row.text
            namespaces[row.json()["namespace"]] = row.json()["value"]["text"]
        assert namespaces["ws"] == "mk0 summary" and namespaces["su"] == "mk0"
        assert namespaces["so"]
        file = _get(client, served.own_ref)
        assert file.status_code == 200 and file.content == file_bytes("mk0")


def test_a_hits_addresses_resolve_over_http(served: Served) -> None:
    with served.server.client(served.keys["user"]) as client:
        found = client.post("/v1/search", json={"query": "mk0 summary", "roles": ["summary"]})
        hit = found.json()["hits"][0]
        assert hit["address"].startswith("conv:ws:conv_c-1.turn_t-0000.summary@")
        assert _get(client, hit["address"]).json()["value"]["text"] == hit["text"]
        turn = _get(client, hit["turn_address"]).json()
        assert turn["kind"] == "record" and turn["value"]["addresses"]["record"] == \
            hit["turn_address"]


def test_one_refusal_for_another_users_object_and_none(served: Served) -> None:
    with served.server.client(served.keys["analyst"]) as analyst:
        bens = _turn(analyst, "c-2/turns/t-0100")["addresses"]
        for ref in (bens["record"], bens["steps"][0], bens["events"][0], bens["rows"][0]):
            assert _get(analyst, ref).status_code == 200
            missing = ref.replace("t-0100", "t-0999")
            assert _get(analyst, missing).status_code == 404
    with served.server.client(served.keys["user"]) as client:
        for ref in (bens["record"], bens["steps"][0], bens["events"][0], bens["rows"][0]):
            theirs = _get(client, ref)
            none = _get(client, ref.replace("t-0100", "t-0999"))
            assert theirs.status_code == none.status_code == 403
            assert theirs.text == none.text.replace("t-0999", "t-0100")


def test_expired_is_410_and_malformed_is_400(served: Served) -> None:
    with served.server.client(served.keys["user"]) as client:
        record = _turn(client, "c-1/turns/t-0000")["addresses"]["record"]
        expired = _get(client, record, as_of="2400-01-01")
        assert expired.status_code == 410 and expired.json()["error"]["code"] == "expired"
        bad = _get(client, "conv:tc:conv_c-1.turn_t-0000.call/1")
        assert bad.status_code == 400 and "steps/<i>" in bad.json()["error"]["message"]


def test_erasure_makes_every_address_missing(served: Served) -> None:
    record = turn_record(450, conversation="c-addr-erase", rich=True)
    with served.server.client(served.keys["recorder"]) as recorder:
        assert recorder.post("/v1/turns", json={"turns": [record]}).status_code == 200
    with served.server.client(served.keys["user"]) as client:
        turn = _turn(client, "c-addr-erase/turns/t-0450")
        addresses = turn["addresses"]
        every = [addresses["record"], addresses["completion"], *addresses["steps"],
                 *addresses["events"], *addresses["rows"], turn["files"][0]["ref"]]
        assert all(_get(client, ref).status_code == 200 for ref in every)
    with served.server.client(served.keys["admin"]) as admin:
        assert admin.delete("/v1/conversations/c-addr-erase").status_code == 200
        assert wait_until(lambda: _get(admin, addresses["record"]).status_code == 404)
        assert {_get(admin, ref).status_code for ref in every} == {404}
    with served.server.client(served.keys["user"]) as client:
        assert {_get(client, ref).status_code for ref in every} == {403}


def test_openapi_documents_the_record_answer(served: Served) -> None:
    with served.server.client() as client:
        spec = client.get("/openapi.json").json()
    ok = spec["paths"]["/v1/refs/{ref}"]["get"]["responses"]["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/ResolvedRecord"}
    assert "application/octet-stream" in ok
    model = spec["components"]["schemas"]["ResolvedRecord"]
    assert {"address", "namespace", "kind", "edition", "value"} <= set(model["properties"])


def test_refs_written_in_a_recorded_turn_are_listed_with_it(served: Served) -> None:
    record = turn_record(451, conversation="c-addr-mention", rich=True)
    own = "conv:fi:conv_c-addr-mention.turn_t-0451.files/mk451.csv"
    record["completion"] = {**record["completion"], "text": (
        f"Produced the forecast at {own}. Earlier: conv:tc:conv_c-1.turn_t-0000.steps/9.")}
    with served.server.client(served.keys["recorder"]) as recorder:
        assert recorder.post("/v1/turns", json={"turns": [record]}).status_code == 200
    with served.server.client(served.keys["user"]) as client:
        turn = _turn(client, "c-addr-mention/turns/t-0451")
        mentions = {m["ref"]: m for m in turn["mentions"]}
        assert mentions[own]["status"] == "found"
        assert _get(client, mentions[own]["address"]).content == file_bytes("mk451")
        assert mentions["conv:tc:conv_c-1.turn_t-0000.steps/9"]["status"] == "missing"
        # and the server reported the dangling one when it committed the turn
        assert wait_until(lambda: _unresolved(served) >= 1, timeout_s=60), \
            served.server.log_tail()
        logged = served.server.log_tail(50_000)  # rich wraps its lines: look for the parts
        assert "unresolved ref" in logged and "conv:tc:conv_c-1.turn_t-0000.steps/9" in logged


def _unresolved(served: Served) -> float:
    metrics = httpx.get(f"{served.server.url}/metrics").text
    found = re.search(r"^turnlake_unresolved_refs_total (\S+)$", metrics, re.M)
    return float(found.group(1)) if found else 0.0
