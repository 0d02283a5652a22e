"""The OpenAI Agents SDK: record each run as a turn, and a tool that searches history.

    from agents import Agent
    from turnlake import AsyncClient, Recorder, TurnIdentity
    from turnlake.adapters.openai_agents import record_run, search_history_tool

    history = AsyncClient(url, key=user_key)
    agent = Agent(name="support", tools=[search_history_tool(history)])
    with Recorder(url=url, key=recorder_key) as recorder:
        result = await record_run(recorder, identity, agent, "why is the forecast off?")

A run becomes one ``turnlake.turn.v1`` turn: the input's user messages are its submissions,
each tool call (with its output) and each handoff a step, the final output its completion,
and the run's token usage its usage. :class:`TurnlakeRunHooks` are the run hooks that collect
the steps, for a host that drives ``Runner`` itself.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, Runner, RunResult, function_tool
from agents.lifecycle import RunHooks

from pipeline.recorder import Recorder, TurnIdentity, TurnRecording
from turnlake.async_client import AsyncClient
from turnlake.search import turn_address

_DETAIL_CHARS = 2000  # a tool's output kept in its step, enough to see what it returned


class TurnlakeRunHooks(RunHooks[Any]):
    """Run hooks that fold tool calls, their outputs and handoffs into a turn's steps."""

    def __init__(self, recording: TurnRecording) -> None:
        self.recording = recording

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                            tool: Any) -> None:
        """A tool call began."""
        self.recording.step(f"tool:{tool.name}", "started", detail=f"agent {agent.name}")

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any],
                          tool: Any, result: object) -> None:
        """A tool call ended: its output is the step's detail."""
        self.recording.step(f"tool:{tool.name}", "completed",
                            detail=str(result)[:_DETAIL_CHARS])

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Agent[Any],
                         to_agent: Agent[Any]) -> None:
        """One agent handed the run to another."""
        self.recording.step(f"handoff:{from_agent.name}->{to_agent.name}", "completed")


async def record_run(recorder: Recorder, identity: TurnIdentity, agent: Agent[Any],
                     input: str | list[Any], **run_options: Any) -> RunResult:
    """Run ``agent`` on ``input`` (``Runner.run``'s options pass through) and record the run
    as one turn; returns the run's result. A run that fails records nothing (the turn is
    abandoned) and its error propagates."""
    recording = recorder.begin(identity.tenant, identity.app, identity.agent,
                               identity.user_id, identity.conversation_id, identity.turn_id,
                               title=identity.title)
    for text in _user_texts(input):
        recording.submit(text)
    result = await Runner.run(agent, input, hooks=TurnlakeRunHooks(recording), **run_options)
    usage = result.context_wrapper.usage
    recording.usage(usage.input_tokens, usage.output_tokens)
    recording.complete(_output_text(result.final_output))
    return result


def _output_text(output: Any) -> str:
    """The final output as the completion's text (a structured output as its JSON)."""
    if isinstance(output, str):
        return output
    if hasattr(output, "model_dump_json"):
        return str(output.model_dump_json())
    return json.dumps(output, default=str)


def search_history_tool(client: AsyncClient, *, k: int = 5, **options: Any) -> FunctionTool:
    """A function tool, ``search_history(query)``, that searches what the client's key may
    read (``options``: ``POST /v1/search``'s, e.g. ``user`` for an analyst's key) and answers
    the hits as JSON: each turn's address, time, relevance and exchange."""

    @function_tool(name_override="search_history")
    async def search_history(query: str) -> str:
        """Search the user's earlier conversations with agents for what was said or done
        before: a topic, an error message, a file name. Returns the matching turns, best
        first (an empty list: nothing in the history matches).

        Args:
            query: What to look for, in the words the conversation would have used.
        """
        answer = await client.search(query, k=k, **options)
        return json.dumps([{"turn": turn_address(h), "at": h.turn_at.isoformat(),
                            "relevance": round(h.relevance, 3),
                            "user": h.snippets.get("user", ""),
                            "assistant": h.snippets.get("assistant", "")}
                           for h in answer.hits])

    return search_history


def _user_texts(input: str | list[Any]) -> list[str]:
    """The user messages of a run's input (a string, or Responses input items)."""
    if isinstance(input, str):
        return [input]
    texts = []
    for item in input:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.append(" ".join(str(part.get("text", "")) for part in content
                                  if isinstance(part, dict)))
    return [t for t in texts if t]
