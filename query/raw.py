"""Drill-downs over raw events (raw.pageviews), exact, with DuckDB on the delta-rs dataset.

The aggregate tables hold one dimension per row, so a filter such as "country = DE" applied to
the top pages, or a funnel (an ordered sequence per visitor), cannot be answered from them.
These reads scan the raw events of the chosen dates instead: exact figures, slower than the
aggregates, labelled as drill-downs on the page. Visits are sessionised here with the same
rule as ``jobs/sessions.py`` (a new visit after ``spark.session_gap`` of inactivity); a visit
that spans the edge of the range is cut at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd
import pyarrow.dataset as ds

from query.aggregates import Range, Totals
from query.goals import Step
from tally.dimensions import AUDIENCE_DIMENSIONS, NONE_VALUE, RAW_DIMENSION_COLUMNS
from tally.sketches import Estimate

_EVENT_COLUMNS = "visitor_id, event_time, event_id, type, path, name, engagement_ms, load_ms, " + ", ".join(
    sorted(AUDIENCE_DIMENSIONS)
)
_VISIT_ATTRS = AUDIENCE_DIMENSIONS
# Filters a drill-down applies: the dashboard's URL key -> event column in raw.pageviews (and
# dimension in agg.traffic_*).
FILTERS: dict[str, str] = {
    key: RAW_DIMENSION_COLUMNS[key] for key in ("page", "source", "country", "device", "browser")
}
# The traffic dimensions, as raw columns ("event" is a custom event's name).
_DIMENSION_COLUMNS = RAW_DIMENSION_COLUMNS


@dataclass(frozen=True)
class RawQuery:
    """One site's non-bot raw events over a date range, narrowed by the page's filters."""

    raw: ds.Dataset
    site_id: str
    days: Range
    filters: Mapping[str, str]
    gap_ms: int
    exact = True

    def _connect(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.register("raw", self.raw)
        # A view cannot take prepared parameters: the site is a configured id and the dates are
        # dates, quoted as SQL literals here.
        site = self.site_id.replace("'", "''")
        con.execute(
            f"CREATE TEMP VIEW ev AS SELECT {_EVENT_COLUMNS} FROM raw WHERE site_id = '{site}' "
            f"AND event_date BETWEEN DATE '{self.days.start.isoformat()}' AND DATE '{self.days.end.isoformat()}' "
            "AND NOT coalesce(is_bot, false)"
        )
        return con

    def _event_filter(self) -> tuple[str, dict[str, Any]]:
        """SQL condition for events matching every filter (a page filter keeps that page's views)."""
        clauses: list[str] = ["true"]
        params: dict[str, Any] = {}
        for key, value in self.filters.items():
            column = FILTERS[key]
            clauses.append(f"coalesce({column}, '{NONE_VALUE}') = $f_{key}")
            params[f"f_{key}"] = value
        return " AND ".join(clauses), params

    def _visits_sql(self) -> tuple[str, dict[str, Any]]:
        """One row per visit that matches the filters: attributes from its first event."""
        # arg_min_null: a visit's attributes are its first event's, even when they are NULL (a
        # direct visit has no source); arg_min would skip to the first event that has one.
        firsts = ", ".join(f"arg_min_null({a}, (event_time, event_id)) AS {a}" for a in _VISIT_ATTRS)
        matches: list[str] = ["pageviews > 0"]
        params: dict[str, Any] = {"gap": self.gap_ms}
        for key, value in self.filters.items():
            params[f"f_{key}"] = value
            if key == "page":
                matches.append("list_contains(pages, $f_page)")
            else:
                matches.append(f"coalesce({FILTERS[key]}, '{NONE_VALUE}') = $f_{key}")
        sql = f"""
            WITH marked AS (
                SELECT *, CASE WHEN event_time - lag(event_time) OVER w < $gap THEN 0 ELSE 1 END AS starts
                FROM ev WINDOW w AS (PARTITION BY visitor_id ORDER BY event_time, event_id)
            ), numbered AS (
                SELECT *, sum(starts) OVER (PARTITION BY visitor_id ORDER BY event_time, event_id) AS visit
                FROM marked
            ), visits AS (
                SELECT visitor_id, visit, min(event_time) AS started, max(event_time) - min(event_time) AS duration_ms,
                       count(*) FILTER (WHERE type = 'pageview') AS pageviews,
                       list(path) FILTER (WHERE type = 'pageview') AS pages,
                       arg_min(path, (event_time, event_id)) FILTER (WHERE type = 'pageview') AS entry_page,
                       arg_max(path, (event_time, event_id)) FILTER (WHERE type = 'pageview') AS exit_page, {firsts}
                FROM numbered GROUP BY visitor_id, visit
            )
            SELECT * FROM visits WHERE {" AND ".join(matches)}
        """
        return sql, params

    def totals(self) -> Totals:
        """The KPIs, exact: ``visitors`` is a count of distinct visitor ids (bounds equal)."""
        condition, params = self._event_filter()
        with self._connect() as con:
            row = con.execute(
                f"""SELECT count(*) FILTER (WHERE type = 'pageview'), count(*) FILTER (WHERE type = 'event'),
                           count(DISTINCT visitor_id),
                           quantile_cont(engagement_ms, [0.5, 0.9, 0.99]) FILTER (WHERE type = 'engagement'),
                           quantile_cont(load_ms, [0.5, 0.9, 0.99]) FILTER (WHERE type = 'pageview')
                    FROM ev WHERE {condition}""",
                params,
            ).fetchone()
            visits_sql, visit_params = self._visits_sql()
            visit_row = con.execute(
                f"SELECT count(*), count(*) FILTER (WHERE pageviews = 1), coalesce(sum(duration_ms), 0), "
                f"coalesce(sum(pageviews), 0) FROM ({visits_sql})",
                visit_params,
            ).fetchone()
        assert row is not None and visit_row is not None
        pageviews, events, visitors, engagement, load = row
        return Totals(
            pageviews=int(pageviews),
            events=int(events),
            visitors=Estimate(float(visitors), float(visitors), float(visitors)),
            visits=int(visit_row[0]),
            bounces=int(visit_row[1]),
            duration_ms=int(visit_row[2]),
            visit_pageviews=int(visit_row[3]),
            engagement_ms=tuple(engagement) if engagement else None,
            load_ms=tuple(load) if load else None,
        )

    def series(self, grain: str) -> pd.DataFrame:
        """Page views, visitors and visits per hour or day (every bucket present)."""
        condition, params = self._event_filter()
        trunc = "hour" if grain == "hour" else "day"
        with self._connect() as con:
            events = con.execute(
                f"""SELECT date_trunc('{trunc}', to_timestamp(event_time / 1000)) AS time,
                           count(*) FILTER (WHERE type = 'pageview') AS pageviews,
                           count(DISTINCT visitor_id) AS visitors
                    FROM ev WHERE {condition} GROUP BY 1""",
                params,
            ).df()
            visits_sql, visit_params = self._visits_sql()
            visits = con.execute(
                f"SELECT date_trunc('{trunc}', to_timestamp(started / 1000)) AS time, count(*) AS visits "
                f"FROM ({visits_sql}) GROUP BY 1",
                visit_params,
            ).df()
        freq = "h" if grain == "hour" else "D"
        start, end = pd.Timestamp(self.days.start, tz="UTC"), pd.Timestamp(self.days.end, tz="UTC")
        buckets = pd.date_range(start, end + pd.Timedelta(days=1), freq=freq, inclusive="left")
        frame = pd.DataFrame(index=buckets)
        for source, column in ((events, "pageviews"), (events, "visitors"), (visits, "visits")):
            values = source.assign(time=pd.to_datetime(source["time"], utc=True)).set_index("time")[column]
            frame[column] = values.reindex(buckets).fillna(0).astype(int)
        frame["visitors_bound"] = 0.0  # distinct ids: exact
        return frame.rename_axis("time").reset_index()

    def top(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        """Top values of an event dimension (page, source, …, or custom event name), exact."""
        column = _DIMENSION_COLUMNS.get(dimension)
        assert column, f"no raw column for dimension {dimension!r}"
        condition, params = self._event_filter()
        if dimension == "event":
            condition += " AND type = 'event'"
        order = "events" if dimension == "event" else "pageviews"
        with self._connect() as con:
            return con.execute(
                f"""SELECT coalesce({column}, '{NONE_VALUE}') AS value,
                           count(*) FILTER (WHERE type = 'pageview') AS pageviews,
                           count(*) FILTER (WHERE type = 'event') AS events,
                           count(DISTINCT visitor_id) AS visitors, 0.0 AS visitors_bound
                    FROM ev WHERE {condition} GROUP BY 1 ORDER BY {order} DESC, value LIMIT {int(limit)}""",
                params,
            ).df()

    def top_visits(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        """Top entry/exit pages (or visit sources) of the matching visits, exact."""
        assert dimension in ("entry_page", "exit_page", *_VISIT_ATTRS), f"not a visit dimension: {dimension!r}"
        visits_sql, params = self._visits_sql()
        with self._connect() as con:
            return con.execute(
                f"""SELECT coalesce({dimension}, '{NONE_VALUE}') AS value, count(*) AS visits,
                           avg(CASE WHEN pageviews = 1 THEN 1.0 ELSE 0.0 END) AS bounce_rate,
                           avg(duration_ms) / 1000 AS avg_duration_s
                    FROM ({visits_sql}) GROUP BY 1 ORDER BY visits DESC, value LIMIT {int(limit)}""",
                params,
            ).df()

    def goal(self, step: Step) -> Estimate:
        """Visitors who viewed the page or sent the custom event (exact; bounds equal)."""
        condition, params = self._event_filter()
        match = "type = 'pageview' AND path = $v" if step.kind == "page" else "type = 'event' AND name = $v"
        with self._connect() as con:
            row = con.execute(
                f"SELECT count(DISTINCT visitor_id) FROM ev WHERE {condition} AND {match}", {**params, "v": step.value}
            ).fetchone()
        count = float(row[0]) if row else 0.0
        return Estimate(count, count, count)

    def funnel(self, steps: tuple[Step, ...]) -> pd.DataFrame:
        """Visitors who did step 1, then step 2 later, and so on (within the range), exact."""
        condition, params = self._event_filter()
        reached: list[int] = []
        with self._connect() as con:
            con.execute(
                "CREATE TEMP TABLE matching AS SELECT visitor_id, event_time, type, path, name "
                f"FROM ev WHERE {condition}",
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
