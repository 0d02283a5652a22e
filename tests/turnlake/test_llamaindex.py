"""The LlamaIndex retriever against a real server: scored nodes for recorded turns."""

from __future__ import annotations

import asyncio

from tests.pipeline.service.server import wait_until
from tests.reliability.lake_audit import turn_record
from tests.turnlake.conftest import Served
from turnlake import AsyncClient, Client
from turnlake.adapters.llamaindex import TurnlakeRetriever


def test_the_retriever_returns_scored_nodes(served: Served) -> None:
    with Client(served.server.url, key=served.keys["recorder"]) as recorder:
        assert recorder.record(turn_record(60, conversation="c-li",
                                           marker="wombat")).accepted == 1
    client = Client(served.server.url, key=served.keys["user"])
    retriever = TurnlakeRetriever(client, k=3)
    # The shared server holds other tests' turns too: look for this one among the nodes.
    assert wait_until(lambda: "c-li/t-0060" in {n.node.node_id
                                                for n in retriever.retrieve("wombat")},
                      timeout_s=60)
    scored = next(n for n in retriever.retrieve("wombat question")
                  if n.node.node_id == "c-li/t-0060")
    assert scored.score is not None and 0.5 <= scored.score <= 1.0
    assert "User: wombat question" in scored.node.get_content()
    assert scored.node.metadata["turn_id"] == "t-0060"

    async def asynchronously() -> str:
        async with AsyncClient(served.server.url, key=served.keys["user"]) as aclient:
            nodes = await TurnlakeRetriever(client, async_client=aclient).aretrieve("wombat")
        return [n.node.node_id for n in nodes]

    assert "c-li/t-0060" in asyncio.run(asynchronously())
