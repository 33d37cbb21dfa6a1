"""A site's raw events of a range (``raw.pageviews``) as Parquet files in a ZIP, one file per local
day of the site (``tally export --raw``, the dashboard's sidebar): the events as the log stores
them, for keeping a copy or reading them elsewhere (DuckDB, pandas, Spark).

Only the fields an event is stored with, less what is Tally's own bookkeeping: the archiver's Kafka
partition and offset, and ``client_hash`` (the salted hash of the client's address that the rate
limit blocks by) are left out. No IP address is stored, so none is exported. Bots' events are kept
(``is_bot`` says which), since they are in the log; the figures leave them out.

A day is read and written before the next is read, so an export of years holds one day in memory.
"""

from __future__ import annotations

import datetime as dt
import zipfile
from collections.abc import Callable, Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from query.site_time import DAY, local_midnight
from tally.storage import text_is
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA

# Kept out of the export: the archiver's place in Kafka, and the rate limit's hash of the client's address.
LEFT_OUT = ("kafka_partition", "kafka_offset", "client_hash")
COLUMNS = tuple(name for name in RAW_PAGEVIEWS_SCHEMA.names if name not in LEFT_OUT)


def file_name(site_id: str, day: dt.date) -> str:
    """A day's file in the ZIP: ``raw_pageviews_<site>_<YYYYMMDD>.parquet``."""
    return f"raw_pageviews_{site_id}_{day:%Y%m%d}.parquet"


def days(start: dt.date, end: dt.date) -> Iterator[dt.date]:
    day = start
    while day <= end:
        yield day
        day += dt.timedelta(days=1)


def day_events(raw: ds.Dataset, site_id: str, day: dt.date, timezone: str) -> pa.Table:
    """The site's events of one local day, in event time order, in :data:`COLUMNS`."""
    begin, end = local_midnight(day, timezone), local_midnight(day + dt.timedelta(days=1), timezone)
    stored = (begin - DAY).date(), (end + DAY).date()  # event_date is the UTC day: every one the local day touches
    where = (
        text_is("site_id", site_id)
        & (ds.field("event_date") >= pa.scalar(stored[0], pa.date32()))
        & (ds.field("event_date") <= pa.scalar(stored[1], pa.date32()))
        & (ds.field("event_time") >= int(begin.timestamp() * 1000))
        & (ds.field("event_time") < int(end.timestamp() * 1000))
    )
    present = [c for c in COLUMNS if c in raw.schema.names]
    events = raw.to_table(columns=present, filter=where)
    return events.take(pc.sort_indices(events, [("event_time", "ascending"), ("event_id", "ascending")]))


def write_zip(
    out: BinaryIO,
    raw: ds.Dataset,
    site_id: str,
    start: dt.date,
    end: dt.date,
    timezone: str,
    progress: Callable[[str, int], None] = lambda name, rows: None,
) -> int:
    """One Parquet file per local day from ``start`` to ``end`` (a day without events too, with no
    rows, so the files say which days were asked); the events written."""
    written = 0
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for day in days(start, end):
            events = day_events(raw, site_id, day, timezone)
            name = file_name(site_id, day)
            with archive.open(name, "w", force_zip64=True) as member:
                pq.write_table(events, member, compression="zstd")
            written += events.num_rows
            progress(name, events.num_rows)
    return written
