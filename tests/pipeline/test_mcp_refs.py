"""The MCP tool get_ref follows every namespace's address; hits and turns carry them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import CallToolResult, TextContent

from lake.search.access import Principal
from lake.settings import Settings
from pipeline.jobs import run_ingest
from pipeline.mcp_server import create_mcp_server
from tests.factories import make_record, rich_record, write_jsonl

ANA = Principal("acme", "u-ana")
BEN = Principal("acme", "u-ben")
FILE = "conv:fi:conv_c-1.turn_t-0002.files/forecast.csv"
Body = Callable[[ClientSession], Awaitable[None]]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("mcp-refs")
    settings = Settings(lake=root / "lake", embedding_model="hashing-64")
    records = [rich_record(2), make_record(3, user="u-ben", conversation="c-ben")]
    run_ingest(settings, [write_jsonl(root / "in.jsonl", records)])
    return settings


def _run(settings: Settings, principal: Principal, body: Body) -> None:
    server = create_mcp_server(settings, principal)

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


async def _turn(session: ClientSession) -> dict[str, Any]:
    turn: dict[str, Any] = _structured(await session.call_tool(
        "get_turn", {"conversation": "c-1", "turn": "t-0002"}))["turn"]
    return turn


def test_get_ref_follows_every_namespace(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        turn = await _turn(session)
        addresses = turn["addresses"]

        async def record(ref: str) -> dict[str, Any]:
            answer = _structured(await session.call_tool("get_ref", {"ref": ref}))
            assert answer["file"] is None
            got: dict[str, Any] = answer["record"]
            return got

        assert (await record(addresses["record"]))["value"]["turn_id"] == "t-0002"
        assert (await record(addresses["completion"]))["value"] == turn["completion"]
        assert (await record(addresses["steps"][0]))["value"] == turn["steps"][0]
        assert (await record(addresses["events"][-1]))["value"] == turn["events"][-1]
        namespaces = set()
        for address in addresses["rows"]:
            row = await record(address)
            namespaces.add(row["namespace"])
            assert row["address"] == address and row["value"]["text"]
        assert namespaces == {"so", "ws", "su"}
        file = _structured(await session.call_tool("get_ref", {"ref": FILE}))["file"]
        assert file["text"] == "month,hours\n3,12\n" and file["mime"] == "text/csv"

    _run(lake, ANA, body)


def test_hits_carry_addresses_get_ref_follows(lake: Settings) -> None:
    async def body(session: ClientSession) -> None:
        found = _structured(await session.call_tool(
            "search_conversations", {"query": "openpyxl workbook wrong hours"}))
        hit = found["hits"][0]
        row = _structured(await session.call_tool("get_ref", {"ref": hit["address"]}))
        assert row["record"]["value"]["text"] == hit["text"]
        turn = _structured(await session.call_tool("get_ref", {"ref": hit["turn_address"]}))
        assert turn["record"]["value"]["turn_id"] == hit["turn_id"]

    _run(lake, ANA, body)


def test_another_users_object_and_none_get_one_answer(lake: Settings) -> None:
    addresses: dict[str, Any] = {}

    async def ana(session: ClientSession) -> None:
        addresses.update((await _turn(session))["addresses"])

    async def ben(session: ClientSession) -> None:
        for ref in (addresses["record"], addresses["steps"][0], addresses["rows"][0],
                    addresses["events"][0], FILE):
            theirs = await session.call_tool("get_ref", {"ref": ref})
            none = await session.call_tool("get_ref", {"ref": ref.replace("t-0002", "t-0404")})
            assert theirs.isError and none.isError
            assert _text(theirs) == _text(none).replace("t-0404", "t-0002")
        bad = await session.call_tool("get_ref", {"ref": "conv:zz:nope"})
        assert bad.isError and "unknown namespace" in _text(bad)

    _run(lake, ANA, ana)
    _run(lake, BEN, ben)


def test_the_tools_schema_documents_the_answer(lake: Settings, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        schema = tools["get_ref"].outputSchema
        assert schema is not None and {"record", "file"} <= set(schema["properties"])
        assert set(tools["get_ref"].inputSchema["properties"]) == {"ref"}

    _run(lake, ANA, body)
