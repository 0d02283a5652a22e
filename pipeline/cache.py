"""turnlake's folder in the user's cache, for what hooks keep between runs (capture state,
logs). Standard library only: the prompt hook imports it on every prompt."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/turnlake``, else ``~/.cache/turnlake``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "turnlake"
