"""What one service process holds warm: settings, keys, the search service and the readers,
the group-commit writer and the metrics. Built once by the app factory."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request

from lake.errors import LakeError
from lake.keys import KeyStore
from lake.location import LakeLocation
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.search.service import SearchService
from lake.settings import Settings
from lake.workspace import WorkspacePuller
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.spool import wait_for_answered
from pipeline.service.writer import GroupWriter

# The longest a read waits for answered recordings to be committed before it answers 503.
_READ_WAIT_S = 30.0


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
        """Wait until every recording answered so far is committed — by this server
        (GroupWriter.flush) and by the other servers and workers on this lake's folder (their
        spools) — so that a host reads and erases what it recorded, whichever worker it
        reaches. LakeError (503) when the commits do not catch up within
        ``_READ_WAIT_S``."""
        now = time.time()
        if not self.writer.flush(timeout_s=_READ_WAIT_S) or (
                self.writer.spooling and not wait_for_answered(
                    LakeLocation.of(self.settings.lake).local, before=now,
                    timeout_s=_READ_WAIT_S)):
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
