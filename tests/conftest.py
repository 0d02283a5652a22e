"""Shared fixtures: real lakes under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings for a fresh lake under tmp_path."""
    return Settings(lake=tmp_path / "lake")


@pytest.fixture
def hashing_settings(tmp_path: Path) -> Settings:
    """Settings whose embedder is the dependency-free hashing provider (fast, deterministic)."""
    return Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
