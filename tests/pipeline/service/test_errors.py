"""The one error shape, for an error no handler expected too."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from lake import errors as lake_errors
from pipeline.service.errors import install_error_handlers


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/broken")
    def broken() -> None:
        raise RuntimeError("a bug the routes did not expect")

    @app.get("/refused")
    def refused() -> None:
        raise lake_errors.QueryError("k must be positive")

    return app


def test_an_unexpected_error_is_a_logged_500_in_the_one_shape(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="pipeline.service.errors"), \
            TestClient(_app(), raise_server_exceptions=False) as client:
        answer = client.get("/broken")
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["code"] == "internal" and "RuntimeError" in error["message"]
    assert "a bug the routes did not expect" not in answer.text  # details stay in the log
    logged = [r for r in caplog.records if r.name == "pipeline.service.errors"]
    assert logged and logged[0].exc_info is not None
    assert "GET /broken failed" in logged[0].getMessage()


def test_a_turnlake_error_keeps_its_own_status() -> None:
    with TestClient(_app(), raise_server_exceptions=False) as client:
        answer = client.get("/refused")
    assert answer.status_code == 400
    assert answer.json()["error"] == {"code": "invalid_request", "message": "k must be positive"}
