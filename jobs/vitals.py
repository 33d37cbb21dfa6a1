"""Core Web Vitals and scroll depth view: ``agg.vitals_1h``, per site, UTC hour, dimension and value.

Only non-bot beacons count: ``vitals`` events (one per measured page view, ``tally/vitals.py``)
and ``engagement`` events that carry a scroll depth. Per 1-hour tumbling window and dimension
(``all``, ``page``, ``device``) a row holds:

- ``measured``: the vitals events;
- per vital: a t-digest of its values (``lcp_digest`` …) and the exact count of values in each of
  Google's bands (``lcp_good``, ``lcp_needs_improvement``, ``lcp_poor``). A beacon may lack a
  metric (INP needs an interaction), so a vital's bands add up to at most ``measured``;
- ``scroll_depth_sum`` and ``scroll_depth_count`` over the beacons that carry a scroll depth.

As for traffic, ``vitals_hours`` keeps value lists (what the streaming state holds between
micro-batches, in update mode) and ``with_digests`` turns them into t-digests before writing, so
the streaming job and the backfill write the same bytes.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.sketch_columns import digest_of_values
from jobs.traffic import by_dimension
from jobs.views import event_date, reportable
from tally.vitals import (
    BANDS,
    MEASURED_COLUMN,
    SCROLL_COUNT_COLUMN,
    SCROLL_DEPTH_COLUMN,
    SCROLL_SUM_COLUMN,
    VITALS,
    VITALS_DIMENSIONS,
    VITALS_TYPE,
    Vital,
)

ENGAGEMENT_TYPE = "engagement"  # Plausible's engagement event; it may carry a scroll depth


def is_vitals() -> Column:
    return F.col("type") == VITALS_TYPE


def vital_band(vital: Vital) -> Column:
    """Google's band of an event's value of ``vital`` (as ``Vital.band``); null where it was not measured."""
    value = F.col(vital.column)
    good, needs_improvement, poor = BANDS
    return (
        F.when(value <= F.lit(vital.good_max), F.lit(good))
        .when(value > F.lit(vital.poor_above), F.lit(poor))
        .when(value.isNotNull(), F.lit(needs_improvement))
    )


def values_column(vital: Vital) -> str:
    """The value list of ``vital`` in ``vitals_hours`` rows (state, not stored)."""
    return f"{vital.name}_values"


def vitals_beacons(events: DataFrame) -> DataFrame:
    """The events the view counts: non-bot vitals events, and engagement events with a scroll depth."""
    carries_scroll = (F.col("type") == ENGAGEMENT_TYPE) & F.col(SCROLL_DEPTH_COLUMN).isNotNull()
    return reportable(events).where(is_vitals() | carries_scroll)


def vitals_hours(events: DataFrame) -> DataFrame:
    """1-hour tumbling windows per site × dimension: counts, band counts, and value lists for the digests."""
    window = F.window("event_ts", "1 hour")
    measures = [F.count_if(is_vitals()).alias(MEASURED_COLUMN)]
    for vital in VITALS:
        measures.append(F.collect_list(F.when(is_vitals(), F.col(vital.column))).alias(values_column(vital)))
        band = vital_band(vital)
        measures += [F.count_if(is_vitals() & (band == F.lit(b))).alias(vital.band_column(b)) for b in BANDS]
    scroll = F.col(SCROLL_DEPTH_COLUMN)
    measures += [
        F.coalesce(F.sum(scroll), F.lit(0)).cast("bigint").alias(SCROLL_SUM_COLUMN),
        F.count(scroll).alias(SCROLL_COUNT_COLUMN),
    ]
    # Beacons are never custom events, so traffic's explode yields exactly `all`, `page` and `device`.
    return (
        by_dimension(vitals_beacons(events), VITALS_DIMENSIONS)
        .groupBy(F.col("site_id"), window.alias("w"), F.col("dimension"), F.col("value"))
        .agg(*measures)
        .select(
            "site_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "dimension",
            "value",
            MEASURED_COLUMN,
            *(values_column(v) for v in VITALS),
            *(v.band_column(b) for v in VITALS for b in BANDS),
            SCROLL_SUM_COLUMN,
            SCROLL_COUNT_COLUMN,
        )
    )


def with_digests(hours: DataFrame) -> DataFrame:
    """Finish ``vitals_hours`` rows: value lists become t-digests (null for none); add the date partition."""
    per_vital = [
        column
        for v in VITALS
        for column in (
            digest_of_values(F.col(values_column(v))).alias(v.digest_column),
            *(F.col(v.band_column(b)) for b in BANDS),
        )
    ]
    return hours.select(
        "site_id",
        "window_start",
        "window_end",
        "dimension",
        "value",
        MEASURED_COLUMN,
        *per_vital,
        SCROLL_SUM_COLUMN,
        SCROLL_COUNT_COLUMN,
        event_date("window_start"),
    )
