"""``/docs`` and ``/redoc`` load their scripts from the server, not from a CDN."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from lake.settings import Settings
from pipeline.service.app import create_app
from pipeline.service.docs import serve_docs_offline


def test_the_docs_pages_use_the_server_s_own_assets(tmp_path: Path) -> None:
    settings = Settings.from_env(str(tmp_path / "lake")).with_(embedding_model="hashing-64")
    app = create_app(settings, embed=False, index=False)
    serve_docs_offline(app)
    client = TestClient(app)  # no lifespan: the pages need no warm lake
    for page, asset in (("/docs", "/docs-assets/swagger-ui-bundle.js"),
                        ("/redoc", "/docs-assets/redoc.standalone.js")):
        html = client.get(page)
        assert html.status_code == 200, html.text
        assert asset in html.text
        assert "cdn." not in html.text and "fonts.googleapis" not in html.text
        script = client.get(asset)
        assert script.status_code == 200 and len(script.content) > 100_000
    assert client.get("/docs-assets/swagger-ui.css").status_code == 200
    assert client.get("/openapi.json").json()["paths"]["/v1/turns"]
