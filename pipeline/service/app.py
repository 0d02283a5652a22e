"""The app factory: one warm FastAPI app per lake, and the entry uvicorn starts.

``create_app(settings)`` builds everything a process keeps warm — the key store, one search
service (which reopens newer published indexes itself), the catalog and materializer, the
group-commit writer, the metrics — and mounts the routers. Tests build one per lake;
``turnlake serve`` has uvicorn call ``app_from_env`` in each worker process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from lake.embedding.base import Embedder
from lake.embedding.factory import embedder_from
from lake.errors import EmbeddingError
from lake.index.status import PartitionStatus
from lake.keys import KeyStore
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.workspace import WorkspacePuller
from pipeline.mcp_server import mcp_http_app
from pipeline.service.context import ServiceContext
from pipeline.service.docs import serve_docs_offline
from pipeline.service.errors import install_error_handlers
from pipeline.service.intake import BodyLimit
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.observe import RequestTimer
from pipeline.service.routes import conversations, ops, pull, refs, search, turns
from pipeline.service.writer import GroupWriter

log = logging.getLogger(__name__)
# How `turnlake serve` hands its options to the worker processes uvicorn starts.
ENV_LAKE = "TURNLAKE_LAKE"
ENV_NO_EMBED = "TURNLAKE_SERVE_NO_EMBED"
ENV_NO_INDEX = "TURNLAKE_SERVE_NO_INDEX"
ENV_NO_SPOOL = "TURNLAKE_SERVE_NO_SPOOL"
ENV_MAX_LAG = "TURNLAKE_SERVE_MAX_LAG"
ENV_WORKSPACE = "TURNLAKE_SERVE_WORKSPACE"


def service_embedder(settings: Settings) -> Embedder:
    """The embedder of a long-running process: the query embedder of the settings (one
    intra-op thread per call by default, ``embed_query_threads``), so concurrent queries
    share the cores instead of each claiming all of them."""
    return embedder_from(settings, "query")


def create_app(settings: Settings, *, embedder: Embedder | None = None, embed: bool = True,
               index: bool = True, workspace: Path | None = None) -> FastAPI:
    """The service over one lake. ``embed=False`` records turns without embeddings (search
    then uses the text generators for them); ``index=False`` leaves index builds to
    ``turnlake index``; ``workspace`` is the folder of this machine that ``POST /v1/pull``
    and the MCP ``pull_files`` tool write into (None: no pulls)."""
    provider = embedder or service_embedder(settings)
    metrics = ServiceMetrics()
    store = LakeStore(settings.lake)
    search_service = SearchService(store, embedder=provider,
                                   memory_budget=settings.search_memory_budget)
    context = ServiceContext(
        settings=settings,
        keys=KeyStore(settings.lake, s3=settings.s3, cache_s=settings.key_cache_s),
        search=search_service, catalog=TurnCatalog(store), materializer=TurnMaterializer(store),
        writer=GroupWriter(settings, embedder=provider if embed else None, index=index,
                           metrics=metrics, child=embedder is None),
        metrics=metrics, puller=WorkspacePuller(store), workspace=workspace)
    metrics.watch_stale(lambda: _stale(search_service.statuses().values()))
    metrics.watch_partitions(search_service.partitions.stats)
    # The agent tools at /mcp: the same keys, search service and identity rules as the routes.
    mcp_server, mcp_app = mcp_http_app(settings, context.keys.authenticate,
                                       service=search_service, path="/", workspace=workspace,
                                       before_reads=context.wait_for_commits)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Load the model before the first request instead of during it.
        await run_in_threadpool(_warm, provider)
        context.writer.start()
        try:
            async with mcp_server.session_manager.run():
                yield
        finally:
            context.writer.close()

    app = FastAPI(title="turnlake", version="1",
                  summary="Record conversation turns and search them, behind API keys.",
                  lifespan=lifespan)
    app.state.turnlake = context
    install_error_handlers(app)
    serve_docs_offline(app)  # /docs and /redoc with their assets served here, not from a CDN
    for module in (turns, search, conversations, refs, pull, ops):
        app.include_router(module.router)
    app.mount("/mcp", mcp_app)
    # Added before the timer, so inside it: a refused body is still measured.
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(RequestTimer, histogram=metrics.request_seconds)

    return app


def _warm(embedder: Embedder) -> None:
    try:
        embedder.encode(["warm up"])
    except EmbeddingError as exc:  # searches then fall back to the text generators, and say so
        log.warning("the embedding model did not load: %s", exc)


def _stale(statuses: Iterable[PartitionStatus]) -> int:
    return sum(1 for s in statuses if s.freshness == "stale")


def app_from_env() -> FastAPI:
    """The app uvicorn builds in each worker process of ``turnlake serve``."""
    settings = Settings.from_env(os.environ.get(ENV_LAKE))
    if os.environ.get(ENV_NO_SPOOL):
        settings = settings.with_(record_spool=False)
    if lag := os.environ.get(ENV_MAX_LAG):
        settings = settings.with_(record_max_lag_s=float(lag))
    workspace = os.environ.get(ENV_WORKSPACE)
    return create_app(settings, embed=not os.environ.get(ENV_NO_EMBED),
                      index=not os.environ.get(ENV_NO_INDEX),
                      workspace=Path(workspace) if workspace else None)
