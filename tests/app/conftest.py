"""Fixtures of the app tests: one seeded lake shared by every test that only reads it."""

from __future__ import annotations

import pytest

from tests.app.workbench_lake import SeededLake, seed


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> SeededLake:
    """One seeded lake for every app test that only reads it."""
    return seed(tmp_path_factory.mktemp("workbench") / "lake")
