"""Helpers for the view tests: an isolated topic + warehouse, producing events, reading views."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from deltalake import DeltaTable, write_deltalake

from simulator.synthetic import synthetic_events
from tally.schema import FIELDS
from tally.settings import Settings
from tally.sketches import digest_quantiles, union_estimate

# The shared report data set (the session fixture ``march``): a site's synthetic traffic of four
# days, every view backfilled once for the dashboard, API and notify tests.
MARCH_SITE = "demo.tally.local"
MARCH_FIRST, MARCH_LAST = dt.date(2026, 3, 1), dt.date(2026, 3, 4)


def isolated_settings(settings: Settings, home: Path) -> Settings:
    """The session's broker, but a fresh topic, warehouse and home: no other test's events."""
    topic = f"views-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": settings.kafka.servers})
    for future in admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)]).values():
        future.result(30)
    return dataclasses.replace(
        settings,
        home=str(home),
        kafka=dataclasses.replace(settings.kafka, pageviews_topic=topic),
        warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse")),
    )


def at_home(settings: Settings, home: Path) -> Settings:
    """``settings`` with ``home`` as the home and ``home/warehouse`` as the warehouse."""
    return dataclasses.replace(
        settings, home=str(home), warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse"))
    )


def march_events() -> pa.Table:
    """The shared data set's raw events: 500 visits starting in the first three of its days."""
    start = dt.datetime.combine(MARCH_FIRST, dt.time(), dt.UTC)
    return synthetic_events(visits=500, start=start, span=dt.timedelta(days=3), site_id=MARCH_SITE, seed=11)


def table_versions(settings: Settings) -> dict[str, int]:
    """The Delta version of every table in the warehouse, by its folder (``raw/pageviews`` ...)."""
    root = Path(settings.warehouse_uri)
    tables = [log.parent for log in root.glob("*/*/_delta_log")]
    return {str(table.relative_to(root)): DeltaTable(str(table)).version() for table in tables}


def copy_warehouse(source: Settings, home: Path) -> Settings:
    """A private copy of ``source``'s tables under ``home``, for a test that writes (Delta logs
    hold paths relative to each table, so a copied folder is a whole table)."""
    shutil.copytree(Path(source.warehouse_uri), home / "warehouse")
    return at_home(source, home)


def produce(settings: Settings, rows: list[dict[str, Any]]) -> None:
    """Send events to the pageviews topic as ingest would: JSON values keyed by visitor_id."""
    producer = Producer({"bootstrap.servers": settings.kafka.servers, "linger.ms": 20})
    for row in rows:
        event = {name: row.get(name) for name in FIELDS}
        event["props"] = dict(event["props"] or {})  # Arrow gives a map as (key, value) pairs; ingest sends an object
        producer.produce(
            settings.kafka.pageviews_topic, key=row["visitor_id"].encode(), value=json.dumps(event).encode()
        )
    assert producer.flush(30) == 0, "events not delivered to Kafka"


def write_raw(settings: Settings, table: pa.Table) -> None:
    """Append events to raw.pageviews as the archiver would."""
    write_deltalake(settings.table_uri("raw.pageviews"), table, mode="append", partition_by=["event_date"])


def view(settings: Settings, name: str) -> pd.DataFrame:
    """A view's table read with delta-rs (an independent reader), sketches decoded to numbers."""
    frame = DeltaTable(settings.table_uri(name)).to_pandas()
    if "visitors_sketch" in frame:
        frame["visitors"] = [union_estimate([s]).value for s in frame.pop("visitors_sketch")]
    for column in ("engagement_ms_digest", "load_ms_digest"):
        if column in frame:
            frame[column.removesuffix("_digest") + "_p50_p90_p99"] = [
                tuple(digest_quantiles(d, [0.5, 0.9, 0.99])) if d is not None else None for d in frame.pop(column)
            ]
    return frame


def keyed(frame: pd.DataFrame, keys: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Rows by key, for comparisons that name the differing row."""
    # Missing values as None, so that two missing values compare equal (NaN != NaN).
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return {tuple(r[k] for k in keys): {k: v for k, v in r.items() if k not in keys} for r in rows}


def assert_same_rows(stream: pd.DataFrame, batch: pd.DataFrame, keys: tuple[str, ...], table: str) -> None:
    """Stream-computed and backfill-computed rows are equal: same keys, same values."""
    by_stream, by_batch = keyed(stream, keys), keyed(batch, keys)
    assert by_stream, f"the stream wrote no rows to {table}"
    one_sided = set(by_batch) ^ set(by_stream)
    assert not one_sided, f"{table}: {len(one_sided)} keys only on one side, e.g. {sorted(one_sided)[:3]}"
    differing = [k for k in by_stream if by_stream[k] != by_batch[k]]
    if differing:
        first = differing[0]
        stream_row, batch_row = by_stream[first], by_batch[first]
        columns = {c: (stream_row[c], batch_row.get(c)) for c in stream_row if stream_row[c] != batch_row.get(c)}
        raise AssertionError(f"{table}: {len(differing)} rows differ; {first}: (stream, backfill) {columns}")
