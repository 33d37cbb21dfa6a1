"""The round trip through Plausible's format, against the views: the demo site's March, backfilled
by Spark (the session's ``march`` warehouse, read only), exported by the query layer, imported into a
new site in a home of its own; every figure the export's tables answer comes back through the Stats
API with ``include.imports`` as the original site's Stats API answers it from its views."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from imports.plausible import read_export
from imports.store import add_import
from query.export import export_rows, write_zip
from query.sources import Sources
from tally.settings import Settings, SiteSettings
from tests.integration.views_support import MARCH_FIRST, MARCH_LAST, at_home
from tests.support.round_trip import BREAKDOWNS, breakdown_metrics, exported

COPY = "copy.example"
NOW = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)


def stats(settings: Settings, site: str) -> Any:
    key, _ = create_key(settings, name="round trip", sites=(site,), now=NOW)
    client = TestClient(create_app(settings))

    def ask(
        metrics: list[str], dimensions: tuple[str, ...] = (), days: tuple[dt.date, dt.date] = (MARCH_FIRST, MARCH_LAST)
    ) -> Any:
        body: dict[str, Any] = {
            "site_id": site,
            "metrics": metrics,
            "dimensions": list(dimensions),
            "date_range": [str(d) for d in days],
        }
        if site == COPY:
            body["include"] = {"imports": True}
        answer = client.post("/api/v2/query", json=body, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        if site == COPY:
            assert answer.json()["meta"]["imports_included"] is True, answer.json()["meta"]
        return {tuple(r["dimensions"]): r["metrics"] for r in answer.json()["results"]}

    return ask


@pytest.fixture(scope="module")
def both(march: Settings, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    site = march.sites[0]
    exact = Sources(march).exact(site.site_id)
    assert exact is not None
    archive = tmp_path_factory.mktemp("export") / "export.zip"
    with archive.open("wb") as out:
        write_zip(
            out, export_rows(exact, site.site_id, MARCH_FIRST, MARCH_LAST, site.timezone), MARCH_FIRST, MARCH_LAST
        )
    home = tmp_path_factory.mktemp("copy-home")
    copy = dataclasses.replace(at_home(march, home), sites=(*march.sites, SiteSettings(COPY, domains=(COPY,))))
    add_import(copy, COPY, read_export(archive), origin="plausible", now=NOW)
    return stats(march, site.site_id), stats(copy, COPY)


def test_each_days_visits_page_views_bounce_rate_and_duration_come_back(both: tuple[Any, Any]) -> None:
    original, imported = both
    series = ["visits", "pageviews"]
    assert imported(series, ("time:day",)) == original(series, ("time:day",))
    day = MARCH_FIRST
    while day <= MARCH_LAST:
        metrics = ["visits", "pageviews", "bounce_rate", "visit_duration"]
        ((want,),) = [list(original(metrics, days=(day, day)).values())]
        ((got,),) = [list(imported(metrics, days=(day, day)).values())]
        assert got[:3] == want[:3], day
        if want[3] is None:  # no visit began that day
            assert got[3] is None, day
        else:
            assert abs(got[3] - want[3]) <= 1, (day, "the mean duration, from whole seconds summed per day")
        day += dt.timedelta(days=1)


@pytest.mark.parametrize("dimension", BREAKDOWNS)
def test_each_breakdowns_visits_come_back(both: tuple[Any, Any], dimension: str) -> None:
    original, imported = both
    metrics = breakdown_metrics(dimension)
    assert imported(metrics, (dimension,)) == exported(dimension, original(metrics, (dimension,)))


def test_a_days_visitors_come_back_within_the_views_stated_bound(both: tuple[Any, Any]) -> None:
    original, imported = both
    day = (MARCH_FIRST, MARCH_FIRST)
    ((got,),) = [list(imported(["visitors"], days=day).values())]
    ((want,),) = [list(original(["visitors"], days=day).values())]
    assert abs(got[0] - want[0]) <= max(1, 0.02 * want[0]), (got, want)  # the views' visitors are HLL estimates
