"""The ``turnlake`` command line (typer). Every command takes ``--lake``.

The commands live in ``pipeline.commands``; importing the modules registers them on ``app``.
"""

from __future__ import annotations

from pipeline.workers import keep_freed_pages

keep_freed_pages()  # `python -m pipeline.cli`: before the commands import deltalake and polars

from pipeline.commands import (  # noqa: E402, F401 - importing registers the commands
    agent,
    agent_imports,
    importers,
    index,
    maintain,
    members,
    query,
    recorder,
    retention,
    serve,
    setup,
    write,
)
from pipeline.commands.common import app  # noqa: E402

__all__ = ["app", "main"]


def main() -> None:
    """Entry point for ``python -m pipeline.cli``."""
    app()


if __name__ == "__main__":
    main()
