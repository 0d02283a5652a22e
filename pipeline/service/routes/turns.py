"""``POST /v1/turns``: record turns; answered once the accepted ones are durable."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from pipeline.contract import RecordAnswer, TurnOutcome
from pipeline.service.auth import Recorder
from pipeline.service.context import context_of
from pipeline.service.errors import error_responses
from pipeline.service.intake import Intake, split_body
from pipeline.service.writer import LineOutcome

router = APIRouter(tags=["turns"])
_BODY_DOC = {
    "description": "One `turnlake.turn.v1` object, `{\"turns\": [...]}`, or NDJSON "
                   "(`Content-Type: application/x-ndjson`), at most the documented body limit.",
    "content": {"application/json": {"schema": {"type": "object"}},
                "application/x-ndjson": {"schema": {"type": "string"}}},
    "required": True,
}


@router.post("/v1/turns", response_model=RecordAnswer,
             responses=error_responses(400, 403, 413),
             openapi_extra={"requestBody": _BODY_DOC})
async def record_turns(request: Request, key: Recorder) -> RecordAnswer:
    """Record turns of the key's tenant (recorder or admin keys). Each turn's outcome is
    `accepted`, `duplicate` (its tenant/conversation/turn ids are recorded already) or
    `rejected` (with the reason and the path of the bad field); the answer comes only after
    every accepted turn is durable."""
    ctx = context_of(request)
    body = await request.body()  # within max_body_bytes: the app's BodyLimit saw to it
    intake = await run_in_threadpool(split_body, body, request.headers.get(
        "content-type", "application/json"), key.tenant)
    written: list[LineOutcome] = []
    if intake.lines:
        written = await asyncio.wrap_future(ctx.writer.submit(intake.lines, intake.keys))
    answer = _answer(intake, written)
    for outcome in ("accepted", "duplicate", "rejected"):
        count = sum(1 for t in answer.turns if t.status == outcome)
        if count:
            ctx.metrics.turns.labels(outcome=outcome).inc(count)
    return answer


def _answer(intake: Intake, written: list[LineOutcome]) -> RecordAnswer:
    by_position = dict(intake.refused)
    by_position.update(zip(intake.positions, written, strict=True))
    turns = []
    for position in range(intake.count):
        outcome = by_position[position]
        conversation, turn = intake.ids[position]
        turns.append(TurnOutcome(index=position, status=outcome.status,
                                 conversation_id=conversation, turn_id=turn,
                                 reason=outcome.reason, field=outcome.field))
    return RecordAnswer(
        accepted=sum(1 for t in turns if t.status == "accepted"),
        duplicates=sum(1 for t in turns if t.status == "duplicate"),
        rejected=sum(1 for t in turns if t.status == "rejected"), turns=turns)
