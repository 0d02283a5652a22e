"""The agent tools mounted at /mcp of `turnlake serve`: the same keys and identity rules."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.pipeline.service.conftest import Served


def _search(url: str, key: str, scope: str, query: str = "forecast") -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        client = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
        async with (client, streamable_http_client(url, http_client=client) as (r, w, _),
                    ClientSession(r, w) as session):
            await session.initialize()
            result = await session.call_tool("search_conversations",
                                             {"query": query, "scope": scope})
            if result.isError:
                return {"error": " ".join(getattr(c, "text", "") for c in result.content)}
            assert isinstance(result.structuredContent, dict)
            return result.structuredContent
    answer: dict[str, Any] = anyio.run(run)
    return answer


def test_mcp_tools_answer_as_the_keys_principal(served: Served) -> None:
    url = f"{served.server.url}/mcp/"
    # Other tests of the package record more of u-ana's turns into the shared lake: the
    # analyst looks for u-ben's own marker, which only a tenant-wide search can reach.
    analyst = _search(url, served.keys["analyst"], "tenant", "mk100")
    assert "u-ben" in {h["user_id"] for h in analyst["hits"]}
    own = _search(url, served.keys["user"], "user")
    assert own["hits"] and {h["user_id"] for h in own["hits"]} == {"u-ana"}
    assert "u-ben" not in {h["user_id"] for h in _search(url, served.keys["user"], "user",
                                                          "mk100")["hits"]}
    assert "whole tenant" in _search(url, served.keys["user"], "tenant")["error"]
    for headers in ({}, {"Authorization": "Bearer tlk_nope"}):
        refused = httpx.post(url, json={}, headers=headers, timeout=60)
        assert refused.status_code == 401
    recorder = httpx.post(url, json={}, timeout=60,
                          headers={"Authorization": f"Bearer {served.keys['recorder']}"})
    assert recorder.status_code == 403
