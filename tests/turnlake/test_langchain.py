"""LangChain and LangGraph through a server: a graph run recorded with
``Recorder(url=..., key=...)`` is then found by the LangChain retriever."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from pipeline.adapters.langgraph import LangGraphRecorder, TurnIdentity
from tests.pipeline.service.server import wait_until
from tests.turnlake.conftest import Served
from turnlake import AsyncClient, Client, Recorder
from turnlake.adapters.langchain import TurnlakeRetriever


class State(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]


def _graph() -> Any:
    # A scripted model: no network, no key.
    model = GenericFakeChatModel(messages=iter([AIMessage(
        content="The quokka dashboard reads the replica; switch it to the primary.")]))

    def agent(state: State) -> State:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile()


def test_a_langgraph_run_recorded_through_the_server_is_retrieved(served: Served,
                                                                  tmp_path: Any) -> None:
    identity = TurnIdentity("acme", "ops-desk", "langgraph-bot", "u-ana", "c-lc", "t-1")
    with Recorder(url=served.server.url, key=served.keys["recorder"],
                  outbox=tmp_path / "outbox") as recorder:
        state = LangGraphRecorder(recorder).invoke(
            _graph(), {"messages": [HumanMessage("why is the quokka dashboard stale?")]},
            identity)
    assert state["messages"][-1].content.startswith("The quokka dashboard")
    client = Client(served.server.url, key=served.keys["user"])
    retriever = TurnlakeRetriever(client=client, search_options={"k": 3})
    # The shared server holds other tests' turns too: look for this one among the hits.
    assert wait_until(lambda: "c-lc/t-1" in {d.id for d in retriever.invoke("quokka")},
                      timeout_s=60)
    document = next(d for d in retriever.invoke("quokka dashboard stale") if d.id == "c-lc/t-1")
    assert document.page_content.startswith("User: why is the quokka dashboard stale?")
    assert "Assistant: The quokka dashboard reads the replica" in document.page_content
    assert document.metadata["conversation_id"] == "c-lc"
    assert 0.5 <= document.metadata["relevance"] <= 1.0
    shown = client.turn("c-lc", "t-1")
    assert [s["name"] for s in shown["steps"]][:1] == ["node:agent"]

    async def asynchronously() -> list[str]:
        async with AsyncClient(served.server.url, key=served.keys["user"]) as aclient:
            found = await TurnlakeRetriever(client=client, async_client=aclient).ainvoke(
                "quokka")
        return [d.id or "" for d in found]

    assert "c-lc/t-1" in asyncio.run(asynchronously())
