"""Shared fixtures: real lakes under tmp_path; hypothesis settings for a busy machine."""

from __future__ import annotations

import multiprocessing.forkserver
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from lake.settings import Settings
from tests.reliability.lake_audit import KILL_PROPERTY, KillEntry

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


# The crash tests' kill tally (tests/reliability): each test's entries arrive in its reports'
# user_properties, in this process or from a pytest-xdist worker, and print after the results.
_KILLS: list[KillEntry] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the kill points of a finished test (its teardown report carries them)."""
    if report.when != "teardown":
        return
    for key, entry in report.user_properties:
        if key == KILL_PROPERTY:
            job, tried, killed, result = cast(KillEntry, entry)  # a list once it crossed xdist
            _KILLS.append((job, tried, killed, result))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the kill tally after the test results, outside output capture."""
    if _KILLS:
        terminalreporter.write_sep("-", "crash safety: kill points")
        for job, tried, killed, result in _KILLS:
            terminalreporter.write_line(f"{job}: {tried} kill points tried, {killed} processes "
                                        f"killed; {result}")
        terminalreporter.write_line(f"total: {sum(e[1] for e in _KILLS)} kill points tried, "
                                    f"{sum(e[2] for e in _KILLS)} processes killed")
