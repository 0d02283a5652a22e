"""``POST /v1/turns``: record turns; answered once the accepted ones are durable."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from lake.records import TurnRecord
from pipeline.contract import RecordAnswer, TurnOutcome
from pipeline.service.auth import Recorder
from pipeline.service.context import context_of
from pipeline.service.errors import error_responses, require_media
from pipeline.service.intake import NDJSON_TYPES, Intake, split_body
from pipeline.service.outcomes import LineOutcome

router = APIRouter(tags=["turns"])


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema with its ``$defs`` written in place (the record's models are not
    recursive), so that it stands alone inside the OpenAPI document."""
    defs = schema.pop("$defs", {})

    def expand(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return expand(defs[ref.removeprefix("#/$defs/")])
            return {k: expand(v) for k, v in node.items()}
        if isinstance(node, list):
            return [expand(v) for v in node]
        return node

    out: dict[str, Any] = expand(schema)
    return out


_RECORD = _inlined(TurnRecord.model_json_schema(by_alias=True))
_BODY_DOC = {
    "description": "One `turnlake.turn.v1` object, `{\"turns\": [...]}`, or NDJSON "
                   "(`Content-Type: application/x-ndjson`, one turn object per line), at "
                   "most the server's body limit (413 beyond it). Any other content type "
                   "is refused with 415.",
    "content": {
        "application/json": {"schema": {"anyOf": [
            _RECORD,
            {"type": "object", "title": "TurnBatch", "additionalProperties": False,
             "required": ["turns"],
             "properties": {"turns": {"type": "array", "items": _RECORD}}}]}},
        "application/x-ndjson": {"schema": {
            "type": "string", "description": "One turn object (the record schema) per "
                                             "line; blank lines are skipped."}},
    },
    "required": True,
}


@router.post("/v1/turns", response_model=RecordAnswer,
             responses=error_responses(400, 403, 413, 415, 503),
             openapi_extra={"requestBody": _BODY_DOC})
async def record_turns(request: Request, key: Recorder) -> RecordAnswer:
    """Record turns of the key's tenant (recorder or admin keys). Each turn's outcome is
    `accepted`, `duplicate` (its tenant/conversation/turn ids are recorded already) or
    `rejected` (with the reason and the path of the bad field); the answer comes only after
    every accepted turn is durable."""
    ctx = context_of(request)
    kind = require_media(request.headers.get("content-type"), also=NDJSON_TYPES)
    body = await request.body()  # within max_body_bytes: the app's BodyLimit saw to it
    intake = await run_in_threadpool(split_body, body, kind, key.tenant)
    written: list[LineOutcome] = []
    if intake.lines:
        submitted = ctx.writer.submit(intake.lines, intake.keys,
                                      sharer=f"{key.tenant}/{key.name}")
        written = await asyncio.wrap_future(submitted)
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
