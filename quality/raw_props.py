"""Raw = ``agg.props_1d``: the custom properties view counts exactly the properties of raw's custom events.

Pure comparison logic. The view counts, per site, UTC day, event name, property key and value, the
non-bot custom events (once per event_id) that carried that property (a missing name or value is
``(none)``), so per date:

- **property events**: each row's ``events`` equals the number of such events in raw, and so do
  the day's sums (rows that differ are named);
- **property rows not in raw**: no row counts a (name, key, value) that no non-bot custom event
  of raw carried; a row of bots' events only (reports never count bots) is named as such;
- **property visitors**: the union estimate of the day's visitor sketches is within its own
  2-sigma bounds of the exact distinct visitors of those events, and every sketch is a valid
  DataSketches HLL sketch.

Every row is compared, not a sample: the view holds at most one row per property of a raw event.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from quality.findings import RAW_VIEWS, SKETCHES, Finding, backfill_hint, examples
from quality.raw_views import explain_mismatch, late_arrivals, plural, recorded_late_since
from tally.dimensions import NONE_VALUE
from tally.sketches import union_estimate
from tally.tables import PROPS_1D, RAW_PAGEVIEWS

PROPS = PROPS_1D.table
ROW = ["site_id", "event_date", "name", "key", "value"]  # a view row, by its date rather than its window


@dataclass(frozen=True)
class PropsInput:
    """What the comparison reads, already limited to the audited site (if any)."""

    dates: tuple[dt.date, ...]
    # raw events of the dates (more are ignored): event_id, event_date, type, is_bot, site_id,
    # visitor_id, event_time, ts_received, name, props (a map: (key, value) pairs)
    events: pd.DataFrame
    rows: pd.DataFrame  # agg.props_1d: site_id, event_date, name, key, value, events, visitors_sketch
    late_events: pd.DataFrame  # agg.late_events: query, late_rows, event_date (the date it was recorded)
    watermark: dt.timedelta


def _pairs(props: object) -> list[tuple[str, str | None]]:
    """A raw ``props`` map as (key, value) pairs (pyarrow gives a map as a list of pairs)."""
    if props is None:
        return []
    items = props.items() if isinstance(props, dict) else props
    assert isinstance(items, Iterable), f"props is a map, not {type(props).__name__}"
    return [(str(k), v) for k, v in items]


def property_events(events: pd.DataFrame) -> pd.DataFrame:
    """One row per property of each custom event (once per event_id): ROW, event_id, visitor_id, is_bot, times."""
    custom = events[events["type"] == "event"].drop_duplicates("event_id")
    custom = custom.assign(props=custom["props"].map(_pairs), is_bot=custom["is_bot"].fillna(False).astype(bool))
    exploded = custom[custom["props"].map(len) > 0].explode("props")
    if exploded.empty:
        columns = [*ROW, "event_id", "visitor_id", "event_time", "ts_received"]
        return pd.DataFrame({**{c: pd.Series(dtype=object) for c in columns}, "is_bot": pd.Series(dtype=bool)})
    return pd.DataFrame(
        {
            "site_id": exploded["site_id"],
            "event_date": exploded["event_date"],
            "name": exploded["name"].fillna(NONE_VALUE).astype(str),
            "key": exploded["props"].map(lambda pair: pair[0]),
            "value": exploded["props"].map(lambda pair: NONE_VALUE if pair[1] is None else str(pair[1])),
            "event_id": exploded["event_id"],
            "visitor_id": exploded["visitor_id"],
            "is_bot": exploded["is_bot"],
            "event_time": exploded["event_time"],
            "ts_received": exploded["ts_received"],
        }
    ).reset_index(drop=True)


def _shown(rows: pd.DataFrame) -> str:
    """A few rows for a message, e.g. ``signup plan=pro: 12 (raw 11)``."""
    items = [
        f"{r.name} {r.key}={r.value}: {int(r.actual):,} (raw {int(r.expected):,})"
        for r in rows.head(3).itertuples(index=False)
    ]
    return examples(items, len(rows))


def reconcile_raw_props(data: PropsInput) -> list[Finding]:
    """Per date: the view's events against raw, row by row; rows no counted event explains; visitors."""
    every = property_events(data.events)
    counted = every.loc[~every["is_bot"]]
    expected = counted.groupby(ROW).size().rename("expected")
    actual = data.rows.groupby(ROW)["events"].sum().rename("actual")
    both = pd.concat([expected, actual], axis=1).fillna(0).reset_index()
    bots = set(every.loc[every["is_bot"], ROW].itertuples(index=False, name=None))
    late = late_arrivals(counted.drop_duplicates("event_id"), data.watermark)
    findings: list[Finding] = []
    for day in data.dates:
        of_day = both[both["event_date"] == day]
        want, have = int(of_day["expected"].sum()), int(of_day["actual"].sum())
        differ = of_day[of_day["expected"] != of_day["actual"]]
        message = f"{PROPS}: {plural(have, 'property event')}, {RAW_PAGEVIEWS}: {want:,}" + (
            f" ({have - want:+,})" if have != want else ""
        )
        finding = Finding(RAW_VIEWS, "property events", PROPS, day, want, have, differ.empty, message)
        if not differ.empty:
            finding = _explain(finding, differ, late.get(day, 0), recorded_late_since(data.late_events, day), data)
        findings.append(finding)
        findings.append(_not_in_raw(day, of_day[(of_day["expected"] == 0) & (of_day["actual"] > 0)], bots))
        findings.append(_visitors(day, counted, data.rows))
    return findings


def _explain(f: Finding, differ: pd.DataFrame, arrived_late: int, recorded: int, data: PropsInput) -> Finding:
    rows = f"; {plural(len(differ), 'row')} differ{'s' if len(differ) == 1 else ''}: {_shown(differ)}"
    return explain_mismatch(
        f,
        arrived_late=arrived_late,
        recorded=recorded,
        watermark=data.watermark,
        noun="custom event",
        parts_differ="the sums agree but rows do not",
        detail=rows,
    )


def _not_in_raw(day: dt.date, extra: pd.DataFrame, bots: set[tuple[object, ...]]) -> Finding:
    if extra.empty:
        message = f"every row of {PROPS} counts non-bot custom events of {RAW_PAGEVIEWS}"
        return Finding(RAW_VIEWS, "property rows not in raw", PROPS, day, 0, 0, True, message)
    of_bots = sum(tuple(r) in bots for r in extra[ROW].itertuples(index=False, name=None))
    message = (
        f"{plural(len(extra), 'row')} of {PROPS} count{'s' if len(extra) == 1 else ''} no non-bot custom event"
        f" of {RAW_PAGEVIEWS} ({of_bots:,} carried by bots' events only, which reports never count): {_shown(extra)}"
    )
    hint = backfill_hint(day)
    return Finding(RAW_VIEWS, "property rows not in raw", PROPS, day, 0, len(extra), False, message, hint)


def _visitors(day: dt.date, counted: pd.DataFrame, rows: pd.DataFrame) -> Finding:
    exact = int(counted.loc[counted["event_date"] == day, "visitor_id"].nunique())
    sketches = rows.loc[rows["event_date"] == day, "visitors_sketch"]
    try:
        estimate = union_estimate(bytes(s) for s in sketches if s is not None)
    except ValueError as e:
        message = f"{PROPS} holds a visitors_sketch that cannot be read: {e}"
        return Finding(SKETCHES, "property visitors", PROPS, day, exact, None, False, message, backfill_hint(day))
    ok = estimate.lower <= exact <= estimate.upper
    message = (
        f"{PROPS} visitors ≈ {estimate.value:,.1f} (2-sigma bounds {estimate.lower:,.1f} .. {estimate.upper:,.1f}),"
        f" exact distinct visitors of its events in {RAW_PAGEVIEWS}: {exact:,}"
    )
    hint = "" if ok else backfill_hint(day)
    return Finding(SKETCHES, "property visitors", PROPS, day, exact, round(estimate.value), ok, message, hint)
