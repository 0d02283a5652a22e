"""Fixtures of the reliability tests: the kill points a test tried, for the tally that
tests/conftest.py prints at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.lake_audit import KILL_PROPERTY, KillEntry, KillLog


@pytest.fixture
def kill_log(request: pytest.FixtureRequest) -> Iterator[KillLog]:
    """This test's kill tally. It travels in the test's report (user_properties), so the tally
    also reaches the terminal summary when pytest-xdist ran the test in a worker process."""
    entries: list[KillEntry] = []
    yield KillLog(entries)
    request.node.user_properties.extend((KILL_PROPERTY, entry) for entry in entries)
