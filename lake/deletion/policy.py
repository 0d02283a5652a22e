"""Expiry under the retention policy, and what an expired role takes with it.

Expiry follows the writers (lake/projection.py): ``ended_at + days``, where ``days`` is the
record's own ``ttl_days`` when it set one, else the policy's TTL for (tenant, app, role);
TurnLogs, events and file rows use the turn's TTL (no role), content rows their role's. A
quarantined line expires as its record would have, and belongs to an erasure by the ids it
names.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from lake.deletion.target import ErasureTarget
from lake.settings import Settings


def with_record_ttl(logs: pl.DataFrame) -> pl.DataFrame:
    """Add ``record_ttl`` (the record's own ttl_days, or null) read from the TurnLog payload."""
    return logs.with_columns(
        pl.col("payload").str.json_path_match("$.ttl_days").cast(pl.Int64, strict=False)
        .alias("record_ttl"))


def policy_expiry(frame: pl.DataFrame, settings: Settings, *,
                  role_column: str | None = None) -> pl.Series:
    """``new_expires_at`` for rows with ``tenant``, ``app``, ``ended_at`` and ``record_ttl``
    (and the role in ``role_column`` for content rows): the record's TTL wins, else the
    policy's most specific rule."""
    keys = ["tenant", "app"] + ([role_column] if role_column else [])
    combos = frame.select(keys).unique()
    days = [settings.ttl_days_for(row[0], row[1], row[2] if role_column else None)
            for row in combos.iter_rows()]
    policy = combos.with_columns(pl.Series("_policy_days", days, dtype=pl.Int64))
    joined = frame.select([*keys, "ended_at", "record_ttl"]).with_row_index("_i").join(
        policy, on=keys, how="left", nulls_equal=True).sort("_i")
    chosen = pl.when(pl.col("record_ttl") > 0).then(pl.col("record_ttl")) \
        .otherwise(pl.col("_policy_days"))
    return joined.select(
        (pl.col("ended_at") + pl.duration(days=chosen)).alias("new_expires_at"))[
        "new_expires_at"]


# -- what an expired role takes out of the TurnLog payload ----------------------------------

def redact_payload(payload: str, roles: set[str]) -> str:
    """The TurnLog payload without the texts of the given content-row roles.

    A role whose rows expired before their turn must not live on in the turn's reload source.
    Message texts become empty strings so the payload keeps its shape for readers.
    """
    record = json.loads(payload)
    if "user" in roles:
        for submission in record.get("submissions", []):
            submission["text"] = ""
    if "assistant" in roles and isinstance(record.get("completion"), dict):
        record["completion"]["text"] = ""
    if "summary" in roles and record.get("summary") is not None:
        record["summary"] = None
    if "anchor" in roles and record.get("anchors"):
        record["anchors"] = []
    if "note" in roles and record.get("notes"):
        record["notes"] = []
    if "attachment" in roles:
        for attachment in record.get("attachments", []):
            attachment.pop("text", None)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# -- quarantined lines ------------------------------------------------------------------------

def _raw_field(raw: str, parsed: dict[str, Any] | None, name: str) -> str | None:
    if parsed is not None:
        value = parsed.get(name)
        return value if isinstance(value, str) else None
    # A refused line is often not valid JSON (truncated, bad escape); its ids may still be
    # readable, and an erasure must not miss a line because its tail was broken.
    match = re.search(rf'"{name}"\s*:\s*"([A-Za-z0-9_-]{{1,128}})"', raw)
    return match.group(1) if match else None


def _parse_raw(raw: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else {}


def quarantine_matches(raw: str | None, target: ErasureTarget) -> bool:
    """Whether a quarantined line belongs to an erasure target.

    The rule: the line's ``tenant`` equals the target's and so do its ``user_id`` /
    ``conversation_id`` / ``turn_id`` as far as the target names them. Ids are read from the
    parsed JSON object, or (for a line that is not valid JSON) from ``"field": "id"`` pairs in
    its text. A line naming no tenant cannot be attributed and is kept.
    """
    if not raw:
        return False
    parsed = _parse_raw(raw)
    ids = [_raw_field(raw, parsed, name)
           for name in ("tenant", "user_id", "conversation_id", "turn_id")]
    return ids[0] is not None and target.matches(*ids)


def quarantine_tenant(raw: str | None) -> str | None:
    """The tenant a quarantined line names, if any."""
    return _raw_field(raw, _parse_raw(raw), "tenant") if raw else None


def quarantine_expiry(raw: str | None, quarantined_at: datetime, settings: Settings) -> datetime:
    """When a quarantined line expires: ``quarantined_at`` plus the TTL its record would have
    had (its own ``ttl_days``, else the policy for its tenant and app), or the default TTL when
    the line names no tenant."""
    parsed = _parse_raw(raw) if raw else None
    ttl = parsed.get("ttl_days") if parsed else None
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0:
        days = ttl
    else:
        tenant = _raw_field(raw or "", parsed, "tenant")
        app = _raw_field(raw or "", parsed, "app") or ""
        days = settings.ttl_days_for(tenant, app) if tenant else settings.default_ttl_days
    return quarantined_at + timedelta(days=days)
