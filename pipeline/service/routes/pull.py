"""``POST /v1/pull``: copy a turn's files into a folder below the server's workspace.

Meant for a server on the agent's own machine (``turnlake serve --workspace DIR``): the files
land on the server's disk, in DIR/<into>/files/... and DIR/<into>/user.attachments/..., with
the manifest ``.turnlake-pull.json``, exactly as ``turnlake pull`` writes them. ``into``
must stay below the workspace and pass through no symlink: the pull opens it folder by folder
without following one (lake.confined), so a link planted in the workspace cannot send the
files elsewhere; a refusal is a 400 naming ``into``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from lake.errors import QueryError, WorkspaceError
from pipeline.contract import PullAnswer, PullBody
from pipeline.service.auth import Reader
from pipeline.service.context import committed_context
from pipeline.service.errors import InvalidField, error_responses

router = APIRouter(tags=["pull"])


@router.post("/v1/pull", response_model=PullAnswer, responses=error_responses(400, 403, 422))
def pull(body: PullBody, request: Request, principal: Reader) -> PullAnswer:
    """Materialize the targets the key may read into the workspace; a ref that expired or
    that the key may not read is reported per item and the rest is pulled."""
    ctx = committed_context(request)
    if ctx.workspace is None:
        raise QueryError("this server has no workspace to pull into: start it with "
                         "`turnlake serve --workspace DIR`")
    try:
        report = ctx.puller.pull(principal, body.targets, body.into, inside=ctx.workspace)
    except WorkspaceError as exc:
        raise InvalidField(str(exc), field="into") from None
    return PullAnswer.of(body.into, report.ok, report.items)
