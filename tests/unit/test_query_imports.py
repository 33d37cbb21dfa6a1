"""The Stats API's ``include: {"imports": true}``: imported history added where an export table can
answer the question, and ``meta`` saying whether it was, and why not, in Plausible's words.

The site has no events of its own here, so every figure is the imported one, computed in the test
from the rows the export was written with (tests/unit/test_import_plausible.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from imports.plausible import read_export
from imports.store import add_import
from query.imported import Plan, combined
from query.spec import Query
from tally.settings import Settings
from tally.sketches import Estimate
from tests.support.plausible_files import DAYS, FIRST, LAST, full_export, write_zip

NOW = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)
TOTALS = ["visitors", "visits", "pageviews", "bounce_rate", "visit_duration"]


@pytest.fixture
def ask(settings: Settings, tmp_path: Path) -> Any:
    site = settings.sites[0].site_id
    export = read_export(write_zip(tmp_path / "export.zip", full_export()))
    add_import(settings, site, export, origin="plausible", now=NOW)
    key, _ = create_key(settings, name="t", sites=(site,), now=NOW)
    client = TestClient(create_app(settings))

    def post(**body: Any) -> dict[str, Any]:
        body = {"site_id": site, "date_range": [str(FIRST), str(LAST)], **body}
        answer = client.post("/api/v2/query", json=body, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    return post


def test_totals_include_the_imported_days_and_say_visitors_are_summed_days(ask: Any) -> None:
    # The visitors file: day n has n visitors, 2n page views, 3n bounces, 4n visits, 5n seconds.
    n = sum(range(1, len(DAYS) + 1))
    answer = ask(metrics=TOTALS, include={"imports": True})
    visits = 4 * n
    assert answer["results"] == [
        {"dimensions": [], "metrics": [n, visits, 2 * n, round(100 * 3 * n / visits, 1), round(5 * n / visits)]}
    ]
    meta = answer["meta"]
    assert meta["imports_included"] is True
    assert meta["metrics"]["visitors"]["exact"] is False and "counts twice" in meta["metrics"]["visitors"]["method"]
    without = ask(metrics=["visitors", "pageviews"])
    assert without["results"] == [{"dimensions": [], "metrics": [0, 0]}] and "imports_included" not in without["meta"]


def test_a_daily_series_and_a_breakdown_read_their_export_tables(ask: Any) -> None:
    series = ask(metrics=["visitors", "pageviews", "visits"], dimensions=["time:day"], include={"imports": True})
    assert series["results"] == [
        {"dimensions": [day.isoformat()], "metrics": [n, 2 * n, 4 * n]} for n, day in enumerate(DAYS, start=1)
    ]
    # The sources file: source-n on day n, metrics in its own column order: pageviews n, visitors 2n, visits 3n.
    sources = ask(metrics=["visitors", "visits"], dimensions=["visit:source"], include={"imports": True})
    assert sources["results"] == [{"dimensions": [f"source-{n}"], "metrics": [2 * n, 3 * n]} for n in (3, 2, 1)], (
        "ordered by visitors, most first"
    )
    entry = ask(metrics=["visits"], dimensions=["visit:entry_page"], include={"imports": True})
    # entry pages: visitors n, entrances 2n (the visits), duration 3n, bounces 4n, page views 5n
    assert entry["results"] == [{"dimensions": [f"entry_page-{n}"], "metrics": [2 * n]} for n in (3, 2, 1)]


def test_a_question_the_export_cannot_answer_leaves_imports_out_and_says_why(ask: Any) -> None:
    body = {"metrics": ["visitors"], "dimensions": ["visit:source"], "include": {"imports": True}}
    filtered = ask(**body, filters=[["is", "visit:country", ["DE"]]])  # the sources table has no country
    assert filtered["meta"]["imports_included"] is False
    assert filtered["meta"]["imports_skip_reason"] == "unsupported_query"
    assert "do not hold every dimension the filters name (visit:country)" in filtered["meta"]["imports_warning"]
    pages = ask(metrics=["bounce_rate"], dimensions=["event:page"], include={"imports": True})
    assert (
        pages["meta"]["imports_skip_reason"] == "unsupported_query"
        and "no bounce_rate" in pages["meta"]["imports_warning"]
    )
    per_visit = ask(metrics=["views_per_visit"], include={"imports": True})
    assert "no views_per_visit" in per_visit["meta"]["imports_warning"], "the visitors table's page views are the day's"
    elsewhere = ask(metrics=["visitors"], date_range=["2025-01-01", "2025-01-31"], include={"imports": True})
    assert elsewhere["meta"]["imports_included"] is False
    assert elsewhere["meta"]["imports_skip_reason"] == "no_imported_data"


def test_rates_are_averaged_over_the_logs_visits_and_the_imported_ones_together() -> None:
    import pyarrow as pa

    from tally.table_schemas import IMPORTED_DAILY_SCHEMA

    query = Query("s", FIRST, LAST, ("visitors", "bounce_rate", "visit_duration"))
    native = [
        {
            "dimensions": [],
            "metrics": {"visitors": Estimate(100, 98, 102), "visits": 10, "bounce_rate": 50.0, "visit_duration": 60},
        }
    ]
    row = dict.fromkeys(IMPORTED_DAILY_SCHEMA.names, "") | {
        "date": FIRST,
        "visitors": 7,
        "visits": 30,
        "bounces": 3,
        "visit_duration": 600,
        "pageviews": 40,
        "entrances": 0,
        "exits": 0,
        "events": 0,
        "city": 0,
    }
    imported = pa.Table.from_pylist([row])
    rows, included = combined(query, Plan("visitors"), native, imported)
    metrics = rows[0]["metrics"]
    assert included and metrics["visits"] == 40
    assert metrics["bounce_rate"] == round(100 * (5 + 3) / 40, 1)  # 5 bounces of the log's 10 visits, 3 of 30
    assert metrics["visit_duration"] == round((60 * 10 + 600) / 40)
    assert (metrics["visitors"].value, metrics["visitors"].lower, metrics["visitors"].upper) == (107, 105, 109)
