"""Importers of third-party chat exports into ``turnlake.turn.v1`` records (writer "minimal").

Each importer returns an :class:`ImportStream`: iterate it (or hand it to
``Ingestor.ingest_records``) to get the records, then read ``skipped`` and ``problems``.
"""

from pipeline.importers.chatgpt import iter_chatgpt
from pipeline.importers.claude_code import iter_claude_code
from pipeline.importers.common import ImportProblem, ImportResult, ImportStream, stable_id

__all__ = [
    "ImportProblem",
    "ImportResult",
    "ImportStream",
    "iter_chatgpt",
    "iter_claude_code",
    "stable_id",
]
