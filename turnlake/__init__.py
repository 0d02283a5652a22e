"""turnlake's public Python API: reach a turnlake server from an agent host.

    from turnlake import Client

    client = Client("http://127.0.0.1:8700", key="tlk_...")
    client.record(turn)
    hits = client.search("why was the forecast off by an hour?").hits

``Client`` and ``AsyncClient`` speak the HTTP service; ``Recorder`` builds turns at the turn
boundary and sends them (``Recorder(url=..., key=...)``, with an outbox for when the server is
away) or writes them into a lake or spool folder; the request and answer types are the
service's own contract models. ``pip install turnlake`` brings only what these need (httpx,
pydantic); ``pip install 'turnlake[server]'`` adds the database and the service.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from lake.answers import ConversationEntry, PullItem
from lake.records import (
    Attachment,
    Citation,
    Completion,
    ContextEvent,
    Feedback,
    HostedFile,
    LiveEvent,
    Step,
    Submission,
    TurnRecord,
    Usage,
)
from lake.search.request import GeneratorRank, Hit
from pipeline.contract import (
    CatalogAnswer,
    CatalogTurnModel,
    ConversationsAnswer,
    ErasureAnswer,
    ErrorAnswer,
    ErrorDetail,
    NamedTimeAnswer,
    PullAnswer,
    PullBody,
    QueryOptions,
    RecordAnswer,
    SearchAnswer,
    TurnOutcome,
)
from pipeline.recorder import Recorder, RecorderError, TurnIdentity, TurnRecording
from turnlake._http import Retry
from turnlake.async_client import AsyncClient
from turnlake.client import Client
from turnlake.errors import (
    APIError,
    BadRequest,
    ClientError,
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    ServerUnreachable,
    ServiceUnavailable,
    TurnRejected,
    Unauthorized,
    UnprocessableEntity,
    UnsupportedMediaType,
)
from turnlake.outbox import Flushed

try:
    __version__ = version("turnlake")
except PackageNotFoundError:  # a source tree without an install
    __version__ = "0+unknown"

__all__ = [
    "APIError", "AsyncClient", "Attachment", "BadRequest", "CatalogAnswer", "CatalogTurnModel",
    "Citation", "Client", "ClientError", "Completion", "Conflict", "ContextEvent",
    "ConversationEntry", "ConversationsAnswer", "ErasureAnswer", "ErrorAnswer", "ErrorDetail",
    "Feedback", "Flushed", "Forbidden", "GeneratorRank", "Gone", "Hit", "HostedFile",
    "LiveEvent", "NamedTimeAnswer", "NotFound", "PayloadTooLarge", "PullAnswer", "PullBody",
    "PullItem", "QueryOptions", "RateLimited", "RecordAnswer", "Recorder", "RecorderError",
    "Retry", "SearchAnswer", "ServerError", "ServerUnreachable", "ServiceUnavailable", "Step",
    "Submission", "TurnIdentity", "TurnOutcome", "TurnRecord", "TurnRecording", "TurnRejected",
    "Unauthorized", "UnprocessableEntity", "UnsupportedMediaType", "Usage", "__version__",
]
