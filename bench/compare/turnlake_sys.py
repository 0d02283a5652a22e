"""turnlake through its own search service: hybrid and each generator alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.compare.rows import DIM, Query, TurnKey
from bench.compare.systems import SearchSettings
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.request import FusionSettings, SearchRequest
from lake.search.service import SearchService
from lake.store import LakeStore

ARMS: dict[str, dict[str, bool]] = {
    "hybrid": {"semantic": True, "lexical": True, "trigram": True},
    "semantic": {"semantic": True, "lexical": False, "trigram": False},
    "lexical": {"semantic": False, "lexical": True, "trigram": False},
    "trigram": {"semantic": False, "lexical": False, "trigram": True},
}


class PinnedEmbedder:
    """Hands the service the query vector the harness already has (embedding is not timed),
    under the name of the model the lake's vectors came from (the harness embedded the
    queries with it)."""

    dim = DIM

    def __init__(self, name: str) -> None:
        self.name = name
        self.vector = np.zeros(DIM, dtype=np.float32)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """The pinned vector once per text."""
        return np.tile(self.vector, (len(texts), 1))


class TurnlakeSystem:
    """A lake's SearchService; user scope, no per-conversation cap, no snippets."""

    name = "turnlake"
    arms: tuple[str, ...] = tuple(ARMS)

    def __init__(self, root: Path, settings: SearchSettings, *,
                 fusion: FusionSettings | None = None) -> None:
        if not (root / "indexes").exists():
            raise FileNotFoundError(f"no turnlake indexes under {root}")
        self.settings = settings
        self.fusion = fusion or FusionSettings()
        store = LakeStore(root)
        models = sorted({s.manifest.model for s in partition_statuses(store).values()
                         if s.manifest is not None and s.manifest.model})
        if len(models) != 1:
            raise ValueError(f"the lake at {root} should hold one embedding model's vectors, "
                             f"not {models or 'none'}")
        self._embedder = PinnedEmbedder(models[0])
        self.service = SearchService(store, embedder=self._embedder)

    def search(self, arm: str, query: Query, vector: np.ndarray) -> list[TurnKey]:
        """One search through the public service API."""
        if arm not in ARMS:
            raise ValueError(f"turnlake has no arm {arm!r}; arms are {', '.join(ARMS)}")
        self._embedder.vector = vector
        s = self.settings
        result = self.service.search(SearchRequest(
            query.text, Principal(query.tenant, query.user_id), k=s.k, depth=s.depth,
            enabled=ARMS[arm], weights=dict(s.weights), recency_weight=s.recency_weight,
            half_life_days=s.half_life_days, as_of=s.as_of, max_per_conversation=0,
            snippets="none", fusion=self.fusion))
        return [(h.conversation_id, h.turn_id) for h in result.hits]

    def close(self) -> None:
        """Nothing to release."""


def folder_bytes(path: Path) -> int:
    """Bytes of the files under a folder."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def lake_sizes(root: Path) -> dict[str, int]:
    """On-disk bytes of the lake: indexes, the content_rows table and everything."""
    return {"indexes": folder_bytes(root / "indexes"),
            "content_rows": folder_bytes(root / "tables" / "content_rows"),
            "lake_total": folder_bytes(root)}
