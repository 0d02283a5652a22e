"""Search latency at scale on synthetic rows: demo-template texts with synthetic unit vectors.

The scale runs measure speed, not quality, so vectors are drawn, not embedded; query embedding
is timed separately with the real model. Two kinds of vectors (``VECTORS``):

* ``random``: independent random unit vectors, the worst case for any vector index (no
  structure, every row about as far as every other), which keeps large partitions on exact
  scans;
* ``clustered``: each row (and query) a topic centroid plus noise of equal weight, drawn from
  :data:`CLUSTERS` shared centroids.  Its neighbour structure is that of real text embeddings:
  the relative contrast of the 10th neighbour (mean distance over 10th-neighbour distance) is
  1.43, against 1.44 for all-MiniLM-L6-v2 on LoCoMo's turns, and 1.10 for random vectors.

Queries are generated and seeded: names, error strings, paraphrases and misspellings built
from the same templates, identical for every system.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from lake.embedding.passages import pooled
from lake.embedding.rows import with_embeddings
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.demo import generate_lines
from pipeline.index_build import build_indexes
from pipeline.ingest import Ingestor

DIM = 384
MODEL = "random-384"
CLUSTERED_MODEL = "clustered-384"
VECTORS = ("random", "clustered")
CLUSTERS = 2_000
_CENTROID_SEED = 20_261_101  # one set of centroids for every lake and query of the bench
NOW = datetime(2026, 11, 1, tzinfo=UTC)
LONG_PASSAGES = 3  # a long row's passages (120 joined LoCoMo completions averaged 3.2)


class RandomEmbedder:
    """Seeded random unit vectors: the scale runs' stand-in for the model."""

    name = MODEL
    dim = DIM

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Random unit vectors, one per text."""
        v = self._rng.standard_normal((len(texts), DIM)).astype(np.float32)
        unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return unit


class ClusteredEmbedder:
    """Seeded unit vectors with text-like neighbour structure (see the module notes): a
    centroid of :data:`CLUSTERS`, the same for every instance, plus as much noise."""

    name = CLUSTERED_MODEL
    dim = DIM

    def __init__(self, seed: int = 0) -> None:
        centroids = np.random.default_rng(_CENTROID_SEED).standard_normal((CLUSTERS, DIM))
        self._centroids = centroids.astype(np.float32)
        self._rng = np.random.default_rng(seed)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """One vector per text, drawn (the text is not read)."""
        topic = self._centroids[self._rng.integers(0, CLUSTERS, len(texts))]
        v = topic + self._rng.standard_normal((len(texts), DIM)).astype(np.float32)
        unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return unit


def bench_embedder(vectors: str, seed: int) -> RandomEmbedder | ClusteredEmbedder:
    """The stand-in model of a scale lake with ``vectors`` (one of :data:`VECTORS`)."""
    if vectors not in VECTORS:
        raise ValueError(f"vectors must be one of {VECTORS}, not {vectors!r}")
    return ClusteredEmbedder(seed) if vectors == "clustered" else RandomEmbedder(seed)


def scale_lake_dir(cache: Path, rows: int, vectors: str = "random",
                   long_share: float = 0.0) -> Path:
    """Where the scale lake of ``rows`` rows with ``vectors`` (and ``long_share``) is cached."""
    name = f"scale-{rows}" if vectors == "random" else f"scale-{rows}-{vectors}"
    return cache / (f"{name}-long{round(long_share * 100)}" if long_share else name)


def build_scale_lake(root: Path, rows: int, *, seed: int = 3, vectors: str = "random",
                     long_share: float = 0.0) -> tuple[Settings, float, float]:
    """A demo lake of about ``rows`` content rows with ``vectors`` (see the module notes);
    returns (settings, ingest seconds, index build seconds). Reused when already built.

    ``long_share`` of the assistant rows (drawn, seeded) are made long: each gets
    :data:`LONG_PASSAGES` passage vectors and their pooled vector, as a text longer than the
    model reads would (lake.embedding.passages); their texts stay the demo's."""
    rng_embed = bench_embedder(vectors, seed)
    model = rng_embed.name
    settings = Settings(lake=root, embedding_model=model, ingest_batch_turns=50_000)
    if (root / "indexes").exists():
        return settings, 0.0, 0.0
    turns = max(1, rows * 10 // 42)  # the demo averages ~4.2 rows per turn
    users = max(12, turns // 150)

    pick = np.random.default_rng(seed + 1)

    def hook(table: pa.Table) -> pa.Table:
        vectors = rng_embed.encode([""] * table.num_rows)
        if not long_share:
            return with_embeddings(table, vectors, model, "done")
        answers = np.array(table.column("role").to_pylist()) == "assistant"
        long = np.flatnonzero(answers & (pick.random(table.num_rows) < long_share))
        passages: list[np.ndarray | None] = [None] * table.num_rows
        for i in long.tolist():
            parts = rng_embed.encode([""] * LONG_PASSAGES)
            passages[i] = parts
            vectors[i] = pooled(parts)
        return with_embeddings(table, vectors, model, "done", passages=passages)

    lines = generate_lines(users=users, turns=turns, seed=seed, now=NOW)
    t = time.perf_counter()
    Ingestor(settings, rows_hook=hook).ingest_records(lines)
    ingest_s = time.perf_counter() - t
    t = time.perf_counter()
    build_indexes(LakeStore(root), model=model)
    return settings, ingest_s, time.perf_counter() - t


def build_seconds_by_kind(store: LakeStore) -> dict[str, float]:
    """The live index builds' seconds per kind (read, rows, semantic, lexical, trigram),
    summed over the lake's partitions; {} for builds older than that breakdown."""
    total: dict[str, float] = {}
    for status in partition_statuses(store).values():
        if status.manifest is not None:
            for kind, seconds in status.manifest.seconds_by_kind.items():
                total[kind] = round(total.get(kind, 0.0) + seconds, 1)
    return total


def make_queries(store: LakeStore, n: int, *, seed: int = 11) -> list[tuple[str, str, str]]:
    """(tenant, user, query) triples from the lake's own texts: exact names and error
    strings, paraphrase-like word subsets, and misspellings."""
    rng = random.Random(seed)
    sample = store.read(Table.CONTENT_ROWS, columns=["tenant", "user_id", "text"]).to_pylist()
    rng.shuffle(sample)
    out: list[tuple[str, str, str]] = []
    for row in sample:
        words = [w.strip(".,:;`*()'\"") for w in row["text"].split()]
        words = [w for w in words if len(w) > 3]
        if len(words) < 3:
            continue
        kind = len(out) % 3
        if kind == 0:
            query = " ".join(words[: rng.randint(1, 2)])
        elif kind == 1:
            query = " ".join(rng.sample(words, min(4, len(words))))
        else:
            w = max(words, key=len)
            i = rng.randrange(1, len(w) - 1)
            query = w[:i] + w[i + 1:]
        out.append((row["tenant"], row["user_id"], query))
        if len(out) >= n:
            break
    return out


@dataclass(frozen=True)
class Latency:
    """Latency percentiles in milliseconds."""

    p50: float
    p95: float
    p99: float

    @classmethod
    def of(cls, samples: list[float]) -> Latency:
        """Percentiles of samples (ms)."""
        q = statistics.quantiles(samples, n=100, method="inclusive")
        return cls(q[49], q[94], q[98])


def measure(settings: Settings, queries: list[tuple[str, str, str]], *,
            scope: str = "user", enabled: dict[str, bool] | None = None,
            vectors: str = "random") -> Latency:
    """Warm the service, then time each query once (query embedding excluded)."""
    service = SearchService(LakeStore(settings.lake), embedder=bench_embedder(vectors, 5))
    flags = enabled or {"semantic": True, "lexical": True, "trigram": True}

    def request(tenant: str, user: str, query: str) -> SearchRequest:
        principal = (Principal(tenant, analyst=True) if scope == "tenant"
                     else Principal(tenant, user))
        return SearchRequest(query, principal, scope=scope, enabled=flags,  # type: ignore[arg-type]
                             as_of=NOW, k=10, snippets="both")

    for tenant, user, query in queries[:20]:
        service.search(request(tenant, user, query))
    samples = []
    for tenant, user, query in queries:
        t = time.perf_counter()
        service.search(request(tenant, user, query))
        samples.append((time.perf_counter() - t) * 1000)
    return Latency.of(samples)
