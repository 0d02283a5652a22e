"""turnlake's database: records, tables, refs, indexes and the search service.

The public API is listed here; everything else is internal to its module.

Names are imported on first use (PEP 562): ``import lake.records`` runs this file first, and
the ingest workers, which only need records and projection, would otherwise pay for importing
the search service (pyarrow.dataset, faiss, tantivy) on every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lake.errors import (
    AccessDenied,
    ConcurrentWriteError,
    EmbeddingError,
    IndexStaleError,
    IndexUnavailable,
    LakeError,
    QueryError,
    RecordError,
    RefError,
    RefExpired,
    RefNotFound,
    TurnlakeError,
)

if TYPE_CHECKING:
    from lake.records import TurnRecord, json_schema, parse_record
    from lake.refs import Ref, file_ref, format_ref, parse_ref
    from lake.search.access import Principal
    from lake.search.catalog import TurnCatalog
    from lake.search.materialize import TurnMaterializer
    from lake.search.request import FusionSettings, Hit, SearchRequest, SearchResult
    from lake.search.service import SearchService
    from lake.settings import RetentionRule, Settings
    from lake.store import LakeStore
    from lake.tables import Table

# Public name -> the module that defines it.
_LAZY = {
    "TurnRecord": "lake.records", "json_schema": "lake.records", "parse_record": "lake.records",
    "Ref": "lake.refs", "file_ref": "lake.refs", "format_ref": "lake.refs",
    "parse_ref": "lake.refs",
    "Principal": "lake.search.access",
    "TurnCatalog": "lake.search.catalog",
    "TurnMaterializer": "lake.search.materialize",
    "FusionSettings": "lake.search.request", "Hit": "lake.search.request",
    "SearchRequest": "lake.search.request", "SearchResult": "lake.search.request",
    "SearchService": "lake.search.service",
    "RetentionRule": "lake.settings", "Settings": "lake.settings",
    "LakeStore": "lake.store",
    "Table": "lake.tables",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lake' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AccessDenied",
    "ConcurrentWriteError",
    "EmbeddingError",
    "FusionSettings",
    "Hit",
    "IndexStaleError",
    "IndexUnavailable",
    "LakeError",
    "LakeStore",
    "Principal",
    "QueryError",
    "RecordError",
    "Ref",
    "RefError",
    "RefExpired",
    "RefNotFound",
    "RetentionRule",
    "SearchRequest",
    "SearchResult",
    "SearchService",
    "Settings",
    "Table",
    "TurnCatalog",
    "TurnMaterializer",
    "TurnRecord",
    "TurnlakeError",
    "file_ref",
    "format_ref",
    "json_schema",
    "parse_record",
    "parse_ref",
]
