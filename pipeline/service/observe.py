"""Request latency per route, as a plain ASGI middleware.

Starlette's ``@app.middleware("http")`` (``BaseHTTPMiddleware``) runs the rest of the app in
a task of its own and passes the response through a memory stream: on an idle search of the
serve bench that machinery held the interpreter for a noticeable share of the request. This
middleware only wraps ``send``: it notes the status when the response starts and observes
the time when the response is complete (or when the app raised before completing it).
"""

from __future__ import annotations

import time

from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestTimer:
    """ASGI middleware observing each HTTP request's seconds in ``histogram``, labelled by
    method, route template (never the raw path, so ids do not become label values;
    "unmatched" when no route took the request) and status (500 when the app raised before
    it answered)."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, timing it from here to the response's last body part."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        observed = False

        def observe() -> None:
            nonlocal observed
            if not observed:
                observed = True
                # the router leaves the matched route in the request's scope
                route = getattr(scope.get("route"), "path", "unmatched")
                self.histogram.labels(method=scope["method"], route=route,
                                      status=str(status)).observe(
                    time.perf_counter() - started)

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                observe()

        try:
            await self.app(scope, receive, timed_send)
        finally:
            observe()
