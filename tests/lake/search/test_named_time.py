"""Times a query names, read as ranges whose turns the search lifts."""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.errors import QueryError
from lake.search.access import Principal
from lake.search.named_time import named_span, named_times, seconds_outside
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.search.when import TimeRange
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest
from tests.factories import make_record, write_jsonl

AS_OF = datetime(2023, 10, 20, 15, 30, tzinfo=UTC)


def _days(first: date, last: date) -> TimeRange:
    return TimeRange(datetime.combine(first, datetime.min.time(), UTC),
                     datetime.combine(last + timedelta(days=1), datetime.min.time(), UTC))


@pytest.mark.parametrize(("query", "phrase", "first", "last"), [
    ("What did Maria start, as mentioned on 3 June, 2023?", "on 3 June, 2023",
     date(2023, 6, 3), date(2023, 6, 3)),
    ("the painting shown on October 13, 2023", "on October 13, 2023",
     date(2023, 10, 13), date(2023, 10, 13)),
    ("what did Maria donate in December 2022?", "in December 2022",
     date(2022, 12, 1), date(2022, 12, 31)),
    ("notes of Dec. 3rd, 2022", "Dec. 3rd, 2022", date(2022, 12, 3), date(2022, 12, 3)),
    ("the 2023-02-03 meeting", "2023-02-03", date(2023, 2, 3), date(2023, 2, 3)),
    # a month alone: its latest occurrence not after as_of
    ("when did we go camping in June?", "in June", date(2023, 6, 1), date(2023, 6, 30)),
    ("plans made in November", "in November", date(2022, 11, 1), date(2022, 11, 30)),
    ("what happened in mid-July", "in mid-July", date(2023, 7, 1), date(2023, 7, 31)),
    # a day and month alone: the latest such day
    ("on the 5th of May", "5th of May", date(2023, 5, 5), date(2023, 5, 5)),
    ("the call on Nov 2", "on Nov 2", date(2022, 11, 2), date(2022, 11, 2)),
    ("the trip during 2021", "during 2021", date(2021, 1, 1), date(2021, 12, 31)),
    ("what did we do last week", "last week", date(2023, 10, 9), date(2023, 10, 15)),
    ("the bug from yesterday", "yesterday", date(2023, 10, 19), date(2023, 10, 19)),
    ("anything in the past 3 days", "past 3 days", date(2023, 10, 17), date(2023, 10, 20)),
    ("the draft from 2 weeks ago", "2 weeks ago", date(2023, 10, 2), date(2023, 10, 8)),
    # a weekday: the latest such day (as_of is a Friday); "last" goes back a week from it
    ("the file I sent on Monday", "on Monday", date(2023, 10, 16), date(2023, 10, 16)),
    ("what did we decide on Friday", "on Friday", date(2023, 10, 20), date(2023, 10, 20)),
    ("the plan from last Friday", "last Friday", date(2023, 10, 13), date(2023, 10, 13)),
    ("notes from tuesday", "tuesday", date(2023, 10, 17), date(2023, 10, 17)),
    # since: from the named time to the end of as_of's day
    ("what changed since March 2023", "since March 2023", date(2023, 3, 1), date(2023, 10, 20)),
    ("errors since yesterday", "since yesterday", date(2023, 10, 19), date(2023, 10, 20)),
    ("anything since 2023-10-02?", "since 2023-10-02", date(2023, 10, 2), date(2023, 10, 20)),
    # no such day, but a month it also names
    ("the 31 June 2023 trip", "June 2023", date(2023, 6, 1), date(2023, 6, 30)),
])
def test_a_named_time_is_read_as_its_range(query: str, phrase: str, first: date,
                                           last: date) -> None:
    [named] = named_times(query, AS_OF)
    assert named.phrase == phrase
    assert named.range == _days(first, last)


@pytest.mark.parametrize("query", [
    "May I ask about the forecast?", "what may have broken the build", "the 2023-02-30 run",
    "version 2023 of the schema", "march the files into the folder", "the last days of it",
    "", "???", "in 12345", "a timeout in 3000 ms", "the treaty signed in 1850",
    "planned in 2999"])
def test_words_that_only_look_like_a_time_name_none(query: str) -> None:
    assert named_times(query, AS_OF) == []


def test_several_times_are_read_in_query_order() -> None:
    got = named_times("between June 5 and 2023-06-03", AS_OF)
    assert [n.phrase for n in got] == ["June 5", "2023-06-03"]
    assert [named_span(n) for n in got] == ["2023-06-05", "2023-06-03"]


def test_29_february_without_a_year_is_the_latest_leap_day() -> None:
    [named] = named_times("the Feb 29 release", AS_OF)
    assert named_span(named) == "2020-02-29"


def test_named_span_gives_both_days_of_a_longer_range() -> None:
    [named] = named_times("in March 2023", AS_OF)
    assert named_span(named) == "2023-03-01 to 2023-03-31"


_FORMATS = ("{d} {M} {y}", "{d}th of {M}, {y}", "{M} {d}, {y}", "{m3}. {d} {y}",
            "{y}-{mm}-{dd}", "on {M} {d} {y}")


@given(st.dates(date(1970, 1, 1), date(2024, 12, 31)), st.sampled_from(_FORMATS),
       st.sampled_from(("what happened {} at the office", "{}?", "notes: {}, please")))
def test_any_written_day_is_read_as_that_day(day: date, form: str, sentence: str) -> None:
    name = calendar.month_name[day.month]
    words = form.format(d=day.day, M=name, m3=name[:3], y=day.year, mm=f"{day.month:02d}",
                        dd=f"{day.day:02d}")
    [named] = named_times(sentence.format(words), AS_OF)
    assert named.range == _days(day, day)


instants = st.integers(0, 4_000_000_000 * 1_000_000)


@given(st.lists(instants, max_size=30),
       st.lists(st.tuples(instants, st.integers(1, 10**15)), min_size=1, max_size=3))
def test_seconds_outside_is_the_distance_to_the_nearest_range(
        turns: list[int], spans: list[tuple[int, int]]) -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    ranges = [TimeRange(epoch + timedelta(microseconds=s), epoch + timedelta(microseconds=s + w))
              for s, w in spans]
    got = seconds_outside(np.array(turns, np.int64), ranges)

    def oracle(at: int) -> float:
        distances = []
        for s, w in spans:
            last = s + w - 1  # the range is half-open
            distances.append(0 if s <= at <= last else (s - at if at < s else at - last))
        return min(distances) / 1e6

    assert got.tolist() == pytest.approx([oracle(t) for t in turns])


def test_seconds_outside_needs_a_range() -> None:
    with pytest.raises(ValueError, match="no time range"):
        seconds_outside(np.zeros(1, np.int64), [])


def _dated_lake(tmp_path: Path) -> SearchService:
    """Two turns of the same words, one in March 2026 and one in May 2026 (the later one
    more recent, so the recency lift alone prefers it)."""
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    records = [make_record(i, conversation=f"c-{month}", prompt="the quarterly budget review",
                           answer="moved the figures to the new sheet",
                           at=datetime(2026, month, 12, 9, tzinfo=UTC))
               for i, month in enumerate((3, 5))]
    run_ingest(settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    return SearchService(LakeStore(settings.lake))


def test_turns_in_the_named_time_rank_first(tmp_path: Path) -> None:
    service = _dated_lake(tmp_path)

    def search(query: str, weight: float) -> tuple[list[str], list[str]]:
        result = service.search(SearchRequest(
            query, Principal("acme", "u-ana"), k=2, min_relevance=0.0, time_weight=weight,
            as_of=datetime(2026, 6, 1, tzinfo=UTC), half_life_days=30.0))
        return [h.conversation_id for h in result.hits], [n.phrase for n in result.named_times]

    assert search("budget review in March 2026", 0.0) == (["c-5", "c-3"], [])
    assert search("budget review in March 2026", 4.0) == (["c-3", "c-5"], ["in March 2026"])
    assert search("budget review in May", 4.0) == (["c-5", "c-3"], ["in May"])
    hits = service.search(SearchRequest(
        "budget review in March 2026", Principal("acme", "u-ana"), k=2, min_relevance=0.0,
        as_of=datetime(2026, 6, 1, tzinfo=UTC), recency_weight=0.0)).hits
    # inside the range the whole lift; 41 days outside it next to none
    outside = (datetime(2026, 5, 12, 9, tzinfo=UTC) - datetime(2026, 4, 1, tzinfo=UTC)) / \
        timedelta(days=1)
    assert hits[0].lift == pytest.approx(5.0)
    assert hits[1].lift == pytest.approx(1.0 + 4.0 * 0.5 ** (outside / 3), rel=1e-9)
    assert hits[0].score == pytest.approx(hits[0].fused * 5.0)


def test_time_weight_must_be_a_finite_non_negative_number(tmp_path: Path) -> None:
    service = _dated_lake(tmp_path)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(QueryError, match="time weight"):
            service.search(SearchRequest("budget", Principal("acme", "u-ana"),
                                         time_weight=bad))


_FRAGMENTS = ("in", "on", "during", "since", "the", "of", "last", "past", "this", "week",
              "weekend", "Monday", "sunday",
              "month", "year", "ago", "today", "yesterday", "June", "may", "Sept.", "dec", "3",
              "3rd", "12", "31", "2023", "1999", "2023-06-03", ",", "budget", "mid-July")


@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=8))
def test_the_quick_scan_never_hides_a_time(words: list[str]) -> None:
    import lake.search.named_time as module

    query = " ".join(words)
    quick = named_times(query, AS_OF)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "_HINT", re.compile(""))  # every query read in full
        assert named_times(query, AS_OF) == quick
