"""What one service process holds warm: settings, keys, the search service and the readers,
the group-commit writer and the metrics. Built once by the app factory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastapi import Request

from lake.errors import LakeError
from lake.keys import KeyStore
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.search.service import SearchService
from lake.settings import Settings
from lake.workspace import WorkspacePuller
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.writer import GroupWriter


@dataclass
class ServiceContext:
    """The warm objects every route works with."""

    settings: Settings
    keys: KeyStore
    search: SearchService
    catalog: TurnCatalog
    materializer: TurnMaterializer
    writer: GroupWriter
    metrics: ServiceMetrics
    puller: WorkspacePuller
    workspace: Path | None = None  # where POST /v1/pull may write (None: pulls are off)

    def wait_for_commits(self) -> None:
        """Wait until every recording this server answered so far is committed
        (GroupWriter.flush), so that a host reads and erases what it recorded, spool or not.
        LakeError (503) when the commits do not catch up within the lake's lock timeout."""
        if not self.writer.flush():
            raise LakeError("recordings answered before this request are still not "
                            "committed (the lake is slow or failing); try again later")


def context_of(request: Request) -> ServiceContext:
    """The context of the app serving a request."""
    ctx = request.app.state.turnlake
    assert isinstance(ctx, ServiceContext)
    return ctx


def committed_context(request: Request) -> ServiceContext:
    """The context, once every recording this server answered before the request is
    committed (:meth:`ServiceContext.wait_for_commits`)."""
    ctx = context_of(request)
    ctx.wait_for_commits()
    return ctx
