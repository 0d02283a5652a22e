"""Times a query names ("in May 2023", "on 3 June, 2023", "last week"), read as time ranges
whose turns the search lifts.

A person asking "what did Maria donate in December 2023?" means a turn of December 2023,
but the words "December 2023" are rarely in that turn: people date what they say by when
they say it. So the phrase is read out of the query, resolved against the search's
``as_of`` by the catalog's own rules (lake.search.when), and each fused turn is multiplied
by ``1 + weight × 0.5 ** (days outside the range / 3)`` (lake.search.fusion.recency_lift with
the distance as the age): a turn inside the range gains ``1 + weight``, one three days
outside half of that, one a month outside nearly nothing. A lift, not a filter: "in June"
often names a turn of early July that tells what happened in June.

Read: ISO days (2023-06-03); a day with its month and year in either order, with or
without "of", an ordinal suffix or commas (3 June 2023, June 3rd, 2023); a month and year
(December 2023); a day and month without a year (the latest such day not after ``as_of``);
a month after "in" or "during" (its latest occurrence); a year after "in" or "during"; a
weekday (on Monday, last Friday: the latest such day); the catalog's relative periods
(today, yesterday, this/last week, month or year, past N days, N weeks ago); and any of
these after "since" (from its start to the end of ``as_of``'s day). A phrase that names no
real day is not a time (2023-02-30), or is read at the coarser period it also names (31 June
2023 as June 2023). Several phrases lift the turns of any of their ranges.

What it measured: docs/design/named-time.md.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from lake.errors import QueryError
from lake.search.defaults import DEFAULT_TIME_WEIGHT as DEFAULT_TIME_WEIGHT
from lake.search.when import TimeRange, month_number, resolve_when

__all__ = ["DEFAULT_TIME_WEIGHT", "NAMED_TIME_HALF_LIFE_DAYS", "NamedTime", "named_span",
           "named_times", "seconds_outside"]

FIRST_YEAR = 1970  # years before, or after the one following as_of's, are not read as times
NAMED_TIME_HALF_LIFE_DAYS = 3.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FULL = "|".join(calendar.month_name[1:])
_WEEKDAYS = "|".join(calendar.day_name)
_SHORT = "|".join(name[:3] for name in calendar.month_name[1:]) + "|sept"
_MONTH = rf"(?P<month>(?:{_FULL}|{_SHORT})\.?)"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
# Most specific first: where two forms match at one place, the longer reading wins.
_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rf"(?<![\w-]){pattern}(?![\w-])", re.IGNORECASE)) for kind, pattern in (
        ("iso", r"(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})"),
        ("day", rf"(?:on )?{_DAY}(?: of)? {_MONTH},? {_YEAR}"),
        ("day", rf"(?:on )?{_MONTH} {_DAY},? {_YEAR}"),
        ("month", rf"(?:in |during )?{_MONTH},? {_YEAR}"),
        ("day", rf"(?:on )?{_DAY}(?: of)? {_MONTH}"),
        ("day", rf"(?:on )?{_MONTH} {_DAY}"),
        ("month", rf"(?:in|during) (?:early |late |mid-?)?(?P<month>{_FULL})"),
        ("year", rf"(?:in|during) {_YEAR}"),
        ("weekday", rf"(?:on |(?P<last>last) )?(?P<weekday>{_WEEKDAYS})"),
        ("relative", r"today|yesterday|(?:this|last|previous) (?:week|month|year)"
                     r"|past (?:day|week|month|year)|(?:last|past) \d+ (?:days|weeks|months|years)"
                     r"|\d+ (?:days?|weeks?|months?|years?) ago"),
    ))

# Every form holds a digit or one of these words: one scan rules out most queries (a query
# without a time costs 2-5 µs instead of ~20 µs).
_HINT = re.compile(
    rf"\d|(?<!\w)(?:{_FULL}|{_SHORT}|{_WEEKDAYS}|today|yesterday|week|month|year)",
    re.IGNORECASE)
_SINCE = re.compile(r"(?<![\w-])since $", re.IGNORECASE)


@dataclass(frozen=True)
class NamedTime:
    """A time the query names: its words (``phrase``, as written) and the range they mean."""

    phrase: str
    range: TimeRange


def named_times(query: str, as_of: datetime) -> list[NamedTime]:
    """The times ``query`` names, in the order it names them, resolved against the aware
    ``as_of``. Free text: words that only look like a date ("may" as a verb, 2023-02-30,
    "in 3000 ms": only years from 1970 to the one after ``as_of``'s count) are not read as
    one, never an error."""
    found: list[tuple[int, int, NamedTime]] = []
    if _HINT.search(query) is None:
        return []
    for kind, pattern in _FORMS:
        for match in pattern.finditer(query):
            if any(s < match.end() and match.start() < e for s, e, _ in found):
                continue  # part of a longer phrase already read
            phrase = _phrase(kind, match, as_of)
            if phrase is None:
                continue
            start, resolved = match.start(), None
            since = _SINCE.search(query, 0, start)
            if since is not None:  # "since March": the catalog's since, to as_of's day's end
                resolved = _read(f"since {phrase}", as_of)
                if resolved is not None:
                    start = since.start()
            resolved = resolved or _read(phrase, as_of)
            if resolved is not None:
                found.append((start, match.end(),
                              NamedTime(query[start:match.end()], resolved)))
    return [named for _, _, named in sorted(found, key=lambda item: item[0])]


def named_span(named: NamedTime) -> str:
    """The named range's UTC days as people read them: "2023-06-03", or "2023-06-01 to
    2023-06-30" (both days included)."""
    first, last = named.range.start.date(), (named.range.end - timedelta(microseconds=1)).date()
    return first.isoformat() if first == last else f"{first.isoformat()} to {last.isoformat()}"


def seconds_outside(turn_at_us: np.ndarray, ranges: Sequence[TimeRange]) -> np.ndarray:
    """Per turn time (microseconds since the epoch), how many seconds it lies outside the
    nearest of ``ranges`` (0 inside one; ranges are half-open). ``ranges`` must not be
    empty."""
    if not ranges:
        raise ValueError("no time range to measure from")
    at = np.asarray(turn_at_us, np.int64)
    best = np.full(at.shape, np.inf)
    for span in ranges:
        start, end = _micros(span.start), _micros(span.end)
        before = np.maximum(start - at, 0)
        after = np.maximum(at - (end - 1), 0)  # the last instant inside is end - 1 µs
        best = np.minimum(best, (before + after) / 1e6)
    return best


def _phrase(kind: str, match: re.Match[str], as_of: datetime) -> str | None:
    """A matched phrase as the catalog reads it (lake.search.when); None if it names no day."""
    groups = match.groupdict()
    if kind in ("relative", "iso"):
        return match.group(0)
    if kind == "weekday":
        # the latest such day not after as_of's ("last": before as_of's day)
        today = as_of.astimezone(UTC).date()
        back = (today.weekday() - list(calendar.day_name).index(
            groups["weekday"].capitalize())) % 7
        return (today - timedelta(days=back or (7 if groups["last"] else 0))).isoformat()
    if kind == "year":
        return str(groups["year"])
    if kind == "month":
        return f"{groups['month']} {groups['year']}" if groups.get("year") else groups["month"]
    month = month_number(groups["month"].rstrip(".").lower())
    if month is None:
        return None
    day = int(groups["day"])
    year = int(groups["year"]) if groups.get("year") else _latest_year(month, day, as_of)
    return None if year is None else f"{year:04d}-{month:02d}-{day:02d}"


def _read(phrase: str, as_of: datetime) -> TimeRange | None:
    """The range the catalog reads ``phrase`` as; None if it names no time turns were
    recorded in."""
    try:
        lookup = resolve_when(phrase, as_of)
    except QueryError:
        return None  # no such day or period: the words were not a time after all
    if not isinstance(lookup, TimeRange) or not (
            FIRST_YEAR <= lookup.start.year <= as_of.astimezone(UTC).year + 1):
        return None  # "in 3000 ms", "in 1850": a number, or no time a turn was recorded in
    return lookup


def _latest_year(month: int, day: int, as_of: datetime) -> int | None:
    """The year of the latest ``month``/``day`` not after ``as_of``'s day; None when no year
    of the last four has that day (29 February)."""
    today = as_of.astimezone(UTC).date()
    for year in range(today.year, today.year - 5, -1):
        if day <= calendar.monthrange(year, month)[1] and (month, day) <= (
                (today.month, today.day) if year == today.year else (12, 31)):
            return year
    return None


def _micros(moment: datetime) -> int:
    """An aware instant as whole microseconds since the epoch."""
    return (moment - _EPOCH) // timedelta(microseconds=1)
