"""The dashboard's view state (URL round trip, ranges) and its CSV export."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pandas as pd
import pytest

from dashboard.export import safe_csv
from dashboard.view import View, ViewError, from_query, to_query
from query.goals import Step

TODAY = dt.date(2026, 11, 23)


def test_a_view_survives_the_round_trip_through_the_url() -> None:
    view = View(
        site="demo.tally.local",
        preset="custom",
        start=dt.date(2026, 10, 1),
        end=dt.date(2026, 10, 31),
        compare=False,
        filters={"country": "DE", "page": "/pricing"},
        funnel=(Step("page", "/"), Step("event", "signup")),
        goals=(Step("page", "/thanks"),),
    )
    assert from_query(to_query(view), default_site="other") == view


def test_presets_cover_whole_utc_days_ending_today_and_compare_with_the_period_before() -> None:
    view = View(site="s", preset="7d")
    assert view.dates(TODAY) == (dt.date(2026, 11, 17), TODAY)
    assert view.previous(TODAY) == (dt.date(2026, 11, 10), dt.date(2026, 11, 16))
    assert View(site="s", preset="today").previous(TODAY) == (dt.date(2026, 11, 22), dt.date(2026, 11, 22))


def test_short_ranges_are_charted_by_hour_and_longer_ones_by_day() -> None:
    assert View(site="s", preset="today").grain(TODAY) == "hour"
    assert View(site="s", preset="30d").grain(TODAY) == "day"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"range": "forever"}, "range must be one of"),
        ({"range": "custom", "from": "2026-01-01"}, "needs both"),
        ({"range": "custom", "from": "2026-02-01", "to": "2026-01-01"}, "before"),
        ({"range": "custom", "from": "yesterday", "to": "2026-01-01"}, "from must be a date"),
        ({"funnel": "page:/a,page:/b,page:/c,page:/d,page:/e,page:/f"}, "at most 5 steps"),
        ({"goals": "click:/x"}, "a step is"),
    ],
)
def test_a_bad_query_parameter_is_refused_with_a_message_naming_it(params: dict[str, str], message: str) -> None:
    with pytest.raises(ViewError, match=message):
        from_query(params, default_site="s")


def test_unknown_query_parameters_and_empty_filters_are_ignored() -> None:
    view = from_query({"utm_source": "x", "f_country": "", "f_nonsense": "1"}, default_site="s")
    assert view == View(site="s")


def test_csv_export_neutralises_formula_text_but_keeps_numbers() -> None:
    frame = pd.DataFrame({"Page": ['=HYPERLINK("http://evil")', "+1", "/ok", "@SUM(A1)"], "Views": [-3, 2, 1, 0]})
    rows = list(csv.reader(io.StringIO(safe_csv(frame).decode())))
    assert rows[0] == ["Page", "Views"]
    assert [r[0] for r in rows[1:]] == ['\'=HYPERLINK("http://evil")', "'+1", "/ok", "'@SUM(A1)"]
    assert [r[1] for r in rows[1:]] == ["-3", "2", "1", "0"]
