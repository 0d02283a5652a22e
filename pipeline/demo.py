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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from random import Random
from typing import Any, TypeVar

import orjson

from lake.records import SCHEMA_ID, TurnRecord
from lake.refs import file_ref
from lake.settings import Settings
from pipeline.demo_texts import (
    CLOSERS,
    DRAWN_SLOTS,
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
_Record = dict[str, Any]
_T = TypeVar("_T")


def generate_records(*, users: int = 12, turns: int = 600, seed: int = 7,
                     now: datetime | None = None) -> Iterator[TurnRecord]:
    """Yield ``turns`` validated demo records; the same arguments always give the same records.

    ``now`` (timezone-aware; default: the current minute, UTC) is the instant the history ends
    at: every turn ends before it and about 3 % of turns are already past their ``ttl_days``.
    """
    # Built outside the generator expression so that bad arguments fail at the call.
    generator = _Generator(users=users, turns=turns, seed=seed, now=now)
    return (TurnRecord.model_validate(record) for record in generator.records())


def generate_lines(*, users: int = 12, turns: int = 600, seed: int = 7,
                   now: datetime | None = None) -> Iterator[str]:
    """The same records as :func:`generate_records`, as JSON lines (not validated here)."""
    generator = _Generator(users=users, turns=turns, seed=seed, now=now)
    return (orjson.dumps(record).decode() for record in generator.records())


def write_demo(settings: Settings, *, users: int = 12, turns: int = 600, seed: int = 7,
               now: datetime | None = None, rows_hook: RowsHook | None = None) -> IngestReport:
    """Ingest the demo records into ``settings.lake`` and return the ingest report.

    Re-running with the same users, turns and seed adds nothing: turn keys do not depend on
    ``now``. JSON lines go straight to the ingestor, which validates each one once.
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


class _Dice:
    """One ``Random`` with cheap draws.

    ``randint`` and ``choice`` run a Python-level rejection loop that costs several times more
    than one ``random()`` call; at ~40 draws a record that dominated the generator's time.
    """

    def __init__(self, seed: int) -> None:
        self.rng = Random(seed)
        self.random = self.rng.random

    def between(self, lo: int, hi: int) -> int:
        """An int in ``lo..hi`` inclusive."""
        return lo + int(self.random() * (hi - lo + 1))

    def pick(self, items: Sequence[_T]) -> _T:
        """One item."""
        return items[int(self.random() * len(items))]

    def some(self, items: Sequence[_T], lo: int, hi: int) -> list[_T]:
        """``lo..hi`` distinct items (fewer if ``items`` is shorter), in random order."""
        count = min(lo + int(self.random() * (hi - lo + 1)), len(items))
        if count == 1:  # the common case, without copying
            return [items[int(self.random() * len(items))]]
        left = list(items)
        return [left.pop(int(self.random() * len(left))) for _ in range(count)]


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
        self.dice = _Dice(seed)
        self.turns = turns
        self.now = (now.astimezone(UTC) if now is not None
                    else datetime.now(UTC).replace(second=0, microsecond=0))
        self.tenant_apps = dict(TENANT_APPS)
        self.users = [(TENANT_APPS[i % len(TENANT_APPS)][0], _user_id(i)) for i in range(users)]
        # Some users are far more active than others.
        self.user_cum = list(accumulate(self.dice.rng.uniform(0.2, 3.0) for _ in range(users)))
        apps = {app for _, names in TENANT_APPS for app in names}
        self.app_topics = {app: [t for t in TOPICS if app in t.apps] for app in sorted(apps)}
        self.app_pages = {app: [p for a, p in PAGES if a == app] for app in sorted(apps)}
        self.asks = {t.key: t.followups + GENERIC_FOLLOWUPS for t in TOPICS}
        self.steers = {t.key: t.steers + GENERIC_STEERS for t in TOPICS}
        # Code spans of the answers feed the "panel.code" events of run_python steps.
        self.code = {t.key: [a.split("`")[1] for a in t.answers if "`" in a] for t in TOPICS}
        self.conv_counters = dict.fromkeys(self.tenant_apps, 0)
        self.turn_counter = 0

    def records(self) -> Iterator[_Record]:
        """Conversation after conversation until ``turns`` records were produced."""
        produced = 0
        while produced < self.turns:
            length = self.dice.rng.choices(range(1, 13), cum_weights=_LENGTH_CUM_WEIGHTS)[0]
            length = min(length, self.turns - produced)
            conv = self._conversation()
            for index, (started, ended) in enumerate(self._schedule(length, conv.writer)):
                yield self._turn(conv, index, started, ended)
            produced += length

    def _conversation(self) -> _Conversation:
        dice = self.dice
        tenant, user_id = dice.rng.choices(self.users, cum_weights=self.user_cum)[0]
        app = dice.pick(self.tenant_apps[tenant])
        topic = dice.pick(self.app_topics[app])
        rich = dice.random() < RICH_SHARE
        agent = "react-agent" if rich else ("claude-code" if app == "code-review"
                                            else "langgraph-bot")
        self.conv_counters[tenant] += 1
        slots = self._slots()
        title = dice.pick(topic.titles).format_map(slots) if dice.random() < 0.9 else None
        return _Conversation(tenant, app, agent, "rich" if rich else "minimal", user_id,
                             f"c-{tenant}-{self.conv_counters[tenant]:04d}", topic, slots, title)

    def _slots(self) -> dict[str, str]:
        dice = self.dice
        slots = {name: dice.pick(values) for name, values in SLOT_POOLS}
        suffix = "".join(dice.pick("abcdefghjkmnpqrstvwxz23456789") for _ in range(10))
        slots.update((name, fmt.format(dice.between(lo, hi))) for name, fmt, lo, hi in DRAWN_SLOTS)
        slots["pod"] = f"{slots['service']}-{suffix[:6]}-{suffix[6:]}"
        return slots

    def _schedule(self, length: int, writer: str) -> list[tuple[datetime, datetime]]:
        """(started, ended) per turn; the whole conversation ends before ``now``."""
        dice = self.dice
        longest = 240 if writer == "rich" else 120
        durations = [dice.between(3, longest) for _ in range(length)]
        # Mostly minutes between turns, sometimes hours, now and then the user returns days later.
        gaps = [0] + [dice.between(*dice.pick(((20, 600), (20, 600), (600, 10_800),
                                                 (86_400, 345_600))))
                      for _ in range(length - 1)]
        span = sum(durations) + sum(gaps)
        # random ** 1.8 skews ages towards zero: recent weeks are busier than four months ago.
        age = max(int(HISTORY_DAYS * 86_400 * dice.random() ** 1.8), span + 60)
        at = self.now - timedelta(seconds=age)
        times = []
        for gap, duration in zip(gaps, durations, strict=True):
            started = at + timedelta(seconds=gap)
            at = started + timedelta(seconds=duration)
            times.append((started, at))
        return times

    def _turn(self, conv: _Conversation, index: int, started: datetime,
              ended: datetime) -> _Record:
        dice, slots, topic = self.dice, conv.slots, conv.topic
        self.turn_counter += 1
        turn_id = f"t-{self.turn_counter:04d}"
        seconds = (ended - started).total_seconds()

        def at(lo: float, hi: float) -> datetime:
            share = lo + (hi - lo) * dice.random()
            return started + timedelta(seconds=round(seconds * share))

        asks = self.asks[topic.key]
        first = dice.pick(topic.prompts) if index == 0 else dice.pick(asks)
        submissions = [_submission(first, slots, "prompt", 0, started)]
        if dice.random() < 0.25:
            submissions.append(_submission(dice.pick(asks), slots, "followup", 1, at(0, 0.3)))
        if dice.random() < 0.08:
            submissions.append(_submission(dice.pick(self.steers[topic.key]), slots, "steer",
                                           len(submissions), at(0.3, 0.8)))
        files = self._hosted_files(conv, started) if dice.random() < 0.15 else []
        refs = [file_ref(conv.conversation_id, turn_id, f["path"]) for f in files]
        answer, outcome = self._completion(topic, slots, files, refs)
        record: _Record = {
            "schema": SCHEMA_ID, "tenant": conv.tenant, "app": conv.app, "agent": conv.agent,
            "user_id": conv.user_id, "conversation_id": conv.conversation_id,
            "turn_id": turn_id, "writer": conv.writer, "started_at": started,
            "ended_at": ended, "submissions": submissions,
            "completion": {"text": answer, "at": ended},
        }
        if conv.title is not None:
            record["conversation_title"] = conv.title
        if dice.random() < 0.2:
            page = dice.pick(self.app_pages[conv.app]).format_map(slots)
            record["context_events"] = [{"kind": "page.opened", "at": started,
                                         "data": {"page": page}}]
        if dice.random() < 0.15:
            record["attachments"] = [self._attachment(topic, slots)]
        if files:
            record["hosted_files"] = files
        self._activity(record, topic, slots, at)
        if conv.writer == "rich":
            self._rich(record, topic, slots, outcome, refs, files)
        if dice.random() < 0.3:
            record["citations"] = [{"title": t, "url": u, "snippet": s}
                                   for t, u, s in dice.some(topic.citations, 1, 2)]
        if dice.random() < 0.25:
            good = dice.random() < 0.75
            feedback: _Record = {"rating": 1 if good else -1}
            if dice.random() < 0.4:
                feedback["comment"] = dice.pick(FEEDBACK_GOOD if good else FEEDBACK_BAD)
            record["feedback"] = feedback
        ttl = self._ttl_days(ended)
        if ttl is not None:
            record["ttl_days"] = ttl
        return record

    def _completion(self, topic: Topic, slots: dict[str, str], files: list[_Record],
                    refs: list[str]) -> tuple[str, str]:
        """Markdown answer of 1-6 sentences, and its first sentence as the summary outcome."""
        dice = self.dice
        picked = [s.format_map(slots)
                  for s in dice.some(topic.answers, 1, 3 if len(files) < 2 else 2)]
        if len(picked) >= 2 and dice.random() < 0.35:
            text = dice.pick(LEAD_INS) + "\n\n" + "\n".join(f"- {s}" for s in picked)
        else:
            text = " ".join(picked)
        if files:
            text += "\n\n" + " ".join(
                dice.pick(FILE_SENTENCES).format(description=f["description"], ref=ref)
                for f, ref in zip(files, refs, strict=True))
        if dice.random() < 0.2:
            text += " " + dice.pick(CLOSERS)
        return text, picked[0]

    def _attachment(self, topic: Topic, slots: dict[str, str]) -> _Record:
        name, mime, text = topic.attachment
        attachment: _Record = {"name": name.format_map(slots), "mime": mime}
        if text is not None and self.dice.random() < 0.8:
            attachment["text"] = text.format_map(slots)
            attachment["size"] = len(attachment["text"].encode())
        else:
            attachment["size"] = self.dice.between(2_000, 900_000)
        return attachment

    def _hosted_files(self, conv: _Conversation, started: datetime) -> list[_Record]:
        """The topic's file, sometimes with a Markdown report next to it."""
        spec = conv.topic.file
        specs = [spec]
        if spec.kind != "md" and self.dice.random() < 0.3:
            specs.append(FileSpec("files/report.md", "md", "summary report"))
        out = []
        for item in specs:
            data = self._file_bytes(item, conv, started)
            out.append({"path": item.path.format_map(conv.slots), "mime": _mime(item.kind),
                        "content_b64": base64.b64encode(data).decode(),
                        "description": item.description})
        return out

    def _file_bytes(self, spec: FileSpec, conv: _Conversation, started: datetime) -> bytes:
        dice, slots = self.dice, conv.slots
        if spec.kind == "png":
            return png_bar_chart([dice.between(1, 16) for _ in range(dice.between(4, 8))])
        if spec.kind == "csv":
            return _csv(spec.columns, dice, started)
        facts = "\n".join(f"- {f.format_map(slots)}" for f in conv.topic.facts)
        details = " ".join(s.format_map(slots) for s in dice.some(conv.topic.answers, 2, 2))
        return (f"# {spec.description.capitalize()}\n\n"
                f"{conv.title or conv.topic.goal.format_map(slots)}\n\n"
                f"## Findings\n\n{facts}\n\n## Details\n\n{details}\n\n"
                f"| metric | value |\n|---|---|\n| rows checked | {dice.between(10, 90_000)} |\n"
                f"| duration | {dice.between(1, 600)} s |\n").encode()

    def _activity(self, record: _Record, topic: Topic, slots: dict[str, str],
                  at: Callable[[float, float], datetime]) -> None:
        """Steps, live events and usage; rich writers almost always report steps."""
        dice = self.dice
        steps: list[_Record] = []
        events: list[_Record] = []
        if dice.random() < (0.85 if record["writer"] == "rich" else 0.35):
            for name in dice.some(topic.tools, 1, 3):
                begin, done = at(0.05, 0.45), at(0.5, 0.95)
                status = "failed" if dice.random() < 0.06 else "completed"
                detail = f"{name} {status} in {(done - begin).total_seconds():.0f} s"
                steps += [{"name": name, "status": "started", "at": begin},
                          {"name": name, "status": status, "at": done, "detail": detail}]
                events += [{"type": "chat.step", "at": s["at"],
                            "data": {"name": name, "status": s["status"]}} for s in steps[-2:]]
                code = self.code[topic.key]
                if name == "run_python" and code:
                    events.append({"type": "panel.code", "at": begin, "data": {
                        "language": "python", "title": name,
                        "code": "\n".join(c.format_map(slots) for c in code[:3])}})
        if dice.random() < 0.9:
            tokens_in, tokens_out = dice.between(300, 12_000), dice.between(40, 1_500)
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

    def _rich(self, record: _Record, topic: Topic, slots: dict[str, str], outcome: str,
              refs: list[str], files: list[_Record]) -> None:
        """Summary (goal, outcome, facts, refs), 1-4 anchors and 0-2 notes of a rich writer."""
        dice = self.dice
        facts = "; ".join(f.format_map(slots) for f in topic.facts)
        summary = f"Goal: {topic.goal.format_map(slots)}. Outcome: {outcome} Facts: {facts}."
        summary += " Refs: " + ", ".join(refs or [slots["ticket"]]) + "."
        record["summary"] = summary
        candidates = [a.format_map(slots) for a in topic.anchors]
        candidates += [f["path"].removeprefix("files/") for f in files]
        record["anchors"] = dice.some(list(dict.fromkeys(candidates)), 1, 4)
        notes = dice.some(NOTES, 0, 2)
        if notes:
            record["notes"] = [n.format_map(slots) for n in notes]

    def _ttl_days(self, ended: datetime) -> int | None:
        """~3 % of turns carry a TTL already over at ``now``; ~6 % a long, still-live one."""
        dice = self.dice
        age_days = (self.now - ended).total_seconds() / 86_400
        roll = dice.random()
        if roll < EXPIRED_SHARE and age_days >= 2:
            return dice.between(1, int(age_days) - 1)  # ended + ttl < now, strictly
        if roll > 0.94:
            return dice.pick((180, 365, 730))  # longer than the whole history
        return None


def _submission(template: str, slots: dict[str, str], event_type: str, batch: int,
                arrived_at: datetime) -> _Record:
    return {"text": template.format_map(slots), "event_type": event_type, "batch": batch,
            "arrived_at": arrived_at}


def _csv(columns: tuple[str, ...], dice: _Dice, started: datetime) -> bytes:
    """A small CSV with one row per day ending the day before ``started``."""
    names = [c.split(":", 1)[0] for c in columns]
    kinds = [c.split(":", 1)[1] for c in columns]
    regions = dict(SLOT_POOLS)["region"]
    count = dice.between(5, 12)
    first_day = started.date() - timedelta(days=count)
    lines = [",".join(names)]
    for row in range(count):
        cells = []
        for kind in kinds:
            if kind == "date":
                cells.append((first_day + timedelta(days=row)).isoformat())
            elif kind == "region":
                cells.append(dice.pick(regions))
            elif kind == "invoice":
                cells.append(f"INV-{dice.between(10000, 99999)}")
            elif kind == "int":
                cells.append(str(dice.between(1, 5000)))
            elif kind == "float":
                cells.append(f"{10 + 4990 * dice.random():.2f}")
            else:
                cells.append(dice.pick(kind.split("|")))
        lines.append(",".join(cells))
    return ("\n".join(lines) + "\n").encode()


def _user_id(index: int) -> str:
    name = USER_NAMES[index % len(USER_NAMES)]
    rounds = index // len(USER_NAMES)
    return f"u-{name}" if rounds == 0 else f"u-{name}-{rounds + 1}"


def _mime(kind: str) -> str:
    return {"csv": "text/csv", "md": "text/markdown", "png": "image/png"}[kind]
