"""The data-health panel's reads: freshness, archive lag, late events, quality and audit results."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pandas as pd
import pyarrow.compute as pc

from dashboard.queries import Aggregates, Range
from quality.store import read_audits, read_results
from tally.settings import Settings


@dataclass(frozen=True)
class Health:
    last_window_end: dt.datetime | None  # newest 1-minute window with data for the site
    archive_lag: int | None  # messages in Kafka not yet in raw; None = broker unreachable
    late_events: int  # events dropped by the streaming views as late, in the range (a backfill adds them)
    checks: pd.DataFrame  # newest result per table and check: table, partition, check, success
    audit: pd.DataFrame  # the newest audit run's comparisons


def last_window_end(agg: Aggregates, site_id: str, today: dt.date) -> dt.datetime | None:
    rows = agg.rows(
        "agg.traffic_1m",
        site_id,
        Range(today - dt.timedelta(days=1), today),
        ["window_end"],
        pc.field("dimension") == "all",
    )
    if rows.empty:
        return None
    newest: dt.datetime = pd.to_datetime(rows["window_end"], utc=True).max().to_pydatetime()
    return newest


def late_events(agg: Aggregates, days: Range) -> int:
    """Late events recorded by every streaming query over the range (not per site: the job counts them)."""
    dataset = agg.dataset("agg.late_events")
    if dataset is None:
        return 0
    condition = (pc.field("event_date") >= days.start) & (pc.field("event_date") <= days.end)
    rows = dataset.to_table(columns=["late_rows"], filter=condition)
    return int(pc.sum(rows["late_rows"]).as_py() or 0)


def archive_lag_total(settings: Settings) -> int | None:
    from archiver.lag import archive_lag
    from tally.broker import broker_answers

    if not broker_answers(settings.kafka.servers):
        return None
    return sum(archive_lag(settings).values())


def latest_checks(settings: Settings) -> pd.DataFrame:
    results = read_results(settings)
    if results.empty:
        return pd.DataFrame(columns=["table_name", "partition_date", "check", "success", "checked_at"])
    newest = results.sort_values("checked_at").groupby(["table_name", "partition_date", "check"]).tail(1)
    failing_first = newest.sort_values(["success", "checked_at"], ascending=[True, False])
    return failing_first[["table_name", "partition_date", "check", "success", "checked_at"]].reset_index(drop=True)


def latest_audit(settings: Settings, site_id: str) -> pd.DataFrame:
    audits = read_audits(settings)
    if audits.empty:
        return pd.DataFrame(columns=["audited_at", "check", "subject", "expected", "actual", "success", "message"])
    newest = audits[audits["run_id"] == audits.sort_values("audited_at")["run_id"].iloc[-1]]
    mine = newest[(newest["site_id"] == site_id) | newest["site_id"].isna() | (newest["site_id"] == "")]
    columns = ["audited_at", "partition_date", "check", "subject", "expected", "actual", "success", "message"]
    return mine.sort_values(["success", "check"])[columns].reset_index(drop=True)
