"""The importers' tests keep live capture's state (and hook logs) in a cache folder of their
own, never the user's ~/.cache."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$XDG_CACHE_HOME under tmp_path; no $TURNLAKE_KEY or $TURNLAKE_HOOK_LOG leaks in."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for name in ("TURNLAKE_KEY", "TURNLAKE_RECORDER_KEY", "TURNLAKE_HOOK_LOG", "TURNLAKE_LAKE"):
        monkeypatch.delenv(name, raising=False)
    return cache
