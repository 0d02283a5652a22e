"""Request bodies and parameters: malformed JSON, a form's content type, the body limit on
every route, a bad time, and NDJSON line numbers."""

from __future__ import annotations

import httpx
import pytest

from tests.pipeline.service.conftest import Served

JSON = {"Content-Type": "application/json"}
LIMIT = 10 * 1024 * 1024  # the default max_body_bytes


def _client(served: Served, role: str = "analyst") -> httpx.Client:
    return served.server.client(served.keys[role])


@pytest.mark.parametrize("route", ["/v1/search", "/v1/pull"])
def test_malformed_json_is_a_400_saying_where(served: Served, route: str) -> None:
    with _client(served) as client:
        answer = client.post(route, content=b'{"query":', headers=JSON)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "malformed_body" and "field" not in error, error
    assert "not valid JSON" in error["message"] and "character 9" in error["message"]


@pytest.mark.parametrize(("route", "role"), [("/v1/search", "analyst"), ("/v1/pull", "analyst"),
                                             ("/v1/turns", "recorder")])
def test_json_sent_as_a_form_is_a_415_that_says_what_to_send(served: Served, route: str,
                                                            role: str) -> None:
    # What `curl -d` sends without a Content-Type of its own: one rule for every route.
    with _client(served, role) as client:
        answer = client.post(route, content=b'{"query": "forecast"}', headers={
            "Content-Type": "application/x-www-form-urlencoded"})
        assert answer.status_code == 415, answer.text
        error = answer.json()["error"]
        assert error["code"] == "unsupported_media", error
        assert "Content-Type: application/json" in error["message"]
    with _client(served) as client:
        # The service page's examples (docs/service.md), with the header, work.
        answer = client.post("/v1/search", content=b'{"query": "forecast", "scope": "tenant"}',
                             headers=JSON)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("route", ["/v1/search", "/v1/pull"])
def test_every_json_body_is_held_to_the_limit(served: Served, route: str) -> None:
    big = b'{"query": "' + b"x" * (2 * LIMIT) + b'"}'
    with _client(served) as client:
        answer = client.post(route, content=big, headers=JSON)
        assert answer.status_code == 413, answer.text[:300]
        assert answer.json()["error"]["code"] == "payload_too_large"

        # Without a Content-Length (chunked), the limit holds as the bytes arrive.
        def chunks() -> object:
            yield b'{"query": "'
            for _ in range(11):
                yield b"x" * (1024 * 1024)
            yield b'"}'

        answer = client.post(route, content=chunks(), headers=JSON)  # type: ignore[arg-type]
        assert answer.status_code == 413, answer.text[:300]
        # A body under the limit still gets through.
        small = client.post("/v1/search", json={"query": "forecast", "scope": "tenant"})
    assert small.status_code == 200, small.text


@pytest.mark.parametrize("role", ["user", "analyst"])
def test_a_bad_as_of_of_a_turn_is_a_400_for_every_reader(served: Served, role: str) -> None:
    with _client(served, role) as client:
        answer = client.get("/v1/conversations/c-1/turns/t-0000", params={"as_of": "x"})
    assert answer.status_code == 400, answer.text
    assert "as_of 'x' is not an ISO 8601 time" in answer.json()["error"]["message"]


def test_ndjson_reasons_give_the_physical_line(served: Served) -> None:
    body = b"{nope\n\n   \n{bad json\n"
    with _client(served, "recorder") as client:
        answer = client.post("/v1/turns", content=body,
                             headers={"Content-Type": "application/x-ndjson"})
    assert answer.status_code == 200, answer.text
    turns = answer.json()["turns"]
    assert [t["index"] for t in turns] == [0, 1]  # the turns' positions in the request
    assert turns[0]["reason"].startswith("line 1 is not valid JSON")
    assert turns[1]["reason"].startswith("line 4 is not valid JSON"), turns[1]


@pytest.mark.parametrize("route,params,said", [
    ("/v1/catalog", {"conversation": "c-1", "ordinal": 1, "when": "first turn"},
     "ordinal or when"),
    ("/v1/catalog", {"conversation": "c-1", "user": "u-ben"}, "conversation or user"),
])
def test_parameters_that_name_the_turns_twice_are_refused_not_ignored(
        served: Served, route: str, params: dict[str, object], said: str) -> None:
    for role in ("user", "analyst"):
        with _client(served, role) as client:
            answer = client.get(route, params=params)
        assert answer.status_code == 400, answer.text
        assert said in answer.json()["error"]["message"]


@pytest.mark.parametrize("body,said", [
    ({"query": "forecast", "roles": ["user"], "role": "assistant"}, "roles or role"),
    ({"query": "forecast", "scope": "tenant", "user": "u-ben"}, "covers every user"),
    ({"query": "forecast", "id": True}, "id"),
])
def test_search_options_that_would_be_ignored_are_refused(
        served: Served, body: dict[str, object], said: str) -> None:
    with _client(served) as client:
        answer = client.post("/v1/search", json=body)
    assert answer.status_code in (400, 422), answer.text
    assert said in str(answer.json()["error"])
