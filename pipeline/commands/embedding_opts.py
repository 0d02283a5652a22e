"""The ``--embedding-runtime`` option shared by the commands that embed (ingest, import, embed)."""

from __future__ import annotations

from typing import Annotated

import typer

from lake.errors import TurnlakeError
from lake.settings import Settings
from pipeline.commands.common import fail

RuntimeOption = Annotated[str | None, typer.Option(
    "--embedding-runtime", metavar="onnx|torch",
    help="Embedding runtime: onnx (ONNX Runtime, default) or torch (PyTorch); default "
         "$TURNLAKE_EMBEDDING_RUNTIME, else onnx.")]


def with_runtime(settings: Settings, runtime: str | None) -> Settings:
    """``settings`` with the runtime a command was given (exit 2 on an unknown one)."""
    if runtime is None:
        return settings
    try:
        return settings.with_(embedding_runtime=runtime.strip().lower())
    except TurnlakeError as exc:
        raise fail(exc) from exc
