"""Hostile and odd record lines: every line either ingests exactly as parsed or is quarantined
with a reason; ingest never crashes and never drops the good lines around a bad one."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lake.index.partition import ROWS_FILE
from lake.records import parse_record
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.index_build import build_indexes
from pipeline.ingest import Ingestor
from tests.reliability.cli_runs import cli
from tests.reliability.lake_audit import turn_record

ANALYST = Principal("acme", analyst=True)
SPECIALS = ["\x00", "\x07", "\ud800", "\udfff", "\u202e", "\u200f", "\u0301", "\ufeff",
            "\uffff", "\U0001f600", "👩‍👩‍👧", "東京タワー", "مرحبا", "שלום", "café", "e\u0301",
            "\\", '"', "\n", "\u2028", "' OR 1=1 --", "%2e%2e/", "${jndi:x}", ""]
TEXT = st.lists(st.one_of(st.sampled_from(SPECIALS), st.characters(codec=None)),
                max_size=24).map("".join)
TIMES = ["2026-03-10T09:00:00", "2026-03-10", "2026-02-30T09:00:00+00:00", "9999-12-31T23:59:59Z",
         "0001-01-01T00:00:00+05:00", "1969-12-31T23:59:59Z", "2026-03-10T09:00:00+25:00",
         "2026-03-10T09:00:00.123456789+00:00", "2026-03-10T09:00:00-12:00", "", "yesterday",
         "1741597200"]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8)
TEXT_FIELDS = [("submissions", 0, "text"), ("completion", "text"), ("conversation_title",),
               ("summary",), ("anchors", 0), ("notes", 0), ("attachments", 0, "text"),
               ("attachments", 0, "name"), ("citations", 0, "url"), ("steps", 0, "detail")]
ALL_FIELDS = [*TEXT_FIELDS, ("tenant",), ("user_id",), ("conversation_id",), ("turn_id",),
              ("writer",), ("schema",), ("started_at",), ("submissions", 0, "event_type"),
              ("submissions", 0, "batch"), ("usage", "tokens_in"), ("feedback", "rating"),
              ("ttl_days",), ("hosted_files", 0, "path"), ("hosted_files", 0, "content_b64"),
              ("events", 0, "data"), ("context_events", 0, "at"), ("submissions",)]


def _base(n: int, conversation: str) -> dict[str, Any]:
    record = turn_record(n, conversation=conversation, rich=True)
    record.update(notes=["a note"], citations=[{"title": "t", "url": "https://x.example"}],
                  usage={"tokens_in": 1, "tokens_out": 2}, feedback={"rating": 1},
                  events=[{"type": "badge.cost", "at": record["started_at"], "data": {}}])
    record["steps"][0]["detail"] = "ok"
    return record


def _set(record: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = record
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "bottom"}
    for _ in range(depth):
        value = {"a": value}
    return value


@st.composite
def hostile_lines(draw: st.DrawFn, n: int, conversation: str) -> str:
    """One record line broken (or merely odd) in one of many ways."""
    record = _base(n, conversation)
    kind = draw(st.sampled_from(["text", "type", "time", "nested", "duplicate", "unknown",
                                 "missing", "raw"]))
    if kind == "text":
        _set(record, draw(st.sampled_from(TEXT_FIELDS)), draw(TEXT))
    elif kind == "type":
        _set(record, draw(st.sampled_from(ALL_FIELDS)), draw(JSON_VALUES))
    elif kind == "time":
        _set(record, draw(st.sampled_from([("started_at",), ("ended_at",), ("completion", "at"),
                                           ("submissions", 0, "arrived_at")])),
             draw(st.sampled_from(TIMES)))
    elif kind == "nested":
        record["events"][0]["data"] = _nested(draw(st.integers(1, 260)))
    elif kind == "unknown":
        record[draw(TEXT)] = draw(JSON_VALUES)
    elif kind == "missing":
        del record[draw(st.sampled_from(["tenant", "turn_id", "completion", "submissions",
                                         "started_at", "schema"]))]
    ascii_only = draw(st.booleans())
    line = json.dumps(record, ensure_ascii=ascii_only)
    if kind == "duplicate":
        field = draw(st.sampled_from(["turn_id", "tenant", "writer", "summary"]))
        line = line[:-1] + f", {json.dumps(field)}: {json.dumps(draw(TEXT))}}}"
    elif kind == "raw":
        cut = draw(st.integers(0, len(line)))
        line = draw(st.sampled_from([line[:cut], line[:cut] + draw(TEXT) + line[cut:],
                                     "[" + line + "]", "null", "\ufeff" + line]))
    return line.replace("\n", "\\n")


def _write(path: Path, lines: list[str]) -> Path:
    # surrogatepass writes lone surrogates as raw (invalid) UTF-8, another way to be broken
    path.write_bytes(b"".join(line.encode("utf-8", "surrogatepass") + b"\n" for line in lines))
    return path


@pytest.fixture
def counter() -> Iterator[int]:
    """Fresh numbers for the conversations of successive hypothesis examples."""
    return itertools.count()


@pytest.mark.slow
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_each_line_ingests_as_parsed_or_is_quarantined(tmp_path: Path, counter: Iterator[int],
                                                      data: st.DataObject) -> None:
    i = next(counter)
    lake_settings = Settings(lake=tmp_path / "lake")
    good = [_base(0, f"c-good-{i}-a"), _base(1, f"c-good-{i}-b")]
    hostile = data.draw(hostile_lines(2, f"c-odd-{i:06d}"))  # fixed width: same draws
    path = _write(tmp_path / f"in-{i}.jsonl",
                  [json.dumps(good[0]), hostile, json.dumps(good[1])])
    report = Ingestor(lake_settings).ingest_paths([path])  # must not raise
    store = LakeStore(lake_settings.lake)
    materializer = TurnMaterializer(store)
    for record in good:
        turn = materializer.turn(ANALYST, record["conversation_id"], record["turn_id"])
        assert turn.submissions[0]["text"] == record["submissions"][0]["text"]
    raw = hostile.encode("utf-8", "surrogatepass")
    if report.accepted == 3:
        parsed = parse_record(raw)
        assert report.quarantined == []
        shown = materializer.turn(Principal(parsed.tenant, analyst=True),
                                  parsed.conversation_id, parsed.turn_id)
        assert shown.submissions == [s.model_dump(mode="json") for s in parsed.submissions]
        assert shown.completion["text"] == parsed.completion.text
        # Stored as JSON by orjson: NaN and infinities come back as null.
        assert orjson.loads(orjson.dumps([e.data for e in parsed.events])) == [
            e["data"] for e in shown.events if e["source"] == "event"]
    else:
        assert report.accepted == 2, "a bad line took a good one with it"
        if not raw.strip():  # a blank line is no record: skipped, not quarantined
            assert report.quarantined == []
            return
        [q] = report.quarantined
        assert (q.line, q.source_file) == (2, str(path)) and q.reason.strip()
        stored = store.read(Table.QUARANTINE, columns=["source_file", "line", "reason"])
        assert (str(path), 2) in set(zip(stored["source_file"].to_pylist(),
                                         stored["line"].to_pylist(), strict=True))


BROKEN: dict[str, dict[str, Any]] = {
    "year 9999 (TTL overflows)": {"started_at": "9999-12-31T23:58:00+00:00",
                                  "ended_at": "9999-12-31T23:59:00+00:00"},
    "year 1 with offset": {"started_at": "0001-01-01T00:00:00+05:00",
                           "ended_at": "0001-01-01T00:01:00+05:00"},
    "no offset": {"started_at": "2026-03-10T09:00:00"},
    "int beyond 64 bits in data": {"events": [{"type": "x", "at": "2026-03-10T09:00:00Z",
                                               "data": {"n": 2**70}}]},
    "tokens beyond 64 bits": {"usage": {"tokens_in": 2**64, "tokens_out": 1}},
    "nested 300 deep": {"events": [{"type": "x", "at": "2026-03-10T09:00:00Z",
                                    "data": _nested(300)}]},
    "wrong type": {"submissions": "hello"},
    "empty id": {"turn_id": ""},
    "traversing hosted path": {"hosted_files": [{"path": "files/../../etc/passwd",
                                                 "mime": "text/plain", "content_b64": ""}]},
}


@pytest.mark.slow
def test_cli_ingest_survives_every_known_crasher(tmp_path: Path) -> None:
    """Lines that once crashed the whole batch (out-of-range times, 65-bit integers) are
    quarantined by a real ``turnlake ingest`` process, and the good lines between land."""
    lines, goods = [], []
    for n, change in enumerate(BROKEN.values()):
        good = turn_record(100 + n, conversation=f"c-good-{n}")
        goods.append(good)
        lines += [json.dumps(good), json.dumps({**turn_record(n, conversation=f"c-{n}"),
                                                **change})]
    path = _write(tmp_path / "in.jsonl", [*lines, '{"schema": "turnlake.turn.v1"', "\x00"])
    lake = tmp_path / "lake"
    done = cli(lake, "ingest", path, "--strict")
    assert done.returncode == 1, done.stderr[-2000:]  # --strict: something was quarantined
    assert f"accepted {len(goods)}, duplicate 0, quarantined {len(BROKEN) + 2}" in " ".join(
        done.stdout.split())
    stored = LakeStore(lake).read(Table.TURN_LOGS, columns=["conversation_id"])
    assert sorted(stored["conversation_id"].to_pylist()) == sorted(
        g["conversation_id"] for g in goods)
    reasons = LakeStore(lake).read(Table.QUARANTINE, columns=["reason"])["reason"].to_pylist()
    assert all(r.strip() for r in reasons) and len(reasons) == len(BROKEN) + 2


@pytest.mark.slow
def test_a_ten_megabyte_text_is_stored_indexed_and_found(tmp_path: Path) -> None:
    lake_settings = Settings(lake=tmp_path / "lake")
    big = "lorem ipsum dolor sit amet " * (10_000_000 // 27) + "zebrafinch"
    record = turn_record(1, conversation="c-big")
    record["submissions"][0]["text"] = big
    path = _write(tmp_path / "in.jsonl", [json.dumps(record),
                                          json.dumps(turn_record(2, conversation="c-small"))])
    assert Ingestor(lake_settings).ingest_paths([path]).accepted == 2
    store = LakeStore(lake_settings.lake)
    [manifest] = build_indexes(store, model=None).built
    assert manifest.row_count == 4 and manifest.bytes[ROWS_FILE] > 10_000_000
    turn = TurnMaterializer(store).turn(ANALYST, "c-big", "t-0001")
    assert turn.submissions[0]["text"] == big
    hits = SearchService(store).search(SearchRequest(
        "zebrafinch", ANALYST, scope="tenant", enabled={"semantic": False})).hits
    assert [(h.conversation_id, len(h.snippets["user"])) for h in hits] == [("c-big", 500)]
