"""The contract as a generated client reads it: the OpenAPI document, paging, and errors that
name the field at fault."""

from __future__ import annotations

from tests.pipeline.service.conftest import Served


def test_the_openapi_document_describes_bodies_answers_and_errors(served: Served) -> None:
    with served.server.client() as client:
        doc = client.get("/openapi.json").json()
    body = doc["paths"]["/v1/turns"]["post"]["requestBody"]["content"]
    record, batch = body["application/json"]["schema"]["anyOf"]
    assert {"tenant", "conversation_id", "turn_id", "submissions", "completion"} <= set(
        record["properties"])
    assert batch["properties"]["turns"]["items"]["properties"] == record["properties"]
    assert "application/x-ndjson" in body
    error = {"$ref": "#/components/schemas/ErrorAnswer"}
    for path, methods in doc["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in methods.items():
            answers = operation["responses"]
            assert answers["200"]["content"], (method, path)
            for status in ("401", "422", "503"):
                schema = answers[status]["content"]["application/json"]["schema"]
                assert schema == error, (method, path, status)
    assert "415" in doc["paths"]["/v1/turns"]["post"]["responses"]


def test_list_routes_page_with_a_cursor(served: Served) -> None:
    with served.server.client(served.keys["analyst"]) as client:
        # Other tests add conversations to the shared lake: compare with one whole page.
        everything = client.get("/v1/conversations", params={"limit": 1000}).json()
        assert everything.get("next_cursor") is None
        expected = [c["conversation_id"] for c in everything["conversations"]]
        assert len(expected) >= 3
        size = max(2, len(expected) // 3)
        seen, cursor = [], None
        for _ in range(10):
            params = {"limit": size, **({"cursor": cursor} if cursor else {})}
            page = client.get("/v1/conversations", params=params).json()
            assert len(page["conversations"]) <= size
            seen += [c["conversation_id"] for c in page["conversations"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        assert seen == expected
        first = client.get("/v1/catalog", params={"conversation": "c-1", "limit": 1}).json()
        second = client.get("/v1/catalog", params={"conversation": "c-1", "limit": 1,
                                                   "cursor": first["next_cursor"]}).json()
        assert [t["turn_id"] for t in first["turns"] + second["turns"]] == ["t-0000",
                                                                            "t-0001"]
        assert second.get("next_cursor") is None
        bad = client.get("/v1/conversations", params={"cursor": "nonsense!"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "cursor"


def test_errors_name_the_field_not_a_cli_flag(served: Served) -> None:
    with served.server.client(served.keys["analyst"]) as client:
        answer = client.post("/v1/search", json={"query": "forecast"})  # scope user, no user
        error = answer.json()["error"]
        assert answer.status_code == 400 and error["field"] == "user", error
        assert "--" not in error["message"]
        answer = client.post("/v1/search", json={"query": "forecast", "scope": "conversation"})
        assert answer.json()["error"]["field"] == "conversation"
    with served.server.client(served.keys["user"]) as client:
        refused = client.post("/v1/turns", json={"turns": []})
    assert refused.status_code == 403
    assert refused.json()["error"]["message"].startswith("a user key may not")


def test_a_turn_writes_its_times_one_way(served: Served) -> None:
    with served.server.client(served.keys["analyst"]) as client:
        shown = client.get("/v1/conversations/c-1/turns/t-0000").json()
    times = [shown["started_at"], shown["ended_at"], shown["completion"]["at"],
             *(s["arrived_at"] for s in shown["submissions"]),
             *(f["expires_at"] for f in shown["files"])]
    assert all(t.endswith("Z") and "+00:00" not in t for t in times), times
