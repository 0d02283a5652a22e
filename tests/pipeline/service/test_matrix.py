"""Every endpoint × every role × own / other user / other tenant / missing, on a real server.

A refused call must not tell whether the object it reached for exists: the refusals of an
object of another user, of another tenant and of none at all are the same answer once the
requested ids are blanked out.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.pipeline.service.conftest import Served

ROLES = ("user", "analyst", "recorder", "admin")
TARGETS = ("own", "other_user", "other_tenant", "missing")
# The seeded turn each target names (see conftest), as (conversation, turn).
TURNS = {"own": ("c-1", "t-0000"), "other_user": ("c-2", "t-0100"),
         "other_tenant": ("c-9", "t-0200"), "missing": ("c-404", "t-9999")}
MISSING_REF = "conv:fi:conv_c-404.turn_t-9999.files/none.csv"

# Expected status of each read endpoint, by role and target. Users see only their own user's
# objects and get the one refusal (403) for anything else; analysts and admins see their
# tenant, where another tenant's object is as absent as a missing one.
TURN_SHOW = {
    "user": {"own": 200, "other_user": 403, "other_tenant": 403, "missing": 403},
    "analyst": {"own": 200, "other_user": 200, "other_tenant": 404, "missing": 404},
    "recorder": dict.fromkeys(TARGETS, 403),
    "admin": {"own": 200, "other_user": 200, "other_tenant": 404, "missing": 404},
}
CATALOG = {
    "user": {"own": 200, "other_user": 403, "other_tenant": 403, "missing": 403},
    "analyst": dict.fromkeys(TARGETS, 200),
    "recorder": dict.fromkeys(TARGETS, 403),
    "admin": dict.fromkeys(TARGETS, 200),
}
REFS = TURN_SHOW


def _ref(served: Served, target: str) -> str:
    return {"own": served.own_ref, "other_user": served.other_ref,
            "other_tenant": served.zeta_ref, "missing": MISSING_REF}[target]


def _blank(answer: httpx.Response, *ids: str) -> tuple[int, str]:
    text = answer.text
    for value in ids:
        text = text.replace(value, "ID")
    return answer.status_code, text


def _client(served: Served, role: str) -> httpx.Client:
    return served.server.client(served.keys[role])


@pytest.mark.parametrize("role", ROLES)
def test_turn_show(served: Served, role: str) -> None:
    refusals = set()
    with _client(served, role) as client:
        for target in TARGETS:
            conversation, turn = TURNS[target]
            answer = client.get(f"/v1/conversations/{conversation}/turns/{turn}")
            assert answer.status_code == TURN_SHOW[role][target], (target, answer.text)
            if answer.status_code == 200:
                assert answer.json()["turn_id"] == turn
                assert answer.json()["tenant"] == "acme"
            elif target != "own":
                refusals.add(_blank(answer, conversation, turn))
    assert len(refusals) <= 1, refusals


@pytest.mark.parametrize("role", ROLES)
def test_catalog(served: Served, role: str) -> None:
    refusals = set()
    with _client(served, role) as client:
        for target in TARGETS:
            conversation, turn = TURNS[target]
            answer = client.get("/v1/catalog", params={"conversation": conversation})
            assert answer.status_code == CATALOG[role][target], (target, answer.text)
            if answer.status_code == 200:
                turns = answer.json()["turns"]
                # An analyst sees its tenant's turns only: another tenant's conversation is
                # as empty as a missing one.
                expected = [turn] if target in ("own", "other_user") else []
                assert [t["turn_id"] for t in turns][:1] == expected
            elif target != "own":
                refusals.add(_blank(answer, conversation))
    assert len(refusals) <= 1, refusals


@pytest.mark.parametrize("role", ROLES)
def test_refs(served: Served, role: str) -> None:
    refusals = set()
    with _client(served, role) as client:
        for target in TARGETS:
            ref = _ref(served, target)
            answer = client.get(f"/v1/refs/{ref}")
            assert answer.status_code == REFS[role][target], (target, answer.text)
            if answer.status_code == 200:
                assert answer.headers["content-type"].startswith("text/csv")
                assert int(answer.headers["content-length"]) == len(answer.content)
                assert answer.content.startswith(b"marker,mk")
            elif target != "own":
                refusals.add(_blank(answer, ref))
    assert len(refusals) <= 1, refusals


@pytest.mark.parametrize(("role", "status", "users"), [
    ("user", 200, {"u-ana"}), ("analyst", 200, {"u-ana", "u-ben"}),
    ("admin", 200, {"u-ana", "u-ben"}), ("recorder", 403, set())])
def test_search_and_conversations(served: Served, role: str, status: int,
                                  users: set[str]) -> None:
    scope = "user" if role == "user" else "tenant"
    with _client(served, role) as client:
        # The seeded markers of u-ana's c-1/t-0000 and u-ben's c-2/t-0100: other tests add
        # many more "forecast" turns to this lake.
        found = client.post("/v1/search", json={"query": "mk0 mk100", "scope": scope,
                                                "max_per_conversation": 0})
        assert found.status_code == status, found.text
        listed = client.get("/v1/conversations")
        assert listed.status_code == status, listed.text
        if status == 200:
            assert {h["user_id"] for h in found.json()["hits"]} == users, found.text[:500]
            assert {h["tenant"] for h in found.json()["hits"]} == {"acme"}
            assert {c["user_id"] for c in listed.json()["conversations"]} == users


def test_a_user_key_cannot_widen_its_scope(served: Served) -> None:
    with _client(served, "user") as client:
        for body in ({"query": "forecast", "scope": "tenant"},
                     {"query": "forecast", "user": "u-ben"},
                     {"query": "forecast", "user": "u-nobody"}):
            answer = client.post("/v1/search", json=body)
            assert answer.status_code == 403, answer.text
        # Another user's (or no) conversation in conversation scope finds nothing.
        for conversation in ("c-2", "c-404"):
            answer = client.post("/v1/search", json={"query": "forecast",
                                                     "scope": "conversation",
                                                     "conversation": conversation})
            assert answer.status_code == 200 and answer.json()["hits"] == []
        assert client.get("/v1/conversations", params={"user": "u-ben"}).status_code == 403


@pytest.mark.parametrize("role", ROLES)
def test_recording_needs_a_recorder_or_admin_key(served: Served, role: str) -> None:
    from tests.reliability.lake_audit import turn_record

    record = turn_record(300 + ROLES.index(role), conversation=f"c-rec-{role}")
    with _client(served, role) as client:
        answer = client.post("/v1/turns", json=record)
    assert answer.status_code == (200 if role in ("recorder", "admin") else 403), answer.text
    if answer.status_code == 200:
        assert answer.json()["turns"][0]["status"] == "accepted"


@pytest.mark.parametrize("role", ROLES)
def test_erasing_needs_an_admin_key(served: Served, role: str) -> None:
    with _client(served, role) as client:
        for path in ("/v1/conversations/c-404", "/v1/users/u-nobody"):
            answer = client.delete(path)
            assert answer.status_code == (200 if role == "admin" else 403), answer.text
            if role == "admin":
                assert not any(answer.json()["deleted"].values())


def test_no_key_or_a_bad_key_is_401_everywhere(served: Served) -> None:
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/turns", {"json": {"turns": []}}),
        ("POST", "/v1/search", {"json": {"query": "x"}}),
        ("GET", "/v1/catalog", {"params": {"conversation": "c-1"}}),
        ("GET", "/v1/conversations", {}),
        ("GET", "/v1/conversations/c-1/turns/t-0000", {}),
        ("GET", f"/v1/refs/{served.own_ref}", {}),
        ("DELETE", "/v1/conversations/c-1", {}),
        ("DELETE", "/v1/users/u-ana", {}),
    ]
    forged = served.keys["admin"][:-3] + "abc"
    for key in (None, "not-a-key", forged):
        with served.server.client(key) as client:
            for method, path, kwargs in calls:
                answer = client.request(method, path, **kwargs)
                assert answer.status_code == 401, (key, path, answer.text)
                assert answer.json()["error"]["code"] == "unauthenticated"
    with served.server.client() as client:
        assert client.get("/healthz").json()["status"] == "ok"
        assert "turnlake_request_seconds" in client.get("/metrics").text
        assert client.get("/openapi.json").json()["paths"]["/v1/search"]


def test_an_admin_erases_only_in_its_tenant(served: Served) -> None:
    with served.server.client(served.keys["zeta_admin"]) as zeta:
        # c-3 is acme's (u-ben): zeta's admin erases nothing of it.
        answer = zeta.delete("/v1/conversations/c-3")
        assert answer.status_code == 200 and not any(answer.json()["deleted"].values())
    with _client(served, "analyst") as analyst:
        assert [t["turn_id"] for t in analyst.get(
            "/v1/catalog", params={"conversation": "c-3"}).json()["turns"]] == ["t-0101"]
    with _client(served, "admin") as admin:
        answer = admin.delete("/v1/conversations/c-3")
        assert answer.status_code == 200 and answer.json()["deleted"]["turn_logs"] == 1
    with _client(served, "analyst") as analyst:
        assert analyst.get("/v1/catalog", params={"conversation": "c-3"}).json()["turns"] == []
