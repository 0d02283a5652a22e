"""Bad recording and search input: each a clear per-request or per-record error, nothing
else lost."""

from __future__ import annotations

import json

import httpx
import orjson

from tests.pipeline.service.conftest import Served
from tests.reliability.lake_audit import turn_record

NDJSON = {"Content-Type": "application/x-ndjson"}


def _recorder(served: Served) -> httpx.Client:
    return served.server.client(served.keys["recorder"])


def test_malformed_json_is_one_clear_400(served: Served) -> None:
    with _recorder(served) as client:
        for body in (b"{not json", b"[1, 2", b"", b"42", b'"a turn"'):
            answer = client.post("/v1/turns", content=body,
                                 headers={"Content-Type": "application/json"})
            assert answer.status_code == 400, (body, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "malformed_body" and error["message"]


def test_unknown_fields_beside_turns_are_refused(served: Served) -> None:
    with _recorder(served) as client:
        answer = client.post("/v1/turns", json={"turns": [turn_record(400)], "tenant": "acme"})
    assert answer.status_code == 400 and "unknown field(s) beside turns: tenant" in answer.text


def test_bad_records_are_rejected_one_by_one_and_the_good_kept(served: Served) -> None:
    good = turn_record(401, conversation="c-bad")
    wrong_schema = {**turn_record(402, conversation="c-bad"), "schema": "turnlake.turn.v0"}
    unknown_field = {**turn_record(403, conversation="c-bad"), "mood": "happy"}
    bad_time = {**turn_record(404, conversation="c-bad"), "started_at": "yesterday"}
    other_tenant = turn_record(405, tenant="zeta", conversation="c-bad")
    with _recorder(served) as client:
        answer = client.post("/v1/turns", json={"turns": [
            good, wrong_schema, unknown_field, bad_time, other_tenant, "not an object", good]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    statuses = [(t["status"], t["field"]) for t in body["turns"]]
    assert statuses == [("accepted", None), ("rejected", "schema"), ("rejected", "mood"),
                        ("rejected", "started_at"), ("rejected", "tenant"),
                        ("rejected", None), ("duplicate", None)]
    assert (body["accepted"], body["duplicates"], body["rejected"]) == (1, 1, 5)
    assert all(t["reason"] for t in body["turns"][1:])
    assert "not the key's tenant" in body["turns"][4]["reason"]
    with served.server.client(served.keys["zeta_admin"]) as zeta:
        # The refused turn of tenant zeta went nowhere.
        assert zeta.get("/v1/catalog", params={"conversation": "c-bad"}).json()["turns"] == []
    with served.server.client(served.keys["analyst"]) as analyst:
        turns = analyst.get("/v1/catalog", params={"conversation": "c-bad"}).json()["turns"]
    assert [t["turn_id"] for t in turns] == ["t-0401"]


def test_ndjson_with_a_broken_line(served: Served) -> None:
    lines = [orjson.dumps(turn_record(410, conversation="c-nd")), b"{broken",
             orjson.dumps(turn_record(411, conversation="c-nd"))]
    with _recorder(served) as client:
        answer = client.post("/v1/turns", content=b"\n".join(lines) + b"\n", headers=NDJSON)
    assert answer.status_code == 200, answer.text
    assert [t["status"] for t in answer.json()["turns"]] == ["accepted", "rejected", "accepted"]
    assert "line 2 is not valid JSON" in answer.json()["turns"][1]["reason"]


def test_another_users_conversation_is_rejected_with_its_field(served: Served) -> None:
    # c-1 is u-ana's: a turn of u-ben in it is refused, as turnlake ingest refuses it.
    with _recorder(served) as client:
        answer = client.post("/v1/turns", json=turn_record(420, user="u-ben"))
    outcome = answer.json()["turns"][0]
    assert (outcome["status"], outcome["field"]) == ("rejected", "user_id"), outcome


def test_a_body_over_the_limit_is_413(served: Served) -> None:
    blob = "x" * (10 * 1024 * 1024 + 1)
    with _recorder(served) as client:
        answer = client.post("/v1/turns", content=json.dumps({"turns": [blob]}),
                             headers={"Content-Type": "application/json"})
        assert answer.status_code == 413, answer.text[:300]
        assert answer.json()["error"]["code"] == "payload_too_large"

        # Without a Content-Length (chunked), the limit holds as the bytes arrive.
        def chunks() -> object:
            for _ in range(11):
                yield b"x" * (1024 * 1024)

        answer = client.post("/v1/turns", content=chunks(), headers=NDJSON)  # type: ignore[arg-type]
        assert answer.status_code == 413, answer.text[:300]
        # The server goes on serving.
        assert client.post("/v1/turns", json=turn_record(430, conversation="c-after")
                           ).json()["accepted"] == 1


def test_ten_thousand_turns_in_one_request(served: Served) -> None:
    records = [turn_record(1000 + i, conversation=f"c-bulk-{i // 100}") for i in range(10_000)]
    with _recorder(served) as client:
        answer = client.post("/v1/turns", content=b"\n".join(orjson.dumps(r) for r in records),
                             headers=NDJSON)
        assert answer.status_code == 200, answer.text[:500]
        assert answer.json()["accepted"] == 10_000
        again = client.post("/v1/turns", json={"turns": records[:50]})
        assert again.json()["duplicates"] == 50
    with served.server.client(served.keys["analyst"]) as analyst:
        turns = analyst.get("/v1/catalog", params={"conversation": "c-bulk-99"}).json()["turns"]
    assert len(turns) == 100


def test_bad_search_requests(served: Served) -> None:
    with served.server.client(served.keys["analyst"]) as client:
        cases = [({"query": "x", "tenant": "zeta"}, 422, "tenant"),
                 ({"query": "x", "analyst": True}, 422, "analyst"),
                 ({"query": 3}, 422, "query"),
                 ({"query": "x", "scope": "world"}, 422, "scope"),
                 ({"query": "x", "since": "last tuesday"}, 400, "since"),
                 ({"query": "x", "k": 0}, 422, "k"),
                 ({"query": "x", "time_weight": -1}, 422, "time_weight"),
                 ({"query": "x", "time_weight": "lots"}, 422, "time_weight")]
        for body, status, field in cases:
            answer = client.post("/v1/search", json=body)
            assert answer.status_code == status, (body, answer.text)
            assert answer.json()["error"].get("field") == field, answer.text
        # a time in the query is read, and the answer says how
        answer = client.post("/v1/search", json={"query": "forecast in March 2026",
                                                 "scope": "tenant"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["named_times"] == [{
            "phrase": "in March 2026", "start": "2026-03-01T00:00:00+00:00",
            "end": "2026-04-01T00:00:00+00:00"}]
        answer = client.post("/v1/search", content=b"{oops",
                             headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "malformed_body"
