"""``GET /healthz`` and ``GET /readyz`` (no key), ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from pipeline.service.context import context_of

router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz(request: Request) -> dict[str, object]:
    """Liveness: answers without a key once the process serves its lake, starting up or not;
    says how far the start-up is and what waits in the writer."""
    ctx = context_of(request)
    return {"status": "ok", "lake": str(ctx.settings.lake),
            "readiness": ctx.writer.readiness.as_json(), "backlog": ctx.writer.backlog()}


@router.get("/readyz", responses={503: {"description": "still starting up: the body says "
                                                      "which phase and how far"}})
def readyz(request: Request) -> JSONResponse:
    """Readiness: 200 once every turn acknowledged before the start (by this lake's servers,
    dead ones included) is committed and searchable; 503 with the start-up's phase, progress
    and last problem until then. Load balancers send searches only to ready servers."""
    ctx = context_of(request)
    readiness = ctx.writer.readiness
    body = {"status": "ready" if readiness.ready else "starting",
            "readiness": readiness.as_json(), "backlog": ctx.writer.backlog()}
    return JSONResponse(body, status_code=200 if readiness.ready else 503)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    """Request latency per route, turns recorded, commit batch sizes, ack→searchable time,
    stale partitions, the writer's backlog and the start-up's time."""
    return Response(context_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)
