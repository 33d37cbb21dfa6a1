"""A site's days in its own time zone, as UTC instants: the one place local dates become instants.

A site counts its days in ``sites[].timezone`` (:class:`tally.settings.SiteSettings`); the views stay
in UTC. A local day is [local midnight, next local midnight) as UTC instants: 24 hours, or 23 and 25
on the days daylight saving time starts and ends. Its UTC edges fall on whole hours for most zones,
on half or quarter hours for some (Asia/Kolkata +05:30, Asia/Kathmandu +05:45).

:func:`split` cuts a UTC interval into the pieces the views can answer exactly: whole UTC days
(``agg.*_1d``), whole UTC hours (``agg.*_1h``) and the minutes at sub-hour edges (``agg.traffic_1m``,
or ``agg.sessions`` for visits). Pure code: no I/O.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from zoneinfo import ZoneInfo

UTC = "UTC"
# Names of zones that are UTC all year: a site in one keeps the views' own days (the fast path).
_UTC_NAMES = frozenset(
    {"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu", "Etc/GMT", "GMT"}
    | {"Etc/GMT+0", "Etc/GMT-0", "Etc/GMT0", "GMT0", "GMT+0", "GMT-0", "Etc/Greenwich", "Greenwich"}
)
HOUR, DAY, MINUTE = dt.timedelta(hours=1), dt.timedelta(days=1), dt.timedelta(minutes=1)
Interval = tuple[dt.datetime, dt.datetime]  # half-open, UTC


def is_utc(timezone: str) -> bool:
    """Whether ``timezone`` is UTC all year (the views' days are the site's days)."""
    return timezone in _UTC_NAMES


@functools.cache
def zone(timezone: str) -> ZoneInfo:
    """The :class:`ZoneInfo` of an IANA name (checked when the settings were read)."""
    return ZoneInfo(timezone)


def local_midnight(day: dt.date, timezone: str) -> dt.datetime:
    """The UTC instant a local day begins. A midnight that does not exist (a zone whose clocks jump
    at 00:00) is the instant of the jump; one that happens twice, its first occurrence."""
    return dt.datetime.combine(day, dt.time(), zone(timezone)).astimezone(dt.UTC)


def local_today(timezone: str, now: dt.datetime) -> dt.date:
    """The site's local date at the instant ``now`` (aware)."""
    return now.astimezone(zone(timezone)).date()


def local_time(instant: dt.datetime, timezone: str) -> dt.datetime:
    """An instant as the site's wall clock (aware, in the zone)."""
    return instant.astimezone(zone(timezone))


@dataclass(frozen=True)
class LocalDays:
    """An inclusive range of a zone's local dates."""

    start: dt.date
    end: dt.date
    timezone: str = UTC

    @property
    def instants(self) -> Interval:
        """[local midnight of ``start``, local midnight after ``end``) as UTC instants."""
        return local_midnight(self.start, self.timezone), local_midnight(self.end + DAY, self.timezone)

    @property
    def utc_dates(self) -> tuple[dt.date, dt.date]:
        """The UTC dates the range's instants touch (the views' ``event_date`` partitions to read)."""
        return utc_dates(self.instants)

    @property
    def hour_aligned(self) -> bool:
        """Whether both edges fall on whole UTC hours (then ``agg.*_1h`` rows answer it exactly)."""
        return all(_on(t, HOUR) for t in self.instants)


def utc_dates(interval: Interval) -> tuple[dt.date, dt.date]:
    """The first and last UTC date a half-open interval touches."""
    first, last = interval
    return first.astimezone(dt.UTC).date(), (last - dt.timedelta(microseconds=1)).astimezone(dt.UTC).date()


@dataclass(frozen=True)
class Pieces:
    """A UTC interval cut into what the views hold: whole UTC days (inclusive dates), whole hours
    and minutes, each a list of half-open intervals."""

    days: tuple[dt.date, dt.date] | None
    hours: tuple[Interval, ...]
    minutes: tuple[Interval, ...]


def split(interval: Interval, *, whole_days: bool = True) -> Pieces:
    """Cut ``interval`` (minute-aligned UTC instants) into whole UTC days (only when ``whole_days``),
    whole hours around them, and the minutes at sub-hour edges."""
    first, last = (t.astimezone(dt.UTC) for t in interval)
    assert _on(first, MINUTE) and _on(last, MINUTE), f"local days begin on whole minutes, got {first}, {last}"
    hour_from, hour_to = _ceil(first, HOUR), _floor(last, HOUR)
    if hour_from >= hour_to:  # less than one whole hour: minutes only
        return Pieces(None, (), ((first, last),) if first < last else ())
    minutes = tuple(m for m in ((first, hour_from), (hour_to, last)) if m[0] < m[1])
    day_from, day_to = _ceil(hour_from, DAY), _floor(hour_to, DAY)
    if not whole_days or day_from >= day_to:
        return Pieces(None, ((hour_from, hour_to),), minutes)
    hours = tuple(h for h in ((hour_from, day_from), (day_to, hour_to)) if h[0] < h[1])
    return Pieces((day_from.date(), (day_to - DAY).date()), hours, minutes)


def bucket(instant: dt.datetime, grain: str, timezone: str) -> dt.datetime:
    """The local bucket an instant falls in: its local date's midnight (``day``) or its local hour
    (``hour``), as a naive wall-clock time. On the day clocks go back the repeated hour is one bucket."""
    local = local_time(instant, timezone).replace(tzinfo=None)
    return local.replace(hour=0 if grain == "day" else local.hour, minute=0, second=0, microsecond=0)


def buckets(days: LocalDays, grain: str) -> list[dt.datetime]:
    """Every local bucket (naive wall-clock starts) of the range, in order: each date, or each local
    hour that exists (23 on the day clocks go forward, 24 distinct on the day they go back)."""
    if grain == "day":
        return [dt.datetime.combine(days.start + i * DAY, dt.time()) for i in range((days.end - days.start).days + 1)]
    first, last = days.instants
    seen: dict[dt.datetime, None] = {}
    at = _floor(first, HOUR)
    while at < last:
        seen.setdefault(bucket(max(at, first), grain, days.timezone), None)
        at += HOUR
    return list(seen)


def hour_edges(days: LocalDays) -> list[dt.datetime]:
    """The UTC hours a range's local day edges cut (empty for zones on whole-hour offsets): the hours
    whose minutes belong to two local days."""
    edges = [local_midnight(days.start + i * DAY, days.timezone) for i in range((days.end - days.start).days + 2)]
    return sorted({_floor(t, HOUR) for t in edges if not _on(t, HOUR)})


def _on(instant: dt.datetime, step: dt.timedelta) -> bool:
    return (instant.astimezone(dt.UTC) - _EPOCH) % step == dt.timedelta(0)


def _floor(instant: dt.datetime, step: dt.timedelta) -> dt.datetime:
    return instant - (instant - _EPOCH) % step


def _ceil(instant: dt.datetime, step: dt.timedelta) -> dt.datetime:
    floor = _floor(instant, step)
    return floor if floor == instant else floor + step


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def series_pieces(days: LocalDays, grain: str) -> Pieces:
    """The pieces of a time series by local ``grain``: no hour piece holds minutes of two local
    buckets (an hour a bucket edge cuts is read as its minutes), and no whole days (a UTC day row
    cannot be split into local buckets)."""
    base = split(days.instants, whole_days=False)
    cut = set(hour_edges(days) if grain == "day" else _hours_cut_by_local_hours(base, days.timezone))
    hours: list[Interval] = []
    minutes = list(base.minutes)
    for start, end in base.hours:
        run, at = start, start
        while at < end:
            if at in cut:
                hours += [(run, at)] if run < at else []
                minutes.append((at, at + HOUR))
                run = at + HOUR
            at += HOUR
        hours += [(run, end)] if run < end else []
    return Pieces(None, tuple(hours), tuple(sorted(minutes)))


def _hours_cut_by_local_hours(pieces: Pieces, timezone: str) -> list[dt.datetime]:
    """The UTC hours a local hour starts inside (every hour, in a zone on a half-hour offset)."""
    cut = []
    for start, end in pieces.hours:
        at = start
        while at < end:
            if local_time(at, timezone).minute:
                cut.append(at)
            at += HOUR
    return cut
