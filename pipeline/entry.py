"""The ``turnlake`` console script's entry point, kept apart from :mod:`pipeline.cli`.

Importing this module costs nothing, which matters because of who imports it: the process
that forks ingest workers preloads the program's main module (see
:func:`pipeline.workers.worker_context`), and the console script's main module imports only
this. The command line itself, a second of imports, loads when :func:`main` runs.
"""

from __future__ import annotations

import sys

# `pip install turnlake` is the client alone; the command line is the server's.
_SERVER_HINT = ("the turnlake command needs the server's packages ({name} is not installed): "
                "pip install 'turnlake[server]'")


def main() -> None:
    """Run the ``turnlake`` command line."""

    if sys.argv[1:2] == ["hook"] and sys.argv[2:3] in (["claude-code-recall"],
                                                       ["gemini-cli-recall"]):
        # The agent waits for this hook on every prompt: it runs without the command
        # line's second of imports (pipeline.recall needs the standard library only).
        from pipeline.recall import main as recall

        sys.exit(recall(sys.argv[3:], agent=sys.argv[2].removesuffix("-recall")))
    from pipeline.workers import keep_freed_pages

    keep_freed_pages()  # before the command line imports deltalake and polars
    try:
        from pipeline.cli import app
    except ModuleNotFoundError as exc:
        print(_SERVER_HINT.format(name=exc.name), file=sys.stderr)
        raise SystemExit(2) from None

    app()
