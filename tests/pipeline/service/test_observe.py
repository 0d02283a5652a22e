"""The request timer: one observation per request, labelled by route template and status."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Histogram

from pipeline.service.observe import RequestTimer


def _timed_app(mid_stream: list[float] | None = None
               ) -> tuple[TestClient, CollectorRegistry]:
    registry = CollectorRegistry()
    histogram = Histogram("t_request_seconds", "latency", ["method", "route", "status"],
                          registry=registry)
    app = FastAPI()

    @app.get("/items/{item_id}")
    def item(item_id: str) -> dict[str, str]:
        return {"id": item_id}

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("the route failed")

    @app.get("/stream")
    def stream() -> StreamingResponse:
        def parts() -> Iterator[bytes]:
            yield b"a"
            if mid_stream is not None:  # what was observed while the body is still going
                mid_stream.append(_count(registry, "/stream", "200"))
            yield from (b"b", b"c")
        return StreamingResponse(parts())

    app.add_middleware(RequestTimer, histogram=histogram)
    return TestClient(app, raise_server_exceptions=False), registry


def _count(registry: CollectorRegistry, route: str, status: str, method: str = "GET") -> float:
    value = registry.get_sample_value(
        "t_request_seconds_count", {"method": method, "route": route, "status": status})
    return value or 0.0


def test_requests_are_counted_once_under_their_route_template() -> None:
    mid_stream: list[float] = []
    client, registry = _timed_app(mid_stream)
    assert client.get("/items/a").json() == {"id": "a"}
    client.get("/items/b")
    assert client.get("/stream").content == b"abc"
    assert _count(registry, "/items/{item_id}", "200") == 2
    assert _count(registry, "/stream", "200") == 1  # three body parts, one observation
    assert mid_stream == [0.0]  # observed when the body is complete, not at its first part
    # raw paths never become label values
    assert _count(registry, "/items/a", "200") == 0


def test_unmatched_paths_and_failing_routes_are_observed() -> None:
    client, registry = _timed_app()
    assert client.get("/nowhere").status_code == 404
    assert client.get("/boom").status_code == 500
    assert client.post("/items/a").status_code == 405
    assert _count(registry, "unmatched", "404") == 1
    assert _count(registry, "/boom", "500") == 1
    assert _count(registry, "/items/{item_id}", "405", method="POST") \
        + _count(registry, "unmatched", "405", method="POST") == 1
