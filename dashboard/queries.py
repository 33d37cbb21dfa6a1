"""Reads for the dashboard panels, with delta-rs (no JVM): small aggregate tables only."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from tally.settings import Settings


def pageviews_per_minute(settings: Settings, site_id: str, since: dt.datetime) -> pd.DataFrame:
    """Page views per page and minute (agg.traffic_1m) for one site since ``since`` (UTC)."""
    try:
        table = DeltaTable(settings.table_uri("agg.traffic_1m"))
    except TableNotFoundError:
        return pd.DataFrame(columns=["window_start", "page", "pageviews"])
    dataset = table.to_pyarrow_dataset()
    since_utc = pd.Timestamp(since).tz_convert("UTC") if since.tzinfo else pd.Timestamp(since, tz="UTC")
    filtered = (
        dataset.to_table(
            columns=["window_start", "value", "pageviews"],
            filter=(pc.field("site_id") == site_id)
            & (pc.field("dimension") == "page")
            & (pc.field("event_date") >= since_utc.date()),
        )
        .to_pandas()
        .rename(columns={"value": "page"})
    )
    filtered["window_start"] = pd.to_datetime(filtered["window_start"], utc=True)
    return filtered[filtered["window_start"] >= since_utc]
