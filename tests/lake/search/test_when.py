"""Tests for lake.search.when: catalog phrases resolved against a fixed as_of."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.errors import QueryError
from lake.search.when import OrdinalLookup, TimeRange, WhenLookup, resolve_when

# Wednesday 18 March 2026, 15:30 UTC (ISO week 12: Monday 16 .. Sunday 22 March)
AS_OF = datetime(2026, 3, 18, 15, 30, tzinfo=UTC)


def days(first: date, last_exclusive: date) -> TimeRange:
    """The UTC range [first 00:00, last_exclusive 00:00)."""
    return TimeRange(
        datetime(first.year, first.month, first.day, tzinfo=UTC),
        datetime(last_exclusive.year, last_exclusive.month, last_exclusive.day, tzinfo=UTC),
    )


def d(month: int, day: int, year: int = 2026) -> date:
    """Shorthand for a calendar date."""
    return date(year, month, day)


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("today", days(d(3, 18), d(3, 19))),
        ("yesterday", days(d(3, 17), d(3, 18))),
        ("this week", days(d(3, 16), d(3, 23))),
        ("last week", days(d(3, 9), d(3, 16))),
        ("this month", days(d(3, 1), d(4, 1))),
        ("last month", days(d(2, 1), d(3, 1))),
        ("this year", days(d(1, 1), d(1, 1, 2027))),
        ("last year", days(d(1, 1, 2025), d(1, 1))),
        ("in March 2026", days(d(3, 1), d(4, 1))),
        ("March 2026", days(d(3, 1), d(4, 1))),
        ("mar 2025", days(d(3, 1, 2025), d(4, 1, 2025))),
        ("in March", days(d(3, 1), d(4, 1))),
        ("in April", days(d(4, 1, 2025), d(5, 1, 2025))),
        ("December", days(d(12, 1, 2025), d(1, 1))),
        ("2026-03", days(d(3, 1), d(4, 1))),
        ("2025-12", days(d(12, 1, 2025), d(1, 1))),
        ("2026-03-14", days(d(3, 14), d(3, 15))),
        ("on 2026-03-14", days(d(3, 14), d(3, 15))),
        ("in 2025", days(d(1, 1, 2025), d(1, 1))),
        # rolling windows: [as_of - N units, as_of] widened to whole UTC days
        ("last 3 days", days(d(3, 15), d(3, 19))),
        ("last three days", days(d(3, 15), d(3, 19))),
        ("in the last 3 days", days(d(3, 15), d(3, 19))),
        ("past 2 weeks", days(d(3, 4), d(3, 19))),
        ("past week", days(d(3, 11), d(3, 19))),
        ("the past month", days(d(2, 18), d(3, 19))),
        # "N units ago": the whole unit that lies N units back
        ("3 days ago", days(d(3, 15), d(3, 16))),
        ("a week ago", days(d(3, 9), d(3, 16))),
        ("2 months ago", days(d(1, 1), d(2, 1))),
        ("since Monday", days(d(3, 16), d(3, 19))),
        ("since last week", days(d(3, 9), d(3, 19))),
        ("since 2026-03-01", days(d(3, 1), d(3, 19))),
        # dateparser fallback, single days only
        ("last friday", days(d(3, 13), d(3, 14))),
        ("march 14", days(d(3, 14), d(3, 15))),
        ("the day before yesterday", days(d(3, 16), d(3, 17))),
        ("14 March 2026", days(d(3, 14), d(3, 15))),
        # case, spacing and trailing punctuation do not matter
        ("  Yesterday? ", days(d(3, 17), d(3, 18))),
        ("LAST   Week", days(d(3, 9), d(3, 16))),
        # ordinals
        ("first turn", OrdinalLookup(1)),
        ("the first turn", OrdinalLookup(1)),
        ("last turn", OrdinalLookup(-1)),
        ("the last turn", OrdinalLookup(-1)),
        ("the final turn", OrdinalLookup(-1)),
        ("3rd turn", OrdinalLookup(3)),
        ("the 21st turn", OrdinalLookup(21)),
        ("turn 5", OrdinalLookup(5)),
        ("turn #12", OrdinalLookup(12)),
        ("second turn", OrdinalLookup(2)),
        ("the tenth turn", OrdinalLookup(10)),
        ("the 2nd to last turn", OrdinalLookup(-2)),
        ("second to last turn", OrdinalLookup(-2)),
        ("third last turn", OrdinalLookup(-3)),
        ("penultimate turn", OrdinalLookup(-2)),
    ],
)
def test_phrases(phrase: str, expected: WhenLookup) -> None:
    assert resolve_when(phrase, AS_OF) == expected


def test_days_are_utc_days() -> None:
    # 22:00 in New York on 18 March is already 19 March in UTC
    evening = datetime(2026, 3, 18, 22, 0, tzinfo=timezone(timedelta(hours=-4)))
    assert resolve_when("today", evening) == days(d(3, 19), d(3, 20))
    assert resolve_when("yesterday", evening) == days(d(3, 18), d(3, 19))
    result = resolve_when("this week", evening)
    assert isinstance(result, TimeRange)
    assert result.start.tzinfo == UTC


@pytest.mark.parametrize(
    ("as_of", "phrase", "expected"),
    [
        # a month counts once its first day is not after as_of
        (datetime(2026, 3, 1, 0, 0, tzinfo=UTC), "in March", days(d(3, 1), d(4, 1))),
        (datetime(2026, 2, 28, 23, 59, tzinfo=UTC), "in March", days(d(3, 1, 2025), d(4, 1, 2025))),
        # ISO weeks straddle years: 1 January 2026 is a Thursday
        (datetime(2026, 1, 1, 12, tzinfo=UTC), "this week", days(d(12, 29, 2025), d(1, 5))),
        (datetime(2026, 1, 1, 12, tzinfo=UTC), "last week", days(d(12, 22, 2025), d(12, 29, 2025))),
        (datetime(2026, 1, 15, tzinfo=UTC), "last month", days(d(12, 1, 2025), d(1, 1))),
        # month arithmetic clamps to the shorter month
        (datetime(2026, 3, 31, 8, tzinfo=UTC), "past month", days(d(2, 28), d(4, 1))),
        (datetime(2024, 3, 31, 8, tzinfo=UTC), "past month", days(d(2, 29, 2024), d(4, 1, 2024))),
        # on a Sunday, this week began six days earlier
        (datetime(2026, 3, 22, 23, tzinfo=UTC), "this week", days(d(3, 16), d(3, 23))),
    ],
)
def test_calendar_edges(as_of: datetime, phrase: str, expected: TimeRange) -> None:
    assert resolve_when(phrase, as_of) == expected


@pytest.mark.parametrize(
    "phrase",
    [
        "whenever",
        "",
        "   ",
        "15",  # bare numbers are ambiguous (day of month or turn number)
        "next turn",
        "last 3 turns",
        "turn 0",
        "the 0th turn",
        "2026-02-30",
        "2026-13",
        "since tomorrow",
        "since the first turn",
        "last 0 days",
        "9999 years ago",
        "next week",  # dateparser reads it as a week, not a single day
    ],
)
def test_unknown_phrases_raise_naming_the_phrase(phrase: str) -> None:
    with pytest.raises(QueryError, match=re.escape(repr(phrase))):
        resolve_when(phrase, AS_OF)


def test_as_of_must_be_aware() -> None:
    with pytest.raises(QueryError, match="as_of"):
        resolve_when("today", datetime(2026, 3, 18, 15, 30))


def test_value_objects_validate() -> None:
    with pytest.raises(QueryError, match="UTC"):
        TimeRange(datetime(2026, 3, 1), datetime(2026, 3, 2, tzinfo=UTC))
    with pytest.raises(QueryError, match="UTC"):
        tz = timezone(timedelta(hours=1))
        TimeRange(datetime(2026, 3, 1, tzinfo=tz), datetime(2026, 3, 2, tzinfo=tz))
    with pytest.raises(QueryError, match="before"):
        TimeRange(datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC))
    with pytest.raises(QueryError, match="0"):
        OrdinalLookup(0)


def test_time_range_contains_is_half_open() -> None:
    day = days(d(3, 18), d(3, 19))
    assert day.contains(datetime(2026, 3, 18, tzinfo=UTC))
    assert day.contains(datetime(2026, 3, 18, 20, tzinfo=timezone(timedelta(hours=3))))
    assert not day.contains(datetime(2026, 3, 19, tzinfo=UTC))
    with pytest.raises(QueryError, match="naive"):
        day.contains(datetime(2026, 3, 18, 12))


moments = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
)


@given(moments)
def test_calendar_units_contain_as_of(as_of: datetime) -> None:
    today = resolve_when("today", as_of)
    week = resolve_when("this week", as_of)
    month = resolve_when("this month", as_of)
    for found in (today, week, month):
        assert isinstance(found, TimeRange)
        assert found.contains(as_of)
    assert isinstance(week, TimeRange)
    assert week.start.weekday() == 0
    assert week.end - week.start == timedelta(days=7)
    last_week = resolve_when("last week", as_of)
    assert isinstance(last_week, TimeRange)
    assert last_week.end == week.start


@given(moments, st.integers(1, 400))
def test_rolling_window_covers_the_span(as_of: datetime, n: int) -> None:
    window = resolve_when(f"last {n} days", as_of)
    assert isinstance(window, TimeRange)
    assert window.contains(as_of)
    assert window.contains(as_of - timedelta(days=n))
    assert not window.contains(as_of - timedelta(days=n + 1))
    ago = resolve_when(f"{n} days ago", as_of)
    assert isinstance(ago, TimeRange)
    assert ago.contains(as_of - timedelta(days=n))
    assert ago.end - ago.start == timedelta(days=1)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="ascii"), max_size=25))
def test_arbitrary_text_resolves_or_raises_query_error(phrase: str) -> None:
    try:
        result = resolve_when(phrase, AS_OF)
    except QueryError:
        return
    assert isinstance(result, TimeRange | OrdinalLookup)


@pytest.mark.parametrize("phrase", ["last 999999999999 days", "99999999999 days ago",
                                    "9999-12-31", "in 9999"])
def test_a_phrase_past_the_calendar_is_said_in_the_users_words(phrase: str) -> None:
    # Python's own words ("int too large to convert to C int") used to reach the user.
    with pytest.raises(QueryError, match="outside the calendar") as caught:
        resolve_when(phrase, datetime(2026, 3, 1, tzinfo=UTC))
    assert phrase in str(caught.value) and "C int" not in str(caught.value)
