"""Fixtures of the reliability tests: the kill-point tally printed at the end of the run."""

from __future__ import annotations

import pytest

from tests.reliability.lake_audit import KillEntry, KillLog

_KILLS = pytest.StashKey[list[KillEntry]]()


@pytest.fixture
def kill_log(request: pytest.FixtureRequest) -> KillLog:
    """The session's kill tally (kept on the config, printed by the summary hook below)."""
    return KillLog(request.config.stash.setdefault(_KILLS, []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    """Print the kill tally after the test results, outside output capture."""
    entries = config.stash.get(_KILLS, [])
    if entries:
        terminalreporter.write_sep("-", "crash safety: kill points")
        for job, tried, killed, result in entries:
            terminalreporter.write_line(f"{job}: {tried} kill points tried, {killed} processes "
                                        f"killed; {result}")
        terminalreporter.write_line(f"total: {sum(e[1] for e in entries)} kill points tried, "
                                    f"{sum(e[2] for e in entries)} processes killed")
