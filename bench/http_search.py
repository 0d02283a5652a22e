"""Search through HTTP, end to end, on the 100k-row scale lake (issue #20's latency target).

Run: ``.venv/bin/python -m bench.http_search [rows]`` (default 100,000 rows). A real
``uvicorn`` server process serves the scale lake of :mod:`bench.scale`; a client sends the
scale bench's user-scope queries (names, error strings, word subsets, misspellings) one at a
time with each user's own key, over a kept-alive connection on 127.0.0.1, and times each
request from send to parsed answer: HTTP, auth, the query embedding and the hybrid search.

The scale lake's row vectors are random (it measures speed, not quality), so the server's
query embedder is the packaged MiniLM through ONNX Runtime, one intra-op thread as in
``turnlake serve``, recorded under the lake's embedding identity: every query pays the real
model's cost and the semantic arm searches as it would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.scale import MODEL, Latency, build_scale_lake, make_queries
from bench.serve import ROOT, _free_port, stop_server, wait_until_healthy
from lake.embedding.factory import embedder_for
from lake.keys import KeyStore
from lake.store import LakeStore


class MiniLMUnderScaleIdentity:
    """The packaged MiniLM (ONNX, one thread), named as the scale lake's vectors are."""

    name = MODEL

    def __init__(self) -> None:
        self._inner = embedder_for(None, threads=1)

    @property
    def dim(self) -> int:
        """Width of the vectors."""
        return self._inner.dim

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """The model's vectors for ``texts``."""
        return self._inner.encode(texts, batch_size=batch_size)


def serve(lake: Path, port: int) -> None:
    """Serve the lake on 127.0.0.1:``port`` until interrupted (the server process)."""
    import uvicorn

    from lake.settings import Settings
    from pipeline.service.app import create_app

    settings = Settings(lake=lake, embedding_model=MODEL)
    app = create_app(settings, embedder=MiniLMUnderScaleIdentity(), embed=False, index=False)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def bench_http_search(rows: int = 100_000, queries: int = 300, *,
                      cache: Path | None = None) -> dict[str, Any]:
    """p50/p95 of user-scope searches through HTTP on a ``rows``-row scale lake (the one of
    ``make bench``'s cache when given: the same lake as its scale section)."""
    root = (cache or Path(tempfile.mkdtemp(prefix="bench-http-"))) / f"scale-{rows}"
    settings, _, _ = build_scale_lake(root, rows)
    asked = make_queries(LakeStore(settings.lake), queries + 20)
    keys = KeyStore(settings.lake)
    made = {(t, u): keys.create(tenant=t, role="user", user_id=u)
            for t, u in sorted({(t, u) for t, u, _ in asked})}
    key_of = {who: key for who, (_, key) in made.items()}
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.http_search", "--serve",
                             str(settings.lake), str(port)], cwd=ROOT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url)
        took: list[float] = []
        hits = 0
        with httpx.Client(base_url=url, timeout=60) as http:
            for i, (tenant, user, query) in enumerate(asked):
                headers = {"Authorization": f"Bearer {key_of[(tenant, user)]}"}
                t = time.perf_counter()
                answer = http.post("/v1/search", json={"query": query, "k": 10},
                                   headers=headers)
                body = answer.json()
                elapsed = (time.perf_counter() - t) * 1000
                if answer.status_code != 200:
                    raise RuntimeError(f"search failed: {answer.status_code} {body}")
                if i >= 20:  # the first ones warm the server's indexes and model
                    took.append(elapsed)
                    hits += bool(body["hits"])
    finally:
        stop_server(proc)
        for stored, _ in made.values():  # the lake is make bench's cache: leave no keys in it
            keys.revoke(stored.name)
    latency = Latency.of(took)
    query_only = MiniLMUnderScaleIdentity()
    query_only.encode(["warm up"])
    encode_ms = []
    for _, _, query in asked[20:120]:
        t = time.perf_counter()
        query_only.encode([query])
        encode_ms.append((time.perf_counter() - t) * 1000)
    return {"rows": rows, "queries": len(took), "with_hits": hits,
            "http_search_p50_ms": round(latency.p50, 2),
            "http_search_p95_ms": round(latency.p95, 2),
            "query_embedding_p50_ms": round(float(np.percentile(encode_ms, 50)), 2)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        print(json.dumps(bench_http_search(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000),
                         indent=2))
