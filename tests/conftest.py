"""Shared fixtures: real lakes under tmp_path; hypothesis settings for a busy machine."""

from __future__ import annotations

import multiprocessing.forkserver
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from lake.settings import Settings

# The suite runs on 2 shared cores beside other suites: a generated example may take seconds,
# so no example deadline and no too_slow / data_too_large health checks (they measure time and
# failed `make test` under load). Tests that set their own @settings inherit the rest; one that
# sets suppress_health_check must list too_slow itself.
hypothesis_settings.register_profile(
    "busy",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
hypothesis_settings.register_profile("thorough", deadline=None, max_examples=500,
                                     suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "busy"))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings for a fresh lake under tmp_path."""
    return Settings(lake=tmp_path / "lake")


@pytest.fixture
def hashing_settings(tmp_path: Path) -> Settings:
    """Settings whose embedder is the dependency-free hashing provider (fast, deterministic)."""
    return Settings(lake=tmp_path / "lake", embedding_model="hashing-64")


@pytest.fixture(autouse=True)
def original_main_module() -> Iterator[None]:
    """Each test starts with pytest's own ``__main__`` module.

    Streamlit's script runner (the app tests' AppTest) installs the page it ran as
    ``__main__`` and leaves it there. An ingest's worker fork server imports ``__main__`` by
    its file, so every later worker-based ingest ran a workbench page in its fork server and
    died with BrokenProcessPool, in the full suite only.
    """
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def fresh_fork_server() -> Iterator[None]:
    """Each test starts without the ingest workers' fork server of an earlier test.

    The fork server outlives the ingest that started it (it serves the whole process), so a
    test would otherwise get one started under another test's environment and sys.path, and
    Ray's no-leftover-process checks saw the server as theirs.
    """
    yield
    server = multiprocessing.forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is not None:
        server._stop()
