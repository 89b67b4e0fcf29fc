"""Timestamp kinds, units and resolution, inferred from the values and shown to the user.

Datetime strings (any number of fractional digits, with or without a UTC offset), epoch seconds, milliseconds,
microseconds or nanoseconds (told apart by magnitude), or times relative to the trace start (seconds unless the
layout or the column name says otherwise).
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.traces.layouts import TIME_UNITS
from planner.traces.sources import sql_str

# possessive: a digit run never gives digits back (nothing after it can match one), so a datetime fails fast
_NUMBER = re.compile(r"^[+-]?(\d++)(?:\.(\d*+))?(?:[eE][+-]?\d++)?$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{1,2}:\d{2}(?::(\d{2})(?:[.,](\d+))?)?")
# Smallest epoch (in seconds) we accept as wall-clock: 1973-03-03. Smaller values are relative times.
_EPOCH_FLOOR_S = 1e8
# The wall-clock times a request log can hold: from _EPOCH_FLOOR_S to 2100-01-01. A column of epoch times with one
# value outside (an epoch 0, a row in milliseconds among seconds) would stretch the trace over decades
WALL_CLOCK_RANGE_S = (_EPOCH_FLOOR_S, 4_102_444_800.0)
_FLOOR_YEAR = 1973
_ZONE = re.compile(r"(Z|[+-]\d{2}(:?\d{2})?)$")
# a time zone named after the time: an IANA Area/Location name, or UTC/GMT. Not an abbreviation (PDT, BST, IST are
# ambiguous or unknown to the cast): refused, as a plain timestamp cast silently drops it
_ZONE_NAME = re.compile(r"\s*(UTC|GMT|[A-Z][A-Za-z_]+(?:/[A-Za-z0-9_+-]+)+)\s*$")
_TWELVE_HOUR = re.compile(r"\s*([AaPp])[Mm]\s*$")
# what a plain timestamp cast drops from a value it reads (offset, zone, AM/PM: hours off, in silence): a value of
# a naive column that carries one is rejected, not read as if it had none ("T" is the date-time separator)
_SUFFIX_SQL = r"'[A-SU-Za-z]|[+-]\d\d(:?\d\d)?\s*$'"
_MAGNITUDE_UNITS = (("ns", 1e17), ("us", 1e14), ("ms", 1e11), ("s", _EPOCH_FLOOR_S))


@dataclass(frozen=True)
class TimeKind:
    """How arrival values are to be read."""

    kind: str                 # "datetime", "epoch_<unit>" or "relative_<unit>"
    seconds_per_unit: float   # 1.0 for datetime (parsed to epoch seconds)
    resolution_s: float | None
    zoned: bool = False       # datetimes carry a UTC offset (parsing them is slower, so only when needed)
    twelve_hour: bool = False  # datetimes end in AM or PM
    dropped_tail: str = ""     # the one word every datetime ends in that names no zone (PDT): read without it
    strptime: str = ""         # the strict format of the sample's first naive datetime (a fast path of the read)
    # a value outside WALL_CLOCK_RANGE_S is a stray (epoch numbers; datetimes whose median is in the range), not
    # a time axis of its own (relative times written as 1970 datetimes)
    range_checked: bool = True

    @property
    def form(self) -> str:
        """What a value of the column is read as, for a rejected row's reason (no quote marks: it goes into SQL)."""
        if self.kind != "datetime" or self.zoned:
            return self.kind
        if self.twelve_hour:
            return "a datetime ending in AM or PM (hours 1 to 12) like the first rows of the column"
        return "a datetime with no UTC offset, zone or AM/PM like the first rows of the column"

    @property
    def is_wall_clock(self) -> bool:
        return not self.kind.startswith("relative")


def _significant_exponent(text: str) -> int | None:
    """Power of ten of the last significant digit of a decimal string (``5999`` -> 0, ``3000`` -> 3, ``1.25`` -> -2)."""
    m = _NUMBER.match(text)
    if not m or "e" in text.lower():
        return None
    whole, frac = m.group(1), (m.group(2) or "").rstrip("0")
    if frac:
        return -len(frac)
    stripped = whole.rstrip("0")
    return len(whole) - len(stripped) if stripped else None


def _resolution_exponent(exponents: list[int | None]) -> int | None:
    known = [e for e in exponents if e is not None]
    return min(known) if known else None


def infer_time_kind(sample: list[str], declared_unit: str) -> TimeKind:
    """Decide how to read arrival values from a sample of them (as text).

    Parameters
    ----------
    sample : list of str
        Non-empty values from the start of the arrival column.
    declared_unit : str
        ``auto``, ``datetime`` or a unit from :data:`planner.traces.layouts.TIME_UNITS` set by the layout, the column
        name or the user.

    Raises
    ------
    PlannerError
        When the values are neither numbers nor datetimes.
    """
    values = [v.strip() for v in sample if v is not None and v.strip()]
    if not values:
        return TimeKind("relative_s" if declared_unit in ("auto", "datetime") else f"relative_{declared_unit}",
                        TIME_UNITS.get(declared_unit, 1.0), None)
    numeric = [v for v in values if _NUMBER.match(v)]
    if declared_unit == "datetime" or len(numeric) < len(values) / 2:
        dt = [m for m in map(_DATETIME.match, values) if m]
        if len(dt) < len(values) / 2:
            raise PlannerError(f"cannot read the arrival column: values such as {values[0]!r} are neither numbers "
                               "nor datetimes; expected e.g. '2023-11-16 18:17:03.97', epoch seconds or "
                               "relative seconds (or choose another column with --map arrival=COLUMN)")
        # DuckDB's timestamps hold microseconds: nanosecond digits are cut, not resolved
        frac_digits = min(max(len((m.group(2) or "").rstrip("0")) for m in dt), 6)
        if frac_digits:
            resolution = 10.0 ** -frac_digits
        elif len(dt) == len(values) and all(m.group(1) in (None, "00") for m in dt):
            resolution = 60.0
        else:
            resolution = 1.0
        # an offset is at most 6 characters ("+05:30"): searching only the tail skips a scan of every position; a
        # zone's name after the time ("… America/Los_Angeles", "… UTC") is a zone too, which a plain timestamp
        # cast dropped (rows of two zones came out hours apart in the wrong order)
        tails = {_tail(v, m) for v, m in zip(values, map(_DATETIME.match, values), strict=True) if m}
        words = tails - {"", "zone", "ampm"}
        if len(tails - {""}) > 1:
            raise PlannerError(f"cannot read the arrival column: its datetimes end in {_listed(tails - {''})}; "
                               "expected one form for the whole column: UTC offsets or tz-database zones (e.g. "
                               "'2023-11-16 18:17:03+05:00', '2023-11-16 18:17:03 America/New_York'), AM/PM, or "
                               "one zone abbreviation throughout")
        years = sorted(int(m.group(0)[:4]) for m in dt)
        return TimeKind("datetime", 1.0, resolution, "zone" in tails, "ampm" in tails, next(iter(words), ""),
                        _strptime_format(dt[0]) if tails <= {""} else "",
                        range_checked=years[len(years) // 2] >= _FLOOR_YEAR)

    low = _deciding_magnitude([abs(float(v)) for v in numeric])
    if declared_unit == "auto":
        unit = next((u for u, floor in _MAGNITUDE_UNITS if low >= floor), None)
        kind = f"epoch_{unit}" if unit else "relative_s"
        unit = unit or "s"
    else:
        unit = declared_unit
        kind = ("epoch_" if low * TIME_UNITS[unit] >= _EPOCH_FLOOR_S else "relative_") + unit
    exp = _resolution_exponent([_significant_exponent(v) for v in numeric])
    resolution = None if exp is None else TIME_UNITS[unit] * 10.0 ** exp
    if resolution is not None:
        resolution = float(f"{resolution:.3g}")
    return TimeKind(kind, TIME_UNITS[unit], resolution)


def _tail(value: str, match: re.Match) -> str:
    """What follows a datetime: ``""`` (nothing), ``"zone"`` (a UTC offset or a tz-database zone), ``"ampm"``,
    or the word itself (a zone abbreviation, PDT: ambiguous, and unknown to the cast)."""
    rest = value[match.end():]
    if not rest.strip():
        return ""
    # an offset is at most 6 characters ("+05:30"): searching only the tail skips a scan of every position
    if _ZONE.search(value, len(value) - 6) or _is_zone_name(rest):
        return "zone"
    return "ampm" if _TWELVE_HOUR.fullmatch(rest) else rest.strip()


def _strptime_format(match: re.Match) -> str:
    """The strict ``strptime`` format of a naive datetime as :data:`_DATETIME` matched it, or ``""`` where its
    fraction is finer than microseconds (``%f`` reads up to six digits; the cast reads more)."""
    text, fraction = match.group(0), match.group(2)
    if fraction is not None and len(fraction) > 6:
        return ""
    seconds = ":%S" if match.group(1) is not None else ""
    return (f"%Y-%m-%d{text[10]}%H:%M{seconds}"
            + (f"{text[match.start(2) - 1]}%f" if fraction is not None else ""))


def _listed(tails: set[str]) -> str:
    names = {"zone": "UTC offsets or zones", "ampm": "AM/PM"}
    return " and ".join(sorted(names.get(t, repr(t)) for t in tails))


def _is_zone_name(tail: str) -> bool:
    """Whether the text after a datetime names a time zone the tz database knows."""
    m = _ZONE_NAME.fullmatch(tail)
    return bool(m) and (m.group(1) in ("UTC", "GMT") or m.group(1) in _zone_names())


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _deciding_magnitude(magnitudes: list[float]) -> float:
    """The magnitude that tells epoch times (and their unit) from relative ones: the smallest value, as relative
    times start near 0; but where most values (half or more) lie within 10% of the median, as epoch times do and
    times counted from 0 do not, the median. Stray values (an epoch 0 written for a failed request, a row in
    milliseconds among seconds) then leave the column epoch times, and are rejected as out of
    :data:`WALL_CLOCK_RANGE_S`, where the smallest value alone made the whole column relative and stretched the
    trace over decades."""
    median = sorted(magnitudes)[len(magnitudes) // 2]
    near = sum(abs(m - median) <= 0.1 * median for m in magnitudes)
    return median if 2 * near >= len(magnitudes) else min(magnitudes)


def arrival_sql(value_sql: str, kind: TimeKind, text: bool = True) -> str:
    """SQL reading the text value as an arrival to store; NULL when unparsable.

    Datetimes stay timestamps (:func:`seconds_sql` turns them into epoch seconds when read): a timestamp column
    stores and compresses as integers, where epoch seconds with microseconds are doubles that compress poorly.
    Numbers become seconds, epoch or relative as the kind says.
    """
    if kind.kind == "datetime":
        if kind.zoned or not text:         # a typed timestamp column holds what it holds
            return f"TRY_CAST({value_sql} AS {'TIMESTAMPTZ' if kind.zoned else 'TIMESTAMP'})"
        # AM/PM or the one abbreviation every value ends in is taken off; the cast reads the clock time before it
        tail = (r"\s*[AaPp][Mm]\s*$" if kind.twelve_hour else
                r"\s*" + re.escape(kind.dropped_tail) + r"\s*$" if kind.dropped_tail else "")
        bare = f"regexp_replace({value_sql}, {sql_str(tail)}, '')" if tail else value_sql
        strict = f"CASE WHEN NOT regexp_matches({bare}, {_SUFFIX_SQL}) THEN TRY_CAST({bare} AS TIMESTAMP) END"
        if kind.twelve_hour:
            return _on_24_hour_clock(value_sql, strict)
        # the values written as the sample's first are read by its format, a strict parse as fast as the cast;
        # the suffix test (3x the cast's time) reads only the rest
        return f"coalesce(TRY_STRPTIME({value_sql}, {sql_str(kind.strptime)}), {strict})" if kind.strptime else strict
    # divide by an exact integer (5999 / 1000 = 5.999) rather than multiply by an inexact 0.001
    per_second = round(1.0 / kind.seconds_per_unit)
    scale = "" if per_second == 1 else f" / {per_second}.0"
    return f"(TRY_CAST({value_sql} AS DOUBLE){scale})"


def _on_24_hour_clock(value_sql: str, clock: str) -> str:
    """A datetime ending in AM or PM, its clock time read by ``clock`` without it: the hour 1-12 on the 24-hour
    clock (12 AM is 0:00, 1 PM 13:00); NULL for an hour 0 or above 12, or a value without AM or PM."""
    half = f"upper(regexp_extract({value_sql}, '([AaPp])[Mm]\\s*$', 1))"
    return (f"CASE WHEN {half} = '' OR hour({clock}) NOT BETWEEN 1 AND 12 THEN NULL "
            f"ELSE {clock} + to_hours(CASE WHEN {half} = 'P' THEN 12 ELSE 0 END "
            f"- CASE WHEN hour({clock}) = 12 THEN 12 ELSE 0 END) END")


def seconds_sql(arrival: str, kind: TimeKind) -> str:
    """SQL turning an arrival read by :func:`arrival_sql` into seconds (epoch or relative, as the kind says)."""
    return f"epoch({arrival})" if kind.kind == "datetime" else arrival


def describe_resolution(seconds: float | None) -> str:
    """Human text for a resolution: ``1 µs``, ``1 s``, ``60 s``."""
    if seconds is None:
        return "unknown"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale * 0.999:
            value = seconds / scale
            return f"{value:g} {unit}"
    return f"{seconds:g} s"


__all__ = ["TimeKind", "infer_time_kind", "arrival_sql", "seconds_sql", "describe_resolution"]
