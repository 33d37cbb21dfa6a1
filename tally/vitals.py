"""Core Web Vitals and scroll depth: the words every part of Tally uses for them.

The optional tracker extension (``tracker/vitals.js``, served as ``/t.vitals.js``) measures LCP,
INP, CLS, FCP and TTFB with Google's ``web-vitals`` package and sends them once per page view,
when the page is hidden, as an event of type ``vitals``; with them goes the deepest scroll
position of the page view (percent of the page's height). Plausible's ``engagement`` event
carries its scroll depth (``sd``) too. The view ``agg.vitals_1h`` keeps, per site, UTC hour and
dimension value, a t-digest of each metric, the count of page views in each of Google's bands,
and the sum and count of scroll depths.

Bands are Google's (https://web.dev/articles/vitals, "Core Web Vitals thresholds"): a value is
``good`` at or below the first threshold, ``poor`` above the second, ``needs_improvement`` between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

VITALS_TYPE = "vitals"  # the event type the extension sends

Band = Literal["good", "needs_improvement", "poor"]
BANDS: tuple[Band, ...] = ("good", "needs_improvement", "poor")


@dataclass(frozen=True)
class Vital:
    """One Core Web Vital: its names on the wire, in the event and in the view, its unit and bands."""

    name: str  # lcp, inp, cls, fcp, ttfb (also the beacon key)
    column: str  # the event column (raw.pageviews)
    unit: str  # "ms" or "" (CLS has no unit)
    good_max: float  # good when value <= good_max
    poor_above: float  # poor when value > poor_above
    upper: float  # the largest value ingest accepts

    @property
    def digest_column(self) -> str:
        return f"{self.name}_digest"

    def band_column(self, band: Band) -> str:
        return f"{self.name}_{band}"

    def band(self, value: float) -> Band:
        """Google's band of one measured value."""
        if value <= self.good_max:
            return "good"
        return "poor" if value > self.poor_above else "needs_improvement"


VITALS: tuple[Vital, ...] = (
    Vital("lcp", "lcp_ms", "ms", 2500, 4000, 3_600_000),
    Vital("inp", "inp_ms", "ms", 200, 500, 3_600_000),
    Vital("cls", "cls", "", 0.1, 0.25, 1000.0),
    Vital("fcp", "fcp_ms", "ms", 1800, 3000, 3_600_000),
    Vital("ttfb", "ttfb_ms", "ms", 800, 1800, 3_600_000),
)
VITALS_BY_NAME: dict[str, Vital] = {v.name: v for v in VITALS}

# The percentile the reports show, as Google's CrUX and PageSpeed Insights do.
REPORTED_QUANTILE = 0.75

# Scroll depth: the deepest position reached in a page view, 0–100 (percent of the page height).
SCROLL_DEPTH_COLUMN = "scroll_depth"
SCROLL_DEPTH_KEY = "sd"  # beacon key, as Plausible's engagement event names it
SCROLL_DEPTH_MAX = 100

# Dimensions of agg.vitals_1h: dimension name -> event column; plus ``all`` (tally.dimensions.ALL).
VITALS_DIMENSIONS: dict[str, str] = {"page": "path", "device": "device"}

# agg.vitals_1h's measure columns, besides the keys, window_end and event_date.
MEASURED_COLUMN = "measured"  # vitals beacons (page views measured) in the row
SCROLL_SUM_COLUMN = "scroll_depth_sum"
SCROLL_COUNT_COLUMN = "scroll_depth_count"  # page views with a scroll depth (vitals or engagement events)
