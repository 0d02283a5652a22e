"""The one exception tree of turnlake.

::

    TurnlakeError
    ├── RecordError            a turn record (or one line of input) is invalid
    ├── RefError               a conv:* reference is malformed or refused
    │   ├── RefNotFound        the ref is well formed but names no retained object
    │   └── RefExpired         the object existed but is past its expires_at
    ├── AccessDenied           the principal may not see or ask for this
    ├── Unauthenticated        no API key, or one the lake does not know (or revoked)
    ├── LakeError              the lake (Delta tables, file store) failed or is inconsistent
    │   └── ConcurrentWriteError   another writer committed first; safe to re-run
    ├── IndexUnavailable       a partition index is missing or unusable
    │   └── IndexStaleError    the index is older than its table and cannot answer alone
    ├── EmbeddingError         the embedding provider failed (searches fall back to text)
    ├── WorkspaceError         a pull workspace is unusable or would be written unsafely
    └── QueryError             a search or catalog request is invalid

Every error carries a message that names what was wrong and where.
"""

from __future__ import annotations


class TurnlakeError(Exception):
    """Base class of every error turnlake raises on purpose."""


class RecordError(TurnlakeError):
    """A turn record, or one input line, failed parsing or validation."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class RefError(TurnlakeError):
    """A conv:* reference is malformed or refused (traversal, control characters ...)."""


class RefNotFound(RefError):
    """A well-formed ref that names no retained object."""


class RefExpired(RefError):
    """A ref whose object exists but is past its expires_at."""


class AccessDenied(TurnlakeError):
    """The principal may not see the requested data or use the requested scope."""


class Unauthenticated(TurnlakeError):
    """A request carried no API key, or one that is unknown, malformed or revoked."""


class LakeError(TurnlakeError):
    """The lake's tables or file store failed or are inconsistent."""


class ConcurrentWriteError(LakeError):
    """Another writer committed a conflicting change first; re-running the job is safe."""


class IndexUnavailable(TurnlakeError):
    """A partition index is missing or cannot be used."""


class IndexStaleError(IndexUnavailable):
    """The index was built from an older table version than the one being read."""


class EmbeddingError(TurnlakeError):
    """The embedding provider failed; text generators still work."""


class WorkspaceError(TurnlakeError):
    """A workspace folder cannot be pulled into (or cleaned) safely: a symlink, a bad
    manifest, an unreadable folder."""


class QueryError(TurnlakeError):
    """A search, catalog or materialization request is invalid (``field``: the request field
    at fault, when one is)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
