from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.adapters.langgraph import LangGraphRecorder, TurnIdentity
from pipeline.ingest import Ingestor
from pipeline.recorder import Recorder


class State(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]
    hosted_files: list[dict[str, Any]]


def _graph(workdir: Path, saver: InMemorySaver) -> Any:
    model = GenericFakeChatModel(messages=iter([
        AIMessage(content="I wrote the forecast to files/forecast.csv; hours are now UTC.")
        for _ in range(10)]))

    def write_file(state: State) -> State:
        path = workdir / "forecast.csv"
        path.write_text("month,hours\n3,12\n")
        return {"hosted_files": [{"path": "files/forecast.csv", "source_path": str(path),
                                  "mime": "text/csv", "description": "corrected forecast"}]}

    def agent(state: State) -> State:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("write_file", write_file)
    builder.add_node("agent", agent)
    builder.add_edge(START, "write_file")
    builder.add_edge("write_file", "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


IDENTITY = TurnIdentity("acme", "data-copilot", "langgraph-bot", "u-ana", "c-lg", "t-1",
                        title="Forecast")
INPUTS = {"messages": [HumanMessage("fix the forecast hours"), HumanMessage("in UTC please")]}


def _checkpoints(graph: Any, thread: str) -> list[Any]:
    history = graph.get_state_history({"configurable": {"thread_id": thread}})
    return [(s.values.get("hosted_files"), [(type(m).__name__, m.content)
                                            for m in s.values.get("messages", [])], s.next)
            for s in history]


def test_graph_run_is_recorded_and_checkpoints_untouched(settings: Settings,
                                                         tmp_path: Path) -> None:
    plain_saver, recorded_saver = InMemorySaver(), InMemorySaver()
    plain = _graph(tmp_path, plain_saver)
    plain.invoke(INPUTS, {"configurable": {"thread_id": "x"}})
    recorded = _graph(tmp_path, recorded_saver)
    spool = tmp_path / "spool"
    state = LangGraphRecorder(Recorder(spool=spool)).invoke(
        recorded, INPUTS, IDENTITY, config={"configurable": {"thread_id": "x"}})
    assert state["messages"][-1].content.startswith("I wrote the forecast")
    assert _checkpoints(plain, "x") == _checkpoints(recorded, "x")

    report = Ingestor(settings).ingest_paths([spool])
    assert report.accepted == 1
    turn = TurnMaterializer(LakeStore(settings.lake)).turn(Principal("acme", "u-ana"),
                                                           "c-lg", "t-1")
    assert [s["text"] for s in turn.submissions] == ["fix the forecast hours", "in UTC please"]
    assert [s["event_type"] for s in turn.submissions] == ["prompt", "followup"]
    assert turn.completion["text"].startswith("I wrote the forecast")
    assert [(s["name"], s["status"]) for s in turn.steps] == [
        ("node:write_file", "started"), ("node:write_file", "completed"),
        ("node:agent", "started"), ("node:agent", "completed")]
    assert [f.ref for f in turn.files] == ["conv:fi:conv_c-lg.turn_t-1.files/forecast.csv"]
    events = LakeStore(settings.lake).read(Table.EVENTS)["type"].to_pylist()
    assert events.count("chat.step") == 4
