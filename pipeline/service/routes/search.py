"""``POST /v1/search``: a `--queries` line without the principal, which is the key's."""

from __future__ import annotations

from fastapi import APIRouter, Request

from lake.errors import IndexStaleError, IndexUnavailable
from pipeline.contract import QueryOptions, SearchAnswer
from pipeline.service.auth import Reader
from pipeline.service.context import context_of
from pipeline.service.errors import error_responses

router = APIRouter(tags=["search"])
_ATTEMPTS = 3


@router.post("/v1/search", response_model=SearchAnswer,
             responses=error_responses(400, 403, 422))
def search(options: QueryOptions, request: Request, principal: Reader) -> SearchAnswer:
    """Hybrid search (semantic + BM25 + trigram, fused, with a recency lift) within what the
    key may read: a user key its own user's turns, an analyst or admin key its tenant."""
    ctx = context_of(request)
    search_request = options.to_request(principal)
    for attempt in range(_ATTEMPTS):
        try:
            result = ctx.search.search(search_request)
            break
        except IndexStaleError:
            raise
        except IndexUnavailable:
            # A build another server published replaced the one being opened; the search
            # service opens the newer one on the next try.
            if attempt == _ATTEMPTS - 1:
                raise
    return SearchAnswer.of(result, options.id)
