"""Demo data: a deterministic, varied stream of ``turnlake.turn.v1`` records built from templates.

Three tenants with two or three apps each, rich (``react-agent``) and minimal writers, prompts
with follow-ups and steers, attachments, hosted CSV / Markdown / PNG files with real bytes,
steps, live events, citations, usage, feedback, and a few turns already past their TTL.
Everything comes from :mod:`pipeline.demo_texts` and one ``random.Random(seed)``; nothing is
downloaded and no model is called, so the same seed and ``now`` always give the same records.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from random import Random
from typing import Any

import orjson

from lake.records import SCHEMA_ID, TurnRecord
from lake.refs import file_ref
from lake.settings import Settings
from pipeline.demo_texts import (
    CLOSERS,
    FEEDBACK_BAD,
    FEEDBACK_GOOD,
    FILE_SENTENCES,
    GENERIC_FOLLOWUPS,
    GENERIC_STEERS,
    LEAD_INS,
    NOTES,
    PAGES,
    SLOT_POOLS,
    TENANT_APPS,
    TOPICS,
    USER_NAMES,
    FileSpec,
    Topic,
)
from pipeline.ingest import Ingestor, IngestReport, RowsHook

HISTORY_DAYS = 120
RICH_SHARE = 0.40
EXPIRED_SHARE = 0.033  # applied to turns at least two days old, which are ~90 % of all turns
# Conversation lengths 1..12, short conversations far more common than long ones.
_LENGTH_CUM_WEIGHTS = tuple(accumulate((30, 18, 13, 10, 8, 6, 5, 3, 3, 2, 1, 1)))
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_MIME = {"csv": "text/csv", "md": "text/markdown", "png": "image/png"}.get
Record = dict[str, Any]


def generate_records(*, users: int = 12, turns: int = 600, seed: int = 7,
                     now: datetime | None = None) -> Iterator[TurnRecord]:
    """Yield ``turns`` validated demo records; the same arguments always give the same records.

    ``now`` (timezone-aware; default: the current minute, UTC) is the instant the history ends
    at: every turn ends before it and about 3 % of turns are already past their ``ttl_days``.
    """
    for record in _Generator(users=users, turns=turns, seed=seed, now=now).records():
        yield TurnRecord.model_validate(record)


def generate_lines(*, users: int = 12, turns: int = 600, seed: int = 7,
                   now: datetime | None = None) -> Iterator[str]:
    """The same records as :func:`generate_records`, as JSON lines (not validated here)."""
    for record in _Generator(users=users, turns=turns, seed=seed, now=now).records():
        yield orjson.dumps(record).decode()


def write_demo(settings: Settings, *, users: int = 12, turns: int = 600, seed: int = 7,
               now: datetime | None = None, rows_hook: RowsHook | None = None) -> IngestReport:
    """Ingest the demo records into ``settings.lake``; re-running with the same seed adds nothing.

    JSON lines go straight to the ingestor, which validates each one once.
    """
    lines = generate_lines(users=users, turns=turns, seed=seed, now=now)
    return Ingestor(settings, rows_hook=rows_hook).ingest_records(lines, source="<demo>")


def png_bar_chart(values: list[int], *, height: int = 16, bar: int = 3) -> bytes:
    """A tiny valid RGB PNG drawing ``values`` (0..height) as bars over a baseline."""
    if not values or any(v < 0 or v > height for v in values):
        raise ValueError(f"png_bar_chart: values must be a non-empty list within 0..{height}")
    width = len(values) * (bar + 1) + 1
    white, blue, grey = b"\xff\xff\xff", b"\x2b\x6c\xb0", b"\x55\x55\x55"
    rows = []
    for y in range(height):
        level = height - y  # 1-based height of this row above the baseline
        row = [white] * width
        for i, value in enumerate(values):
            if value >= level:
                start = 1 + i * (bar + 1)
                row[start:start + bar] = [blue] * bar
        rows.append(b"\x00" + b"".join(row))  # filter type 0 (None) per scanline
    rows.append(b"\x00" + grey * width)
    header = struct.pack(">IIBBBBB", width, height + 1, 8, 2, 0, 0, 0)
    return (_PNG_SIGNATURE + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + _png_chunk(b"IEND", b""))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


@dataclass(frozen=True)
class _Conversation:
    tenant: str
    app: str
    agent: str
    writer: str
    user_id: str
    conversation_id: str
    topic: Topic
    slots: dict[str, str]
    title: str | None


class _Generator:
    """All generator state, so that nothing random lives at module level."""

    def __init__(self, *, users: int, turns: int, seed: int, now: datetime | None) -> None:
        if isinstance(users, bool) or not isinstance(users, int) or users < 1:
            raise ValueError(f"demo: users must be an int >= 1, got {users!r}")
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
            raise ValueError(f"demo: turns must be an int >= 0, got {turns!r}")
        if now is not None and now.utcoffset() is None:
            raise ValueError(f"demo: now must be timezone-aware, got {now.isoformat()}")
        self.rng = Random(seed)
        self.turns = turns
        self.now = (now.astimezone(UTC) if now is not None
                    else datetime.now(UTC).replace(second=0, microsecond=0))
        apps = dict(TENANT_APPS)
        self.tenant_apps = apps
        self.users = [(TENANT_APPS[i % len(TENANT_APPS)][0], _user_id(i)) for i in range(users)]
        # Some users are far more active than others.
        self.user_cum = list(accumulate(self.rng.uniform(0.2, 3.0) for _ in range(users)))
        self.app_topics = {app: [t for t in TOPICS if app in t.apps]
                           for names in apps.values() for app in names}
        self.conv_counters = dict.fromkeys(apps, 0)
        self.turn_counter = 0

    def records(self) -> Iterator[Record]:
        """Conversation after conversation until ``turns`` records were produced."""
        produced = 0
        while produced < self.turns:
            length = self.rng.choices(range(1, 13), cum_weights=_LENGTH_CUM_WEIGHTS)[0]
            length = min(length, self.turns - produced)
            conv = self._conversation()
            for index, (started, ended) in enumerate(self._schedule(length, conv.writer)):
                yield self._turn(conv, index, started, ended)
            produced += length

    def _conversation(self) -> _Conversation:
        rng = self.rng
        tenant, user_id = rng.choices(self.users, cum_weights=self.user_cum)[0]
        app = rng.choice(self.tenant_apps[tenant])
        topic = rng.choice(self.app_topics[app])
        rich = rng.random() < RICH_SHARE
        agent = "react-agent" if rich else ("claude-code" if app == "code-review"
                                            else "langgraph-bot")
        self.conv_counters[tenant] += 1
        slots = self._slots()
        title = rng.choice(topic.titles).format_map(slots) if rng.random() < 0.9 else None
        return _Conversation(tenant, app, agent, "rich" if rich else "minimal", user_id,
                             f"c-{tenant}-{self.conv_counters[tenant]:04d}", topic, slots, title)

    def _slots(self) -> dict[str, str]:
        rng = self.rng
        slots = {name: rng.choice(values) for name, values in SLOT_POOLS}
        suffix = "".join(rng.choices("abcdefghjkmnpqrstvwxz23456789", k=10))
        slots.update(
            ticket=f"INC-{rng.randint(1000, 9999)}",
            invoice=f"INV-{rng.randint(10000, 99999)}",
            amount=f"${rng.randint(4, 480) * 5}",
            ms=str(rng.randint(120, 9000)),
            n=str(rng.choice((60, 120, 300, 600, 1200))),
            pr=f"#{rng.randint(100, 4999)}",
            pod=f"{slots['service']}-{suffix[:6]}-{suffix[6:]}",
        )
        return slots

    def _schedule(self, length: int, writer: str) -> list[tuple[datetime, datetime]]:
        """(started, ended) per turn; the whole conversation ends before ``now``."""
        rng = self.rng
        longest = 240 if writer == "rich" else 120
        durations = [rng.randint(3, longest) for _ in range(length)]
        gaps = [0] + [rng.choice((rng.randint(20, 600), rng.randint(20, 600),
                                  rng.randint(600, 10_800), rng.randint(86_400, 345_600)))
                      for _ in range(length - 1)]
        span = sum(durations) + sum(gaps)
        # rand ** 1.8 skews ages towards zero: recent weeks are busier than four months ago.
        age = max(int(HISTORY_DAYS * 86_400 * rng.random() ** 1.8), span + 60)
        at = self.now - timedelta(seconds=age)
        times = []
        for gap, duration in zip(gaps, durations, strict=True):
            started = at + timedelta(seconds=gap)
            at = started + timedelta(seconds=duration)
            times.append((started, at))
        return times

    def _turn(self, conv: _Conversation, index: int, started: datetime,
              ended: datetime) -> Record:
        rng, slots, topic = self.rng, conv.slots, conv.topic
        self.turn_counter += 1
        turn_id = f"t-{self.turn_counter:04d}"
        seconds = (ended - started).total_seconds()

        def at(lo: float, hi: float) -> datetime:
            return started + timedelta(seconds=round(seconds * rng.uniform(lo, hi)))

        asks = topic.followups + GENERIC_FOLLOWUPS
        first = rng.choice(topic.prompts) if index == 0 else rng.choice(asks)
        submissions = [_submission(first, slots, "prompt", 0, started)]
        if rng.random() < 0.25:
            submissions.append(_submission(rng.choice(asks), slots, "followup", 1, at(0, 0.3)))
        if rng.random() < 0.08:
            steer = rng.choice(topic.steers + GENERIC_STEERS)
            submissions.append(_submission(steer, slots, "steer", len(submissions),
                                           at(0.3, 0.8)))
        files = self._hosted_files(conv, turn_id, started) if rng.random() < 0.15 else []
        refs = [file_ref(conv.conversation_id, turn_id, f["path"]) for f in files]
        answer, outcome = self._completion(topic, slots, files, refs)
        record: Record = {
            "schema": SCHEMA_ID, "tenant": conv.tenant, "app": conv.app, "agent": conv.agent,
            "user_id": conv.user_id, "conversation_id": conv.conversation_id,
            "turn_id": turn_id, "writer": conv.writer, "started_at": started,
            "ended_at": ended, "submissions": submissions,
            "completion": {"text": answer, "at": ended},
        }
        if conv.title is not None:
            record["conversation_title"] = conv.title
        if rng.random() < 0.2:
            page = rng.choice(PAGES).format_map(slots)
            record["context_events"] = [{"kind": "page.opened", "at": started,
                                         "data": {"page": page}}]
        if rng.random() < 0.15:
            record["attachments"] = [self._attachment(topic, slots)]
        if files:
            record["hosted_files"] = files
        self._activity(record, topic, slots, at)
        if conv.writer == "rich":
            self._rich(record, topic, slots, outcome, refs, files)
        if topic.citations and rng.random() < 0.3:
            picked = rng.sample(topic.citations, rng.randint(1, len(topic.citations)))
            record["citations"] = [{"title": t, "url": u, "snippet": s} for t, u, s in picked]
        if rng.random() < 0.25:
            good = rng.random() < 0.75
            feedback: Record = {"rating": 1 if good else -1}
            if rng.random() < 0.4:
                feedback["comment"] = rng.choice(FEEDBACK_GOOD if good else FEEDBACK_BAD)
            record["feedback"] = feedback
        ttl = self._ttl_days(ended)
        if ttl is not None:
            record["ttl_days"] = ttl
        return record

    def _completion(self, topic: Topic, slots: dict[str, str], files: list[Record],
                    refs: list[str]) -> tuple[str, str]:
        """Markdown answer of 1-6 sentences, and its first sentence as the summary outcome."""
        rng = self.rng
        picked = [s.format_map(slots)
                  for s in rng.sample(topic.answers, rng.randint(1, 3 if len(files) < 2 else 2))]
        if len(picked) >= 2 and rng.random() < 0.35:
            text = rng.choice(LEAD_INS) + "\n\n" + "\n".join(f"- {s}" for s in picked)
        else:
            text = " ".join(picked)
        if files:
            text += "\n\n" + " ".join(
                rng.choice(FILE_SENTENCES).format(description=f["description"], ref=ref)
                for f, ref in zip(files, refs, strict=True))
        if rng.random() < 0.2:
            text += " " + rng.choice(CLOSERS)
        return text, picked[0]

    def _attachment(self, topic: Topic, slots: dict[str, str]) -> Record:
        name, mime, text = topic.attachment
        attachment: Record = {"name": name.format_map(slots), "mime": mime}
        if text is not None and self.rng.random() < 0.8:
            attachment["text"] = text.format_map(slots)
            attachment["size"] = len(attachment["text"].encode())
        else:
            attachment["size"] = self.rng.randint(2_000, 900_000)
        return attachment

    def _hosted_files(self, conv: _Conversation, turn_id: str, started: datetime) -> list[Record]:
        """The topic's file, sometimes with a Markdown report next to it."""
        spec = conv.topic.file
        specs = [spec]
        if spec.kind != "md" and self.rng.random() < 0.3:
            specs.append(FileSpec("files/report.md", "md", "summary report"))
        out = []
        for item in specs:
            data = self._file_bytes(item, conv, started)
            out.append({"path": item.path.format_map(conv.slots), "mime": _MIME(item.kind),
                        "content_b64": base64.b64encode(data).decode(),
                        "description": item.description})
        return out

    def _file_bytes(self, spec: FileSpec, conv: _Conversation, started: datetime) -> bytes:
        rng = self.rng
        if spec.kind == "png":
            return png_bar_chart([rng.randint(1, 16) for _ in range(rng.randint(4, 8))])
        if spec.kind == "csv":
            return _csv(spec.columns, rng, started)
        facts = "\n".join(f"- {f.format_map(conv.slots)}" for f in conv.topic.facts)
        details = " ".join(s.format_map(conv.slots) for s in rng.sample(conv.topic.answers, 2))
        heading = spec.description.capitalize()
        return (f"# {heading}\n\n{conv.title or conv.topic.goal.format_map(conv.slots)}\n\n"
                f"## Findings\n\n{facts}\n\n## Details\n\n{details}\n\n"
                f"| metric | value |\n|---|---|\n| rows checked | {rng.randint(10, 90_000)} |\n"
                f"| duration | {rng.randint(1, 600)} s |\n").encode()

    def _activity(self, record: Record, topic: Topic, slots: dict[str, str],
                  at: Callable[[float, float], datetime]) -> None:
        """Steps, live events and usage; rich writers almost always report steps."""
        rng = self.rng
        steps: list[Record] = []
        events: list[Record] = []
        if rng.random() < (0.85 if record["writer"] == "rich" else 0.35):
            for name in rng.sample(topic.tools, rng.randint(1, len(topic.tools))):
                begin, done = at(0.05, 0.45), at(0.5, 0.95)
                status = "failed" if rng.random() < 0.06 else "completed"
                detail = f"{name} {status} in {(done - begin).total_seconds():.0f} s"
                steps += [{"name": name, "status": "started", "at": begin},
                          {"name": name, "status": status, "at": done, "detail": detail}]
                events += [{"type": "chat.step", "at": s["at"],
                            "data": {"name": name, "status": s["status"]}} for s in steps[-2:]]
                spans = [s.split("`")[1] for s in topic.answers if "`" in s]
                if name == "run_python" and spans:
                    code = "\n".join(c.format_map(slots) for c in spans[:3])
                    events.append({"type": "panel.code", "at": begin,
                                   "data": {"language": "python", "title": name,
                                            "code": code}})
        if rng.random() < 0.9:
            tokens_in, tokens_out = rng.randint(300, 12_000), rng.randint(40, 1_500)
            cost = round(tokens_in * 3e-6 + tokens_out * 15e-6, 6)
            duration = int((record["ended_at"] - record["started_at"]).total_seconds() * 1000)
            record["usage"] = {"tokens_in": tokens_in, "tokens_out": tokens_out,
                               "cost_usd": cost, "duration_ms": duration}
            events.append({"type": "badge.cost", "at": record["ended_at"],
                           "data": {"usd": cost, "tokens": tokens_in + tokens_out}})
        if steps:
            record["steps"] = steps
        if events:
            record["events"] = events

    def _rich(self, record: Record, topic: Topic, slots: dict[str, str], outcome: str,
              refs: list[str], files: list[Record]) -> None:
        """Summary (goal, outcome, facts, refs), 1-4 anchors and 0-2 notes of a rich writer."""
        rng = self.rng
        facts = "; ".join(f.format_map(slots) for f in topic.facts)
        summary = (f"Goal: {topic.goal.format_map(slots)}. Outcome: {outcome} "
                   f"Facts: {facts}.")
        if refs:
            summary += " Refs: " + ", ".join(refs) + "."
        record["summary"] = summary
        candidates = [a.format_map(slots) for a in topic.anchors]
        candidates += [f["path"].removeprefix("files/") for f in files]
        unique = list(dict.fromkeys(candidates))
        record["anchors"] = rng.sample(unique, rng.randint(1, min(4, len(unique))))
        notes = rng.sample(NOTES, rng.randint(0, 2))
        if notes:
            record["notes"] = [n.format_map(slots) for n in notes]

    def _ttl_days(self, ended: datetime) -> int | None:
        """~3 % of turns carry a TTL already over at ``now``; ~6 % a long, still-live one."""
        rng = self.rng
        age_days = (self.now - ended).total_seconds() / 86_400
        roll = rng.random()
        if roll < EXPIRED_SHARE and age_days >= 2:
            return rng.randint(1, int(age_days) - 1)  # ended + ttl < now, strictly
        if roll > 0.94:
            return rng.choice((180, 365, 730))  # longer than the whole history
        return None


def _submission(template: str, slots: dict[str, str], event_type: str, batch: int,
                arrived_at: datetime) -> Record:
    return {"text": template.format_map(slots), "event_type": event_type, "batch": batch,
            "arrived_at": arrived_at}


def _csv(columns: tuple[str, ...], rng: Random, started: datetime) -> bytes:
    """A small CSV with one row per day ending the day before ``started``."""
    names = [c.split(":", 1)[0] for c in columns]
    kinds = [c.split(":", 1)[1] for c in columns]
    regions = dict(SLOT_POOLS)["region"]
    count = rng.randint(5, 12)
    first_day = started.date() - timedelta(days=count)
    lines = [",".join(names)]
    for row in range(count):
        cells = []
        for kind in kinds:
            if kind == "date":
                cells.append((first_day + timedelta(days=row)).isoformat())
            elif kind == "region":
                cells.append(rng.choice(regions))
            elif kind == "invoice":
                cells.append(f"INV-{rng.randint(10000, 99999)}")
            elif kind == "int":
                cells.append(str(rng.randint(1, 5000)))
            elif kind == "float":
                cells.append(f"{rng.uniform(10, 5000):.2f}")
            else:
                cells.append(rng.choice(kind.split("|")))
        lines.append(",".join(cells))
    return ("\n".join(lines) + "\n").encode()


def _user_id(index: int) -> str:
    name = USER_NAMES[index % len(USER_NAMES)]
    rounds = index // len(USER_NAMES)
    return f"u-{name}" if rounds == 0 else f"u-{name}-{rounds + 1}"
