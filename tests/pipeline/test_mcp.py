"""The MCP tools: through the SDK's in-process client, over streamable HTTP with bearer keys,
and through `turnlake mcp` over stdio as a real subprocess."""

from __future__ import annotations

import base64
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import CallToolResult, TextContent

from lake.errors import AccessDenied, TurnlakeError
from lake.keys import KeyPrincipal, KeyStore
from lake.search.access import Principal
from lake.settings import Settings
from pipeline.jobs import run_ingest
from pipeline.mcp_server import create_mcp_server, mcp_http_app, resolve_key, turnlake_version
from tests.factories import make_record, write_jsonl

ANA = Principal("acme", "u-ana")
ANALYST = Principal("acme", analyst=True)
NOW = datetime.now(UTC).replace(microsecond=0)
CSV = b"month,hours\n3,12\n"
TOOLS = {"search_conversations", "list_turns", "get_turn", "get_ref", "pull_files"}


def _records() -> list[dict[str, Any]]:
    hosted = [{"path": "files/forecast.csv", "mime": "text/csv",
               "content_b64": base64.b64encode(CSV).decode()}]
    return [
        make_record(1, conversation="c-1", at=NOW - timedelta(days=3),
                    prompt="the openpyxl workbook shows wrong hours",
                    answer="converted the sheet to UTC", hosted_files=hosted),
        make_record(2, conversation="c-1", at=NOW - timedelta(hours=2),
                    prompt="deploy failed with ERR_CONNECTION_RESET",
                    answer="restarted the ingress"),
        make_record(3, user="u-ben", conversation="c-ben", at=NOW - timedelta(hours=1),
                    prompt="zanzibar budget ERR_CONNECTION_RESET", answer="in the vault"),
    ]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("mcp")
    settings = Settings(lake=root / "lake", embedding_model="hashing-64")
    run_ingest(settings, [write_jsonl(root / "in.jsonl", _records())])
    return settings


Session = Callable[[ClientSession], Awaitable[None]]


def _in_process(settings: Settings, principal: Principal, body: Session,
                workspace: Path | None = None) -> None:
    server = create_mcp_server(settings, principal, workspace=workspace)

    async def main() -> None:
        async with create_connected_server_and_client_session(server) as session:
            await body(session)

    anyio.run(main)


def _text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def _structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.isError, _text(result)
    assert result.structuredContent is not None
    return result.structuredContent


def test_tools_are_typed_and_take_no_identity(lake: Settings, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.outputSchema is not None and tool.description
            props = set(tool.inputSchema["properties"])
            # `user` is an analyst's filter (the HTTP API's too), never who is asking: an
            # end user naming another is refused (test_an_analyst_names_the_user_it_reads).
            assert not props & {"tenant", "user_id", "analyst", "principal"}
        search = tools["search_conversations"].inputSchema["properties"]
        assert {"query", "scope", "conversation", "roles", "since", "until", "k",
                "snippets"} <= set(search)
        assert search["scope"]["enum"] == ["conversation", "user", "tenant"]

    _in_process(lake, ANA, body, workspace=tmp_path)


def test_no_pull_tool_without_a_workspace(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == TOOLS - {"pull_files"}

    _in_process(lake, ANA, body)


def test_search_sees_only_the_principals_conversations(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        found = _structured(await session.call_tool(
            "search_conversations", {"query": "ERR_CONNECTION_RESET", "k": 5}))
        assert found["hits"] and {h["user_id"] for h in found["hits"]} == {"u-ana"}
        assert found["hits"][0]["turn_id"] == "t-0002"
        assert found["hits"][0]["snippets"]["assistant"] == "restarted the ingress"
        refused = await session.call_tool(
            "search_conversations", {"query": "zanzibar", "scope": "tenant"})
        assert refused.isError and "may not search the whole tenant" in _text(refused)
        # Another user's conversation answers like one that does not exist: no hits.
        for conversation in ("c-ben", "c-nope"):
            empty = _structured(await session.call_tool("search_conversations", {
                "query": "zanzibar", "scope": "conversation", "conversation": conversation}))
            assert empty["hits"] == []
        bad = await session.call_tool("search_conversations", {"query": "x", "k": 500})
        assert bad.isError
        assert 0.5 <= found["hits"][0]["relevance"] <= 1.0
        # Nothing matches: no hits, and the answer says the floor left candidates out.
        nothing = _structured(await session.call_tool(
            "search_conversations", {"query": "qzxv wpfk"}))
        assert nothing["hits"] == [] and "relevance floor" in " ".join(nothing["warnings"])
        nearest = _structured(await session.call_tool(
            "search_conversations", {"query": "qzxv wpfk", "min_relevance": 0}))
        assert nearest["hits"] and nearest["named_times"] == []
        # A time the query names is read, and the answer says how.
        dated = _structured(await session.call_tool(
            "search_conversations", {"query": "ERR_CONNECTION_RESET in March 2026"}))
        assert dated["named_times"] == [{"phrase": "in March 2026",
                                         "start": "2026-03-01T00:00:00+00:00",
                                         "end": "2026-04-01T00:00:00+00:00"}]

    _in_process(lake, ANA, body)


def test_an_analyst_searches_the_tenant(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        found = _structured(await session.call_tool(
            "search_conversations", {"query": "zanzibar", "scope": "tenant",
                                     "since": (NOW - timedelta(days=1)).isoformat()}))
        assert found["hits"][0]["conversation_id"] == "c-ben"  # another user's, found

    _in_process(lake, ANALYST, body)


def test_an_analyst_names_the_user_it_reads(lake: Settings) -> None:
    async def analyst(session: ClientSession) -> None:
        unnamed = await session.call_tool("search_conversations", {"query": "zanzibar"})
        assert unnamed.isError and "gives user" in _text(unnamed)
        assert "--" not in _text(unnamed)  # the tool's argument, not a CLI flag
        found = _structured(await session.call_tool(
            "search_conversations", {"query": "ERR_CONNECTION_RESET", "user": "u-ben"}))
        assert {h["user_id"] for h in found["hits"]} == {"u-ben"}

    async def end_user(session: ClientSession) -> None:
        refused = await session.call_tool(
            "search_conversations", {"query": "zanzibar", "user": "u-ben"})
        assert refused.isError and "may not read user u-ben" in _text(refused)

    _in_process(lake, ANALYST, analyst)
    _in_process(lake, ANA, end_user)


def test_scoring_is_in_hits_only_when_asked(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        plain = _structured(await session.call_tool(
            "search_conversations", {"query": "ERR_CONNECTION_RESET"}))
        hit = plain["hits"][0]
        assert "scoring" not in hit or hit["scoring"] is None
        assert not {"ranks", "fused", "lift", "score", "row_id"} & set(hit)
        explained = _structured(await session.call_tool(
            "search_conversations", {"query": "ERR_CONNECTION_RESET", "explain": True}))
        scoring = explained["hits"][0]["scoring"]
        assert scoring["ranks"]["lexical"]["rank"] == 1 and scoring["score"] > 0

    _in_process(lake, ANA, body)


def test_turnlake_mcp_on_a_missing_lake_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "mcp", "--lake", str(tmp_path / "missing"),
         "--tenant", "acme", "--user", "u-ana"], capture_output=True, text=True,
        timeout=120, cwd=Path(__file__).parents[2], check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "no lake at" in done.stderr and "Traceback" not in done.stderr


def test_a_client_disconnect_logs_no_traceback(lake: Settings,
                                               caplog: pytest.LogCaptureFixture) -> None:
    mcp_http_app(lake, KeyStore(lake.lake).authenticate)
    sdk = logging.getLogger("mcp.server.streamable_http")
    with caplog.at_level(logging.ERROR, logger="mcp.server.streamable_http"):
        for error in (anyio.ClosedResourceError(), ValueError("a real failure")):
            try:
                raise error
            except Exception:
                sdk.exception("Error in message router")
    assert [r.exc_info[1] for r in caplog.records if r.exc_info] == [error]


def test_list_turns_by_position_and_time(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        turns = _structured(await session.call_tool("list_turns", {"conversation": "c-1"}))
        assert [(t["ordinal"], t["turn_id"]) for t in turns["turns"]] == [
            (1, "t-0001"), (2, "t-0002")]
        last = _structured(await session.call_tool(
            "list_turns", {"conversation": "c-1", "ordinal": -1}))
        assert [t["turn_id"] for t in last["turns"]] == ["t-0002"]
        phrase = _structured(await session.call_tool(
            "list_turns", {"conversation": "c-1", "when": "the first turn"}))
        assert [t["turn_id"] for t in phrase["turns"]] == ["t-0001"]
        recent = _structured(await session.call_tool("list_turns", {"when": "last 2 days"}))
        assert [t["turn_id"] for t in recent["turns"]] == ["t-0002"]  # not Ben's t-0003
        bad = await session.call_tool("list_turns", {"when": "when pigs fly"})
        assert bad.isError and "pigs" in _text(bad)
        # Ben's conversation and a missing one: the same answers.
        for call in ({}, {"ordinal": 1}):
            ben = await session.call_tool("list_turns", {"conversation": "c-ben", **call})
            nope = await session.call_tool("list_turns", {"conversation": "c-nope", **call})
            assert ben.isError == nope.isError
            assert (_text(ben).replace("c-ben", "X") == _text(nope).replace("c-nope", "X"))
            if not ben.isError:
                assert _structured(ben)["turns"] == []

    _in_process(lake, ANA, body)


def test_get_turn_with_file_cards_and_one_refusal(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        shown = _structured(await session.call_tool(
            "get_turn", {"conversation": "c-1", "turn": "t-0001"}))["turn"]
        assert shown["completion"]["text"] == "converted the sheet to UTC"
        assert [f["ref"] for f in shown["files"]] == [
            "conv:fi:conv_c-1.turn_t-0001.files/forecast.csv"]
        ben = await session.call_tool("get_turn", {"conversation": "c-ben", "turn": "t-0003"})
        nope = await session.call_tool("get_turn", {"conversation": "c-no", "turn": "t-0003"})
        assert ben.isError and nope.isError
        assert _text(ben).replace("c-ben", "X") == _text(nope).replace("c-no", "X")
        bad = await session.call_tool("get_turn", {"conversation": "../x", "turn": "t"})
        assert bad.isError and "conversation_id" in _text(bad)

    _in_process(lake, ANA, body)


def test_pull_files_into_the_workspace(lake: Settings, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        pulled = _structured(await session.call_tool(
            "pull_files", {"targets": ["c-1/t-0001", "c-ben/t-0003"], "into": "job"}))
        assert [(i["status"], i["path"]) for i in pulled["items"]] == [
            ("pulled", "files/forecast.csv"), ("refused", None)]
        assert not pulled["ok"]
        escape = await session.call_tool("pull_files", {"targets": ["c-1/t-0001"],
                                                        "into": "../outside"})
        assert escape.isError and "'..' segment" in _text(escape)
        linked = await session.call_tool("pull_files", {"targets": ["c-1/t-0001"],
                                                        "into": "link/sub"})
        assert linked.isError and "symlink" in _text(linked)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "link").symlink_to(elsewhere)  # a link planted in the workspace
    _in_process(lake, ANA, body, workspace=workspace)
    assert (workspace / "job" / "files" / "forecast.csv").read_bytes() == CSV
    assert not (tmp_path / "outside").exists()
    assert not any(elsewhere.iterdir())


def test_keys_map_to_read_principals(lake: Settings) -> None:
    store = KeyStore(lake.lake)
    ana = store.create(tenant="acme", role="user", user_id="u-ana", name="ana")[1]
    admin = store.create(tenant="acme", role="admin", name="boss")[1]
    rec = store.create(tenant="acme", role="recorder", name="host")[1]
    assert resolve_key(lake, ana) == ANA
    assert resolve_key(lake, admin) == ANALYST
    with pytest.raises(AccessDenied, match="recorder key may not read"):
        resolve_key(lake, rec)
    with pytest.raises(TurnlakeError):
        resolve_key(lake, "tlk_unknown")


# -- streamable HTTP ----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_streamable_http_takes_the_principal_from_each_requests_key(lake: Settings) -> None:
    keys = {"key-ana": KeyPrincipal("ana", "acme", "user", "u-ana"),
            "key-analyst": KeyPrincipal("analyst", "acme", "analyst"),
            "key-rec": KeyPrincipal("host", "acme", "recorder")}

    def authenticate(key: str) -> KeyPrincipal:
        if key not in keys:
            raise AccessDenied("unknown API key")
        return keys[key]

    _server, app = mcp_http_app(lake, authenticate)
    port = _free_port()
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                        lifespan="on"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):  # bounded wait for the socket
            if web.started:
                break
            time.sleep(0.05)
        assert web.started
        url = f"http://127.0.0.1:{port}/mcp"
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            answer = httpx.post(url, json={}, headers=headers)
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "unauthorized"
        recorder = httpx.post(url, json={}, headers={"Authorization": "Bearer key-rec"})
        assert recorder.status_code == 403
        assert recorder.json()["error"] == {"code": "forbidden",
                                            "message": "a recorder key may not read"}

        async def users_seen(key: str) -> set[str]:
            client = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                       timeout=30)
            async with (client, streamable_http_client(url, http_client=client) as (r, w, _),
                        ClientSession(r, w) as session):
                await session.initialize()
                result = await session.call_tool("search_conversations", {
                    "query": "ERR_CONNECTION_RESET", "scope": "tenant"})
                if result.isError:
                    return {"error: " + _text(result)}
                return {h["user_id"] for h in _structured(result)["hits"]}

        assert anyio.run(users_seen, "key-analyst") == {"u-ana", "u-ben"}
        ana = anyio.run(users_seen, "key-ana")
        assert len(ana) == 1 and "may not search the whole tenant" in next(iter(ana))
    finally:
        web.should_exit = True
        thread.join(timeout=30)


# -- stdio, a real subprocess -------------------------------------------------------------------

def test_turnlake_mcp_over_stdio(lake: Settings, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1", "TURNLAKE_EMBEDDING_MODEL": "hashing-64"}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pipeline.cli", "mcp", "--lake", str(lake.lake), "--tenant", "acme",
              "--user", "u-ana", "--workspace", str(tmp_path)],
        env=env, cwd=str(tmp_path))

    async def main() -> None:
        with anyio.fail_after(300):
            async with (stdio_client(params) as (read, write),
                        ClientSession(read, write) as session):
                init = await session.initialize()
                assert init.serverInfo.version == turnlake_version()  # not the SDK's
                names = {t.name for t in (await session.list_tools()).tools}
                assert names == TOOLS
                found = _structured(await session.call_tool(
                    "search_conversations", {"query": "openpyxl workbook", "k": 3}))
                assert found["hits"][0]["turn_id"] == "t-0001"
                ref = "conv:fi:conv_c-1.turn_t-0001.files/forecast.csv"
                pulled = _structured(await session.call_tool("pull_files", {"targets": [ref]}))
                assert pulled["ok"]

    anyio.run(main)
    assert (tmp_path / "files" / "forecast.csv").read_bytes() == CSV
