"""``/docs`` (Swagger UI) and ``/redoc`` from assets the server holds: FastAPI's own pages
load them from a CDN, which leaves them blank on a machine without internet.

The assets are the ones the ``fastapi-offline`` package bundles (Swagger UI 5, which reads
the OpenAPI 3.1 document FastAPI writes); they are served under ``/docs-assets``.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs-assets"


def serve_docs_offline(app: FastAPI) -> None:
    """Replace the app's CDN-backed ``/docs`` and ``/redoc`` with pages whose scripts and
    styles the app serves itself."""
    pages = {app.docs_url, app.redoc_url}
    app.router.routes[:] = [r for r in app.router.routes
                            if getattr(r, "path", None) not in pages]
    openapi_url = app.openapi_url or "/openapi.json"
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
                              with_google_fonts=False)
