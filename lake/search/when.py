"""Resolve catalog "when" phrases into time ranges or turn ordinals.

Every phrase resolves against a fixed, timezone-aware ``as_of``; days, weeks (ISO, Monday
start), months and years are computed in UTC and returned as half-open ``[start, end)`` ranges.
Resolution order (first match wins):

1. ordinals — "first turn", "the 3rd turn", "turn 5", "last turn", "the 2nd to last turn";
2. "since X" — from the start of X's range to the end of today;
3. calendar words — "today", "yesterday", "this/last week|month|year";
4. rolling windows — "last 3 days", "past 2 weeks", "past month": ``[as_of - N units, as_of]``
   widened to whole UTC days;
5. "N units ago" — the whole day / ISO week / month / year that lies N units back;
6. explicit months and years — "in March 2026", "March 2026", "2026-03", "in March" (the most
   recent March not after ``as_of``), "2025", and ISO days "2026-03-14";
7. anything ``dateparser`` reads as a single day ("last friday", "march 14", "the day before
   yesterday") becomes that UTC day. Bare integers are refused as ambiguous.

Unresolvable phrases raise :class:`lake.errors.QueryError` naming the phrase.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from lake.errors import QueryError

__all__ = ["OrdinalLookup", "TimeRange", "WhenLookup", "month_number", "resolve_when"]


@dataclass(frozen=True)
class TimeRange:
    """A half-open interval ``[start, end)`` of UTC instants."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        """Reject naive or non-UTC bounds and empty ranges."""
        for label, moment in (("start", self.start), ("end", self.end)):
            offset = moment.utcoffset()
            if offset is None or offset != timedelta(0):
                raise QueryError(f"TimeRange {label} must be timezone-aware UTC, got {moment!r}")
        if self.start >= self.end:
            raise QueryError(f"TimeRange start {self.start} is not before end {self.end}")

    def contains(self, moment: datetime) -> bool:
        """Whether the aware instant ``moment`` lies in ``[start, end)``."""
        if moment.utcoffset() is None:
            raise QueryError(f"cannot compare naive datetime {moment!r} with a UTC range")
        return self.start <= moment < self.end


@dataclass(frozen=True)
class OrdinalLookup:
    """A turn position in a conversation: 1-based from the start, negative from the end."""

    ordinal: int

    def __post_init__(self) -> None:
        """Reject ordinal 0, which names no turn."""
        if isinstance(self.ordinal, bool) or not isinstance(self.ordinal, int):
            raise QueryError(f"turn ordinal must be an integer, got {self.ordinal!r}")
        if self.ordinal == 0:
            raise QueryError("turn ordinal 0 names no turn; ordinals are 1-based (-1 = last)")


WhenLookup = TimeRange | OrdinalLookup

_ORDINAL_WORDS = (
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
    "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
    "seventeenth", "eighteenth", "nineteenth", "twentieth",
)  # fmt: skip
_NUMBER_WORDS = (
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve",
)  # fmt: skip
_MONTH_NAMES = tuple(name.lower() for name in calendar.month_name[1:])

# Turn positions: the Nth turn, the Nth from last, the last, turn number N.
_ORD = r"(?P<ord>\d+(?:st|nd|rd|th)|[a-z]+)"
_ORDINAL_FROM_START = re.compile(rf"^(?:the )?{_ORD} turn$")
_ORDINAL_FROM_END = re.compile(rf"^(?:the )?{_ORD}(?: to| from)?(?: the)? last turn$")
_LAST_TURN = re.compile(r"^(?:the )?(?:very )?(?:last|final|latest|most recent) turn$")
_PENULTIMATE = re.compile(r"^(?:the )?(?:penultimate|next[ -]to[ -]last|last but one) turn$")
_TURN_NUMBER = re.compile(r"^turn (?:number |no\.? |#)?(?P<n>\d+)$")
# Prefixes that wrap another phrase: "since X", "in X".
_SINCE = re.compile(r"^since (?P<rest>.+)$")
_PREPOSITION = re.compile(r"^(?:in|on|during) (?P<rest>.+)$")
# Spans counted back from the moment: this week, the last 3 days, two months ago.
_CALENDAR = re.compile(r"^(?P<which>this|last|previous|current) (?P<unit>week|month|year)$")
_UNIT = r"(?P<unit>day|week|month|year)s?"
_WINDOW = re.compile(rf"^(?:in the )?(?:last|past) (?P<n>\d+|[a-z]+) {_UNIT}$")
_PAST_UNIT = re.compile(rf"^(?:in )?(?:the )?past {_UNIT}$")
_AGO = re.compile(rf"^(?P<n>\d+|[a-z]+) {_UNIT} ago$")
# Calendar dates: "May 2026", 2026-05, 2026-05-14, 2026.
_MONTH_YEAR = re.compile(r"^(?P<month>[a-z]+)\.?,? (?P<year>\d{4})$")
_YEAR_MONTH = re.compile(r"^(?P<year>\d{4})[-/](?P<month>\d{1,2})$")
_ISO_DAY = re.compile(r"^(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})$")
_YEAR = re.compile(r"^(?P<year>\d{4})$")


def resolve_when(phrase: str, as_of: datetime) -> WhenLookup:
    """Resolve ``phrase`` against the aware instant ``as_of`` into a lookup.

    Returns an :class:`OrdinalLookup` for turn positions and a UTC :class:`TimeRange` for
    everything temporal (see the module docstring for the accepted forms). Matching ignores
    case, repeated spaces and trailing ``?.!``. Raises :class:`QueryError` naming the phrase
    when it cannot be resolved, or when ``as_of`` is not a timezone-aware datetime.
    """
    if not isinstance(phrase, str):
        raise QueryError(f"when-phrase must be a string, got {type(phrase).__name__}")
    if not isinstance(as_of, datetime) or as_of.utcoffset() is None:
        raise QueryError(f"as_of must be a timezone-aware datetime, got {as_of!r}")
    text = " ".join(phrase.lower().split()).rstrip("?.! ")
    if not text:
        raise QueryError(f"empty when-phrase {phrase!r}")
    now = as_of.astimezone(UTC)
    try:
        lookup = _resolve(text, now)
    except QueryError as exc:
        raise QueryError(f"cannot resolve when-phrase {phrase!r}: {exc}") from exc
    except (OverflowError, ValueError) as exc:
        # out-of-range calendar arithmetic ("9999 years ago", "999999999999 days ago", the
        # day after 9999-12-31) raises these, with Python's words, not the user's
        raise QueryError(f"cannot resolve when-phrase {phrase!r}: it reaches outside the "
                         "calendar (years 1 to 9999)") from exc
    if lookup is None:
        raise QueryError(
            f"cannot resolve when-phrase {phrase!r}: expected a date, a period such as "
            "'last week' or 'March 2026', or a turn such as 'first turn' or 'turn 5'"
        )
    return lookup


def _resolve(text: str, now: datetime) -> WhenLookup | None:
    """Try each phrase family in order; ``None`` when nothing matches."""
    ordinal = _ordinal(text)
    if ordinal is not None:
        return OrdinalLookup(ordinal)
    since = _SINCE.match(text)
    if since:
        origin = _resolve_range(since["rest"], now)
        if origin is None:
            return None
        end = _day_start(now.date()) + timedelta(days=1)
        if origin.start >= end:
            raise QueryError(f"{since['rest']!r} starts after as_of {now.isoformat()}")
        return TimeRange(origin.start, end)
    return _resolve_range(text, now)


def _resolve_range(text: str, now: datetime) -> TimeRange | None:
    """Resolve a temporal phrase, with or without a leading 'in'/'on'/'during'."""
    found = _calendar_range(text, now)
    if found is None:
        prep = _PREPOSITION.match(text)
        if prep:
            found = _calendar_range(prep["rest"], now)
    if found is None:
        found = _dateparser_day(text, now)
    return found


def _ordinal(text: str) -> int | None:
    """Parse a turn-position phrase into a 1-based (or negative, from the end) ordinal."""
    if _LAST_TURN.match(text):
        return -1
    if _PENULTIMATE.match(text):
        return -2
    number = _TURN_NUMBER.match(text)
    if number:
        return _nonzero(int(number["n"]))
    from_end = _ORDINAL_FROM_END.match(text)
    if from_end:
        n = _ordinal_value(from_end["ord"])
        return None if n is None else -_nonzero(n)
    from_start = _ORDINAL_FROM_START.match(text)
    if from_start:
        n = _ordinal_value(from_start["ord"])
        return None if n is None else _nonzero(n)
    return None


def _nonzero(n: int) -> int:
    """Refuse ordinal 0, which names no turn."""
    if n == 0:
        raise QueryError("it names turn 0; turns are numbered from 1")
    return n


def _ordinal_value(token: str) -> int | None:
    """'3rd' -> 3, 'second' -> 2; ``None`` for words that are not ordinals."""
    if token[0].isdigit():
        return int(token.rstrip("stndrh"))
    if token in _ORDINAL_WORDS:
        return _ORDINAL_WORDS.index(token) + 1
    return None


def _count(token: str) -> int | None:
    """'3' -> 3, 'three' -> 3, 'a'/'an' -> 1; ``None`` for anything else."""
    if token.isdigit():
        return int(token)
    if token in ("a", "an"):
        return 1
    if token in _NUMBER_WORDS:
        return _NUMBER_WORDS.index(token) + 1
    return None


def _calendar_range(text: str, now: datetime) -> TimeRange | None:
    """Resolve the phrase families this module handles itself (not dateparser)."""
    today = now.date()
    if text == "today":
        return _days(today, 1)
    if text == "yesterday":
        return _days(today - timedelta(days=1), 1)
    cal = _CALENDAR.match(text)
    if cal:
        back = 1 if cal["which"] in ("last", "previous") else 0
        return _unit_back(today, cal["unit"], back)
    window = _WINDOW.match(text)
    if window:
        n = _count(window["n"])
        if n is None:
            return None
        if n < 1:
            raise QueryError("it spans no time; use a count of at least 1")
        return _window(now, window["unit"], n)
    past = _PAST_UNIT.match(text)
    if past:
        return _window(now, past["unit"], 1)
    ago = _AGO.match(text)
    if ago:
        n = _count(ago["n"])
        return None if n is None else _unit_back(today, ago["unit"], n)
    return _explicit_period(text, now)


def _explicit_period(text: str, now: datetime) -> TimeRange | None:
    """Months, years and ISO days written out: 'March 2026', '2026-03', '2025', 'march'."""
    month_year = _MONTH_YEAR.match(text)
    if month_year:
        month = month_number(month_year["month"])
        return None if month is None else _month(int(month_year["year"]), month)
    year_month = _YEAR_MONTH.match(text)
    if year_month:
        month = int(year_month["month"])
        if not 1 <= month <= 12:
            raise QueryError(f"there is no month {month}")
        return _month(int(year_month["year"]), month)
    iso = _ISO_DAY.match(text)
    if iso:
        return _days(date(int(iso["year"]), int(iso["month"]), int(iso["day"])), 1)
    year = _YEAR.match(text)
    if year:
        return _year(int(year["year"]))
    month = month_number(text)
    if month is not None:
        # the most recent such month whose first day is not after as_of
        year_of = now.year if month <= now.month else now.year - 1
        return _month(year_of, month)
    return None


def month_number(token: str) -> int | None:
    """'march' or 'mar' (or 'sept') -> 3; ``None`` for other words."""
    if token == "sept":
        return 9
    for number, name in enumerate(_MONTH_NAMES, start=1):
        if token == name or token == name[:3]:
            return number
    return None


def _dateparser_day(text: str, now: datetime) -> TimeRange | None:
    """Let dateparser read the phrase; accept only answers at day (or finer) precision."""
    if text.lstrip("+-").isdigit():
        # dateparser reads '15' as a day of this month; far more likely a typo for 'turn 15'
        return None
    from dateparser.date import DateDataParser  # slow to import; only needed on this path

    parser = DateDataParser(
        languages=["en"],
        settings={
            "RELATIVE_BASE": now,
            "PREFER_DATES_FROM": "past",
            "RETURN_AS_TIMEZONE_AWARE": True,
            "TIMEZONE": "UTC",
            "TO_TIMEZONE": "UTC",
        },
    )
    data = parser.get_date_data(text)
    parsed = data.date_obj
    # coarser periods ('week', 'month', 'year') are not single days: dateparser fills the
    # missing parts from as_of, which would silently pick an arbitrary day
    if parsed is None or data.period not in ("day", "time"):
        return None
    return _days(parsed.astimezone(UTC).date(), 1)


def _day_start(day: date) -> datetime:
    """Midnight UTC at the start of ``day``."""
    return datetime.combine(day, time(0), tzinfo=UTC)


def _days(first: date, count: int) -> TimeRange:
    """``count`` whole UTC days starting with ``first``."""
    start = _day_start(first)
    return TimeRange(start, start + timedelta(days=count))


def _month(year: int, month: int) -> TimeRange:
    """The calendar month ``year-month`` in UTC."""
    start = _day_start(date(year, month, 1))
    next_year, next_month = (year + 1, 1) if month == 12 else (year, month + 1)
    return TimeRange(start, _day_start(date(next_year, next_month, 1)))


def _year(year: int) -> TimeRange:
    """The calendar year in UTC."""
    return TimeRange(_day_start(date(year, 1, 1)), _day_start(date(year + 1, 1, 1)))


def _shift_months(year: int, month: int, back: int) -> tuple[int, int]:
    """The (year, month) that lies ``back`` months before ``year-month``."""
    index = year * 12 + (month - 1) - back
    return index // 12, index % 12 + 1


def _unit_back(today: date, unit: str, back: int) -> TimeRange:
    """The whole day / ISO week / month / year lying ``back`` units before today's."""
    if unit == "day":
        return _days(today - timedelta(days=back), 1)
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
        return _days(monday, 7)
    if unit == "month":
        return _month(*_shift_months(today.year, today.month, back))
    return _year(today.year - back)


def _window(now: datetime, unit: str, n: int) -> TimeRange:
    """``[now - n units, now]`` widened to whole UTC days."""
    today = now.date()
    if unit == "day":
        first = today - timedelta(days=n)
    elif unit == "week":
        first = today - timedelta(weeks=n)
    else:
        months = n if unit == "month" else 12 * n
        year, month = _shift_months(today.year, today.month, months)
        # clamp e.g. 31 March minus one month to 28/29 February
        first = date(year, month, min(today.day, calendar.monthrange(year, month)[1]))
    return TimeRange(_day_start(first), _day_start(today) + timedelta(days=1))
