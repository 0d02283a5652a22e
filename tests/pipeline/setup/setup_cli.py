"""What the setup tests of every agent share: a temporary HOME, the CLI, reading JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from pipeline.cli import app


def run_setup(agent: str, *args: str) -> tuple[int, str]:
    """``turnlake setup AGENT ARGS``: exit code and output."""
    result = CliRunner().invoke(app, ["setup", agent, *args])
    return result.exit_code, result.output


def read_json(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text())
    return value
