"""turnlake's database: records, tables, refs, indexes and the search service.

The public API is listed here; everything else is internal to its module.
"""

from lake.errors import (
    AccessDenied,
    ConcurrentWriteError,
    EmbeddingError,
    IndexError_,
    IndexStaleError,
    LakeError,
    QueryError,
    RecordError,
    RefError,
    RefExpired,
    RefNotFound,
    TurnlakeError,
)
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

__all__ = [
    "AccessDenied",
    "ConcurrentWriteError",
    "EmbeddingError",
    "FusionSettings",
    "Hit",
    "IndexError_",
    "IndexStaleError",
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
