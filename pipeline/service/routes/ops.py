"""``GET /healthz`` (no key) and ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from pipeline.service.context import context_of

router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz(request: Request) -> dict[str, str]:
    """Liveness: answers without a key once the process serves its lake."""
    return {"status": "ok", "lake": str(context_of(request).settings.lake)}


@router.get("/metrics")
def metrics(request: Request) -> Response:
    """Request latency per route, turns recorded, commit batch sizes, ack→searchable time,
    stale partitions."""
    return Response(context_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)
