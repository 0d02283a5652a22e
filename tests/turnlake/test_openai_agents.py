"""The OpenAI Agents SDK with a scripted model (no network, no key): a run that calls the
history tool is recorded through a real server, then found by search."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.pipeline.service.server import wait_until
from tests.reliability.lake_audit import turn_record
from tests.turnlake.conftest import Served
from turnlake import AsyncClient, Client, Recorder, TurnIdentity
from turnlake.adapters.openai_agents import record_run, search_history_tool

ANSWER = "Last time the lemur export failed on the 65536-row limit; export CSV instead."


class ScriptedModel(Model):
    """Answers each model call with the next scripted output, and counts tokens."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = outputs
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(
            requests=1, input_tokens=40, output_tokens=12, total_tokens=52), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the test runs without streaming")


def _script() -> list[list[Any]]:
    call = ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="call_1",
                                    name="search_history", status="completed",
                                    arguments=json.dumps({"query": "lemur"}))
    message = ResponseOutputMessage(
        type="message", id="msg_1", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=ANSWER, annotations=[])])
    return [[call], [message]]


def test_a_run_is_recorded_with_its_tool_call_and_found(served: Served,
                                                        tmp_path: Path) -> None:
    with Client(served.server.url, key=served.keys["recorder"]) as recorder_client:
        assert recorder_client.record(turn_record(70, conversation="c-earlier",
                                                  marker="lemur")).accepted == 1
    user = Client(served.server.url, key=served.keys["user"])
    assert wait_until(lambda: any(h.conversation_id == "c-earlier"
                                  for h in user.search("lemur").hits), timeout_s=60)
    model = ScriptedModel(_script())
    identity = TurnIdentity("acme", "support-desk", "openai-agent", "u-ana", "c-oa", "t-1")

    async def run() -> str:
        async with AsyncClient(served.server.url, key=served.keys["user"]) as history:
            agent = Agent(name="support", instructions="Use the history.", model=model,
                          tools=[search_history_tool(history, k=3)])
            with Recorder(url=served.server.url, key=served.keys["recorder"],
                          outbox=tmp_path / "outbox") as recorder:
                result = await record_run(recorder, identity, agent,
                                          "why did my lemur export fail again?",
                                          run_config=RunConfig(tracing_disabled=True))
        return str(result.final_output)

    assert asyncio.run(run()) == ANSWER
    # The tool's answer reached the model: the earlier turn, by its address.
    tool_output = next(item for item in model.inputs[1] if isinstance(item, dict)
                       and item.get("type") == "function_call_output")["output"]
    assert "c-earlier/t-0070" in {hit["turn"] for hit in json.loads(tool_output)}
    shown = user.turn("c-oa", "t-1")
    assert [s["text"] for s in shown["submissions"]] == ["why did my lemur export fail again?"]
    assert shown["completion"]["text"] == ANSWER
    assert [(s["name"], s["status"]) for s in shown["steps"]] == [
        ("tool:search_history", "started"), ("tool:search_history", "completed")]
    assert "c-earlier/t-0070" in shown["steps"][1]["detail"]
    assert shown["usage"]["tokens_in"] == 80 and shown["usage"]["tokens_out"] == 24
    assert wait_until(lambda: any(h.conversation_id == "c-oa"
                                  for h in user.search("lemur export fail again").hits),
                      timeout_s=60)
