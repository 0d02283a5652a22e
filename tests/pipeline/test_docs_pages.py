"""The docs pages document what the code offers: every HTTP endpoint of the service on
docs/service.md, every MCP tool and each of its arguments on docs/agents/mcp.md."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
from fastapi.routing import APIRoute

from lake.search.access import Principal
from lake.settings import Settings
from pipeline.mcp_server import create_mcp_server
from pipeline.service.routes import conversations, ops, pull, refs, search, turns

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _endpoints() -> list[str]:
    """`METHOD /path` of every route, path parameters written `{name}`."""
    found = []
    for module in (turns, search, conversations, refs, pull, ops):
        for route in module.router.routes:
            assert isinstance(route, APIRoute)
            path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
            found += [f"{method} {path}" for method in sorted(route.methods)]
    return sorted(found)


def _undocumented_endpoints(page: str) -> list[str]:
    return [e for e in _endpoints() if not re.search(rf"`{re.escape(e)}[`?]", page)]


def test_every_endpoint_is_on_the_service_page() -> None:
    page = (DOCS / "service.md").read_text()
    assert len(_endpoints()) >= 11
    assert _undocumented_endpoints(page) == []
    assert "`/mcp/`" in page


def test_the_endpoint_check_catches_a_missing_endpoint() -> None:
    page = (DOCS / "service.md").read_text().replace("`DELETE /v1/users/{user}`", "")
    assert _undocumented_endpoints(page) == ["DELETE /v1/users/{user}"]


def _tools(tmp_path: Path) -> dict[str, list[str]]:
    server = create_mcp_server(Settings(lake=tmp_path / "lake"), Principal("acme", "u-ana"),
                               workspace=tmp_path)

    async def listed() -> dict[str, list[str]]:
        return {tool.name: sorted(tool.inputSchema.get("properties", {}))
                for tool in await server.list_tools()}

    return anyio.run(listed)


def test_every_mcp_tool_and_argument_is_on_the_mcp_page(tmp_path: Path) -> None:
    page = (DOCS / "agents" / "mcp.md").read_text()
    tools = _tools(tmp_path)
    assert {"search_conversations", "list_turns", "get_turn", "pull_files"} <= set(tools)
    missing = [f"{name}({argument})" for name, arguments in tools.items()
               for argument in [name, *arguments] if f"`{argument}`" not in page]
    assert missing == []
