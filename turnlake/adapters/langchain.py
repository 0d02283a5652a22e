"""A LangChain retriever over turnlake search.

    from turnlake import Client
    from turnlake.adapters.langchain import TurnlakeRetriever

    retriever = TurnlakeRetriever(client=Client(url, key=key), search_options={"k": 5})
    documents = retriever.invoke("why was the forecast off by an hour?")

Each document is one turn: its text is the exchange (user and assistant snippets), its ``id``
the turn's address ``CONVERSATION/TURN``, and its metadata the conversation, turn, user,
time, matched role and text, and ``relevance`` (0-1). Recording LangGraph runs through a
server is :class:`pipeline.adapters.langgraph.LangGraphRecorder` with
``Recorder(url=..., key=...)``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from lake.search.request import Hit
from turnlake.async_client import AsyncClient
from turnlake.client import Client
from turnlake.search import hit_metadata, hit_text, turn_address


def hit_document(hit: Hit) -> Document:
    """One hit as a LangChain document."""
    return Document(id=turn_address(hit), page_content=hit_text(hit),
                    metadata=hit_metadata(hit))


class TurnlakeRetriever(BaseRetriever):
    """Retrieves the turns a turnlake search finds, best first."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Client
    async_client: AsyncClient | None = None
    search_options: dict[str, Any] = Field(default_factory=dict, description=(
        "POST /v1/search options besides the query: k, scope, user, roles, since, ..."))

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        answer = self.client.search(query, **self.search_options)
        return [hit_document(h) for h in answer.hits]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       ) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        answer = await self.async_client.search(query, **self.search_options)
        return [hit_document(h) for h in answer.hits]
