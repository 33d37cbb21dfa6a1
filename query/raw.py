"""Drill-downs over raw events (raw.pageviews), exact: the dashboard's report when filters are set.

The aggregate tables hold one dimension per row, so a filter such as "country = DE" applied to
the top pages, or a funnel (an ordered sequence per visitor), cannot be answered from them.
These reads scan the raw events of the chosen dates instead: exact figures, slower than the
aggregates, labelled as drill-downs on the page. Every figure but the funnel is computed by
:class:`query.exact.ExactQuery`, the code that answers the Stats API's exact queries, so the
dashboard and the API never count one thing two ways. Visits are sessionised there with the
rule of ``jobs/sessions.py``; a visit that spans the edge of the range is cut at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd
import pyarrow.dataset as ds

from query.aggregates import Range, Totals
from query.exact import ExactQuery, goal_label
from query.goals import Step
from query.raw_events import open_events, within
from query.site_time import UTC, LocalDays, is_utc
from query.site_time import buckets as site_buckets
from query.spec import GOAL, PERCENTILE_METRICS, PROPS_PREFIX, Filter, Query
from tally.dimensions import AUDIENCE_DIMENSIONS, EVENT, FILTERS, NONE_VALUE
from tally.sketches import Estimate

_EVENT_COLUMNS = "visitor_id, event_time, event_id, type, path, name, engagement_ms, load_ms, " + ", ".join(
    sorted(AUDIENCE_DIMENSIONS)
)
# The dashboard's words for dimensions and filters, in the Stats API's (query.spec.DIMENSIONS).
_API_AUDIENCE = {name: f"visit:{'utm_campaign' if name == 'campaign' else name}" for name in AUDIENCE_DIMENSIONS}
TOP_DIMENSIONS = {"page": "event:page", EVENT: "event:name", **_API_AUDIENCE}
VISIT_DIMENSIONS = {"entry_page": "visit:entry_page", "exit_page": "visit:exit_page", **_API_AUDIENCE}
API_FILTERS = {key: TOP_DIMENSIONS[key] for key in FILTERS}


@dataclass(frozen=True)
class RawQuery:
    """One site's non-bot raw events over a date range, narrowed by the page's filters."""

    raw: ds.Dataset
    site_id: str
    days: Range
    filters: Mapping[str, str]
    gap_ms: int
    timezone: str = UTC  # the zone ``days`` are the site's local days in
    snapshot: tuple[str, int] | None = None  # the table and version ``raw`` reads (query.scans.PreparedScan)
    exact = True

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """DuckDB with ``ev``: the events of the site's local days (their UTC instants)."""
        if is_utc(self.timezone):
            return open_events(self.raw, self.site_id, self.days, _EVENT_COLUMNS)
        local = LocalDays(self.days.start, self.days.end, self.timezone)
        con = open_events(self.raw, self.site_id, Range(*local.utc_dates), _EVENT_COLUMNS)
        con.execute(f"CREATE TEMP VIEW ev_local AS SELECT * FROM ev WHERE {within(local.instants)}")
        return con

    def _exact(self, goals: tuple[Step, ...] = ()) -> ExactQuery:
        return ExactQuery(self.raw, self.site_id, self.gap_ms, goals, snapshot=self.snapshot)

    def _measure(
        self, dimensions: tuple[str, ...], metrics: tuple[str, ...], extra: tuple[Filter, ...] = (), **kw: Any
    ) -> list[dict[str, Any]]:
        """Rows of the exact engine (:mod:`query.exact`): the same code the Stats API answers with."""
        filters = tuple(Filter("is", dimension=API_FILTERS[k], values=(v,)) for k, v in self.filters.items())
        query = Query(
            self.site_id,
            self.days.start,
            self.days.end,
            metrics,
            dimensions=dimensions,
            filters=filters + extra,
            timezone=self.timezone,
        )
        return self._exact(**kw).measure(query)

    def totals(self) -> Totals:
        """The KPIs, exact: ``visitors`` is a count of distinct visitor ids (bounds equal)."""
        rows = self._measure((), ("visitors", "visits", *PERCENTILE_METRICS))
        m = rows[0]["metrics"] if rows else {}
        visitors = float(m.get("visitors", 0))
        engagement = tuple(m[f"engagement_p{q}"] for q in (50, 90, 99))
        load = tuple(m[f"load_p{q}"] for q in (50, 90, 99))
        return Totals(
            pageviews=int(m.get("pageviews", 0)),
            events=int(m.get("events", 0)),
            visitors=Estimate(visitors, visitors, visitors),
            visits=int(m.get("visits", 0)),
            bounces=int(m.get("bounces", 0)),
            duration_ms=int(m.get("duration_ms", 0)),
            visit_pageviews=int(m.get("visit_pageviews", 0)),
            engagement_ms=engagement if m and engagement[0] is not None else None,
            load_ms=load if m and load[0] is not None else None,
        )

    def series(self, grain: str) -> pd.DataFrame:
        """Page views, visitors and visits per hour or day (every bucket present)."""
        grain = "hour" if grain == "hour" else "day"
        rows = self._measure((f"time:{grain}",), ("visitors", "visits"))
        if is_utc(self.timezone):
            freq = "h" if grain == "hour" else "D"
            start, end = pd.Timestamp(self.days.start, tz="UTC"), pd.Timestamp(self.days.end, tz="UTC")
            buckets = pd.date_range(start, end + pd.Timedelta(days=1), freq=freq, inclusive="left")
            found = {pd.Timestamp(r["dimensions"][0], tz="UTC"): r["metrics"] for r in rows}
        else:  # the site's local dates or hours, as the time buckets of the zoned views (query.zoned)
            local = LocalDays(self.days.start, self.days.end, self.timezone)
            buckets = pd.DatetimeIndex(
                [
                    pd.Timestamp(b).tz_localize(self.timezone, ambiguous=True, nonexistent="shift_forward")
                    for b in site_buckets(local, grain)
                ]
            )
            found = {
                pd.Timestamp(r["dimensions"][0]).tz_localize(
                    self.timezone, ambiguous=True, nonexistent="shift_forward"
                ): r["metrics"]
                for r in rows
            }
        frame = pd.DataFrame(index=buckets)
        for column in ("pageviews", "visitors", "visits"):
            frame[column] = [int(found.get(b, {}).get(column, 0)) for b in buckets]
        frame["visitors_bound"] = 0.0  # distinct ids: exact
        return frame.rename_axis("time").reset_index()

    def top(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        """Top values of an event dimension (page, source, …, or custom event name), exact."""
        assert dimension in TOP_DIMENSIONS, f"no raw column for dimension {dimension!r}"
        custom = (Filter("is_not", dimension="event:name", values=("pageview",)),) if dimension == EVENT else ()
        rows = self._measure((TOP_DIMENSIONS[dimension],), ("visitors",), custom)
        frame = pd.DataFrame(
            [
                {"value": r["dimensions"][0], **{k: r["metrics"][k] for k in ("pageviews", "events", "visitors")}}
                for r in rows
            ],
            columns=["value", "pageviews", "events", "visitors"],
        )
        frame["visitors_bound"] = 0.0
        order = "events" if dimension == EVENT else "pageviews"
        return frame.sort_values([order, "value"], ascending=[False, True]).head(limit).reset_index(drop=True)

    def top_visits(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        """Top entry/exit pages (or visit sources) of the matching visits, exact."""
        assert dimension in ("entry_page", "exit_page", *AUDIENCE_DIMENSIONS), f"not a visit dimension: {dimension!r}"
        rows = self._measure((VISIT_DIMENSIONS[dimension],), ("visits",))
        records = []
        for r in rows:
            m = r["metrics"]
            records.append(
                {
                    "value": r["dimensions"][0],
                    "visits": m["visits"],
                    "bounce_rate": m["bounces"] / m["visits"],
                    "avg_duration_s": m["duration_ms"] / m["visits"] / 1000,
                }
            )
        frame = pd.DataFrame(records, columns=["value", "visits", "bounce_rate", "avg_duration_s"])
        return frame.sort_values(["visits", "value"], ascending=[False, True]).head(limit).reset_index(drop=True)

    def props(self, key: str, limit: int = 10, name: str | None = None) -> pd.DataFrame:
        """Values of a custom property (of one event name, or of every custom event), exact."""
        narrowed = Filter("is", dimension="event:name", values=(name,)) if name else None
        custom = narrowed or Filter("is_not", dimension="event:name", values=("pageview",))
        rows = self._measure((f"{PROPS_PREFIX}{key}",), ("visitors",), (custom,))
        frame = pd.DataFrame(
            [
                {"value": r["dimensions"][0], "events": r["metrics"]["events"], "visitors": r["metrics"]["visitors"]}
                for r in rows
            ],
            columns=["value", "events", "visitors"],
        )
        frame["visitors_bound"] = 0.0
        return frame.sort_values(["events", "value"], ascending=[False, True]).head(limit).reset_index(drop=True)

    def goal(self, step: Step) -> Estimate:
        """Visitors who viewed the page or sent the custom event (exact; bounds equal)."""
        reached = Filter("is", dimension=GOAL, values=(goal_label(step),))
        rows = self._measure((), ("visitors",), (reached,), goals=(step,))
        count = float(rows[0]["metrics"]["visitors"]) if rows else 0.0
        return Estimate(count, count, count)

    def _event_filter(self) -> tuple[str, dict[str, Any]]:
        """SQL condition for events matching every filter (a page filter keeps that page's views)."""
        clauses: list[str] = ["true"]
        params: dict[str, Any] = {}
        for key, value in self.filters.items():
            column = FILTERS[key]
            clauses.append(f"coalesce({column}, '{NONE_VALUE}') = $f_{key}")
            params[f"f_{key}"] = value
        return " AND ".join(clauses), params

    def funnel(self, steps: tuple[Step, ...]) -> pd.DataFrame:
        """Visitors who did step 1, then step 2 later, and so on (within the range), exact."""
        condition, params = self._event_filter()
        reached: list[int] = []
        with self._connect() as con:
            con.execute(
                "CREATE TEMP TABLE matching AS SELECT visitor_id, event_time, type, path, name "
                f"FROM {'ev' if is_utc(self.timezone) else 'ev_local'} WHERE {condition}",
                params,
            )
            con.execute("CREATE TEMP TABLE progress AS SELECT DISTINCT visitor_id, -1::BIGINT AS at FROM matching")
            for i, step in enumerate(steps):
                match = "type = 'pageview' AND path = $v" if step.kind == "page" else "type = 'event' AND name = $v"
                con.execute(
                    f"""CREATE OR REPLACE TEMP TABLE progress AS
                        SELECT m.visitor_id, min(m.event_time) AS at FROM matching m JOIN progress p USING (visitor_id)
                        WHERE {match} AND m.event_time {">=" if i == 0 else ">"} p.at GROUP BY m.visitor_id""",
                    {"v": step.value},
                )
                row = con.execute("SELECT count(*) FROM progress").fetchone()
                reached.append(int(row[0]) if row else 0)
        frame = pd.DataFrame({"step": [str(s) for s in steps], "visitors": reached})
        first = reached[0] if reached else 0
        frame["of_first_step"] = frame["visitors"] / first if first else 0.0
        frame["dropped"] = frame["visitors"].shift(1, fill_value=first) - frame["visitors"]
        return frame
