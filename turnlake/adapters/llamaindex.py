"""A LlamaIndex retriever over turnlake search: scored nodes, best first.

    from turnlake import Client
    from turnlake.adapters.llamaindex import TurnlakeRetriever

    retriever = TurnlakeRetriever(Client(url, key=key), k=5)
    for scored in retriever.retrieve("why was the forecast off by an hour?"):
        print(scored.score, scored.node.node_id, scored.node.get_content())

Each node is one turn: its id the turn's address ``CONVERSATION/TURN``, its text the exchange
(user and assistant snippets), its metadata the conversation, turn, user, time and matched
role; its score is the hit's ``relevance`` (0-1).
"""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from lake.search.request import Hit
from turnlake.async_client import AsyncClient
from turnlake.client import Client
from turnlake.search import hit_metadata, hit_text, turn_address


def hit_node(hit: Hit) -> NodeWithScore:
    """One hit as a scored LlamaIndex node."""
    node = TextNode(id_=turn_address(hit), text=hit_text(hit), metadata=hit_metadata(hit))
    return NodeWithScore(node=node, score=hit.relevance)


class TurnlakeRetriever(BaseRetriever):
    """Retrieves the turns a turnlake search finds; ``options`` are ``POST /v1/search``'s
    (k, scope, user, roles, since, ...)."""

    def __init__(self, client: Client, *, async_client: AsyncClient | None = None,
                 **options: Any) -> None:
        super().__init__()
        self._client = client
        self._async_client = async_client
        self._options = options

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = self._client.search(query_bundle.query_str, **self._options)
        return [hit_node(h) for h in answer.hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self._async_client is None:
            return self._retrieve(query_bundle)
        answer = await self._async_client.search(query_bundle.query_str, **self._options)
        return [hit_node(h) for h in answer.hits]
