"""The workbench on a lake in an S3-compatible store (moto on loopback): every page renders and
search finds the known turn, with the store named only by TURNLAKE_LAKE and AWS_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lake.keys import KeyStore
from tests.app.test_pages import MAIN, TIMEOUT, assert_every_page_renders
from tests.app.workbench_lake import QUERY, TENANT, seed
from tests.s3_server import aws_env, new_bucket, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture, imported for pytest


def test_every_page_renders_and_search_works_on_an_s3_lake(
        s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in aws_env(s3_endpoint).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TURNLAKE_CACHE", str(tmp_path / "cache"))
    lake = f"s3://{new_bucket(s3_endpoint)}/workbench"
    seed(lake, demo_turns=40)
    monkeypatch.setenv("TURNLAKE_LAKE", lake)
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.delenv("TURNLAKE_TENANTS", raising=False)
    monkeypatch.delenv("TURNLAKE_WORKBENCH_AUTH", raising=False)
    # Signed in with a key the s3:// lake's key store holds.
    _, key = KeyStore(lake).create(tenant=TENANT, role="analyst")
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    assert [t.value for t in at.title] == ["Sign in"]
    at.text_input[0].input(key)
    at = at.form_submit_button[0].click().run()
    assert_every_page_renders(at)
    at.switch_page("screens/search.py").run()
    at.text_input[0].input(QUERY)
    at = at.form_submit_button[0].click().run()
    assert not at.exception and not at.error
    assert at.dataframe[0].value["conversation"].iloc[0] == "Quokka workbook"  # the table
