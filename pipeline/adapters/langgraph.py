"""Recording LangGraph runs: every folded input, node/tool steps, hosted files, the answer.

The adapter only listens (a LangChain callback handler added to the run's config) and reads
the final state; the graph's own checkpointer sees exactly the same run as without it.
Files the graph published are read from ``state["hosted_files"]``: a list of
``{"path": "files/<rel>", "data": bytes | None, "source_path": str | None, "mime": ...,
"description": ...}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from pipeline.recorder import EventType, Recorder, TurnIdentity, TurnRecording

__all__ = ["LangGraphRecorder", "TurnIdentity"]


class _StepListener(BaseCallbackHandler):
    """Turns node and tool starts/ends into recorder steps (shown as chat.step events)."""

    def __init__(self, recording: TurnRecording) -> None:
        self._recording = recording
        self._names: dict[UUID, str] = {}

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *,
                       run_id: UUID, metadata: dict[str, Any] | None = None,
                       **kwargs: Any) -> None:
        node = (metadata or {}).get("langgraph_node")
        # Inner runnables of a node carry the same metadata; only the node itself is a step.
        if node and kwargs.get("name") == node:
            self._names[run_id] = f"node:{node}"
            self._recording.step(f"node:{node}", "started", at=_now())

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        name = self._names.pop(run_id, None)
        if name:
            self._recording.step(name, "completed", at=_now())

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        name = self._names.pop(run_id, None)
        if name:
            self._recording.step(name, "failed", detail=str(error)[:500], at=_now())

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *,
                      run_id: UUID, **kwargs: Any) -> None:
        name = f"tool:{(serialized or {}).get('name') or kwargs.get('name') or 'tool'}"
        self._names[run_id] = name
        self._recording.step(name, "started", detail=str(input_str)[:500], at=_now())

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        name = self._names.pop(run_id, None)
        if name:
            self._recording.step(name, "completed", detail=str(output)[:500], at=_now())

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        name = self._names.pop(run_id, None)
        if name:
            self._recording.step(name, "failed", detail=str(error)[:500], at=_now())


class LangGraphRecorder:
    """Wraps compiled-graph runs so that each run is recorded as one turn."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def invoke(self, graph: Any, inputs: dict[str, Any], identity: TurnIdentity, *,
               config: dict[str, Any] | None = None,
               submissions: Sequence[tuple[str, EventType]] | None = None) -> dict[str, Any]:
        """Run ``graph.invoke(inputs, config)`` and record the turn; returns the final state.

        Folded user inputs are the HumanMessages in ``inputs["messages"]`` (the first a
        prompt, the rest follow-ups) unless ``submissions`` names them with their event types.
        If the graph raises, the turn is abandoned (nothing is written) and the error raised.
        """
        recording = self._recorder.begin(identity.tenant, identity.app, identity.agent,
                                         identity.user_id, identity.conversation_id,
                                         identity.turn_id, title=identity.title)
        for text, event_type in submissions or _human_inputs(inputs):
            recording.submit(text, event_type)
        run_config = dict(config or {})
        run_config["callbacks"] = [*(run_config.get("callbacks") or []),
                                   _StepListener(recording)]
        state = graph.invoke(inputs, run_config)
        for hosted in state.get("hosted_files") or []:
            recording.host_file(hosted["path"], hosted.get("data"),
                                source=Path(hosted["source_path"])
                                if hosted.get("source_path") else None,
                                mime=hosted.get("mime"), description=hosted.get("description"))
        recording.complete(_final_answer(state))
        return dict(state)


def _human_inputs(inputs: dict[str, Any]) -> list[tuple[str, EventType]]:
    messages = inputs.get("messages") or []
    texts = [_text(m) for m in messages if isinstance(m, HumanMessage)
             or (isinstance(m, tuple) and m[0] in ("user", "human"))]
    return [(t, "prompt" if i == 0 else "followup") for i, t in enumerate(texts)]


def _final_answer(state: dict[str, Any]) -> str:
    for message in reversed(state.get("messages") or []):
        if isinstance(message, AIMessage) and _text(message).strip():
            return _text(message)
    return ""


def _text(message: BaseMessage | tuple[str, str]) -> str:
    if isinstance(message, tuple):
        return str(message[1])
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") if isinstance(part, dict) else str(part)
                   for part in content)


def _now() -> datetime:
    return datetime.now(UTC)
