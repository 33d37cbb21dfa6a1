"""The traffic sink's settled minutes: rows moved to files of their own stay the same, and a later MERGE
of the open minutes no longer copies them. Real Spark and Delta, read back with delta-rs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from jobs.batch_writers import settle
from jobs.delta_sink import rewrite_apart, straddling_from, upsert
from tally.settings import Settings
from tally.tables import TRAFFIC_1M
from tests.integration.views_support import at_home

DAY = dt.datetime(2026, 3, 20)
ROWS_PER_MINUTE = 6
SCHEMA = T.StructType(
    [
        T.StructField("site_id", T.StringType()),
        T.StructField("window_start", T.TimestampType()),
        T.StructField("window_end", T.TimestampType()),
        T.StructField("dimension", T.StringType()),
        T.StructField("value", T.StringType()),
        T.StructField("pageviews", T.LongType()),
        T.StructField("event_date", T.DateType()),
    ]
)


def minutes(first: int, last: int, pageviews: int = 1) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for m in range(first, last + 1):
        start = DAY + dt.timedelta(minutes=m)
        for i in range(ROWS_PER_MINUTE):
            out.append(("a.test", start, start + dt.timedelta(minutes=1), "page", f"/p{i}", pageviews, DAY.date()))
    return out


def table_rows(uri: str) -> list[dict[str, object]]:
    rows = DeltaTable(uri).to_pyarrow_table(columns=["window_start", "value", "pageviews"])
    ordered: list[dict[str, object]] = rows.sort_by([("window_start", "ascending"), ("value", "ascending")]).to_pylist()
    return ordered


def file_minutes(uri: str) -> list[tuple[dt.datetime, dt.datetime]]:
    """The first and last window_start of each file of the table's current version."""
    spans = []
    for path in DeltaTable(uri).file_uris():
        starts = pq.read_table(path, columns=["window_start"]).column("window_start")
        spans.append((pc.min(starts).as_py(), pc.max(starts).as_py()))
    return spans


def test_settled_rows_stay_and_later_merges_leave_their_file_alone(
    settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    iso = at_home(settings, tmp_path)
    uri = iso.table_uri(TRAFFIC_1M.table)
    # One MERGE writes an hour of minutes: one file for the whole date, as the sink's MERGEs leave it.
    upsert(spark.createDataFrame(minutes(0, 59), SCHEMA), TRAFFIC_1M, iso, dates=[DAY.date()])
    before = table_rows(uri)
    assert len(file_minutes(uri)) == 1

    settled_end = DAY + dt.timedelta(minutes=45)
    assert straddling_from(iso, TRAFFIC_1M, day=DAY.date(), column="window_start", at=settled_end) == DAY
    rewrite_apart(spark, TRAFFIC_1M, iso, column="window_start", lo=DAY, hi=settled_end)
    assert table_rows(uri) == before
    spans = file_minutes(uri)
    assert straddling_from(iso, TRAFFIC_1M, day=DAY.date(), column="window_start", at=settled_end) is None
    assert all(last < settled_end or first >= settled_end for first, last in spans), spans

    # Done again (after a restart), the rows are still the same.
    rewrite_apart(spark, TRAFFIC_1M, iso, column="window_start", lo=DAY, hi=settled_end)
    assert table_rows(uri) == before

    # The open minutes' MERGE: minute 59 again with new counts, and minute 60. It copies the other
    # rows of the open minutes' file only (45-59), not the settled ones.
    window = ("window_start", DAY + dt.timedelta(minutes=59), DAY + dt.timedelta(minutes=60))
    batch = spark.createDataFrame(minutes(59, 59, pageviews=5) + minutes(60, 60), SCHEMA)
    upsert(batch, TRAFFIC_1M, iso, dates=[DAY.date()], within=window)
    merge = DeltaTable(uri).history(1)[0]
    assert merge["operation"] == "MERGE"
    assert int(merge["operationMetrics"]["numTargetRowsCopied"]) == 14 * ROWS_PER_MINUTE  # minutes 45-58
    after = pa.Table.from_pylist(table_rows(uri))
    assert after.num_rows == len(before) + ROWS_PER_MINUTE
    assert pc.sum(after["pageviews"]).as_py() == len(before) + 4 * ROWS_PER_MINUTE + ROWS_PER_MINUTE


def test_the_sink_moves_only_what_straddles_a_closed_span(
    settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    iso = at_home(settings, tmp_path)
    uri = iso.table_uri(TRAFFIC_1M.table)
    upsert(spark.createDataFrame(minutes(0, 59), SCHEMA), TRAFFIC_1M, iso, dates=[DAY.date()])
    before = table_rows(uri)
    # Newest minute 00:59: with the 10-minute watermark the spans up to 00:45 have closed.
    newest = DAY + dt.timedelta(minutes=59)
    assert settle(spark, iso, newest, None) == DAY + dt.timedelta(minutes=45)
    assert table_rows(uri) == before
    moved = DeltaTable(uri).history(1)[0]
    assert moved["operation"] == "WRITE"
    assert (
        straddling_from(iso, TRAFFIC_1M, day=DAY.date(), column="window_start", at=DAY + dt.timedelta(minutes=45))
        is None
    )
    # A restarted job (nothing settled in its memory) finds nothing straddling, and writes nothing.
    version = DeltaTable(uri).version()
    assert settle(spark, iso, newest, None) == DAY + dt.timedelta(minutes=45)
    assert DeltaTable(uri).version() == version
    # Nothing new closed: nothing happens.
    assert settle(spark, iso, newest, DAY + dt.timedelta(minutes=45)) == DAY + dt.timedelta(minutes=45)
    assert DeltaTable(uri).version() == version
