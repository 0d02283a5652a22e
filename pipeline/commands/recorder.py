"""Commands of the recorder family (registered on the shared typer app)."""

from __future__ import annotations

from pipeline.commands.common import app

__all__ = ["app"]
