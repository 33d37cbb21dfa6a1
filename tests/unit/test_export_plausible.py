"""`tally export` writes Plausible's CSV export of a site; imported into another site by `tally
import plausible`, every figure the export's tables answer comes back through the Stats API
(``include.imports``) as the query layer gives it for the original site's events.

The original site's figures are the query layer's exact answers over its raw events
(:class:`query.exact.ExactQuery`, what the Stats API answers from raw events); the unit tier has
no Spark to build its views."""

from __future__ import annotations

import datetime as dt
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from ops.cli import main
from query.exact import ExactQuery
from query.spec import Filter, Query
from simulator.synthetic import synthetic_events
from tally.plausible_export import TABLES, file_name
from tally.settings import Settings
from tally.storage import append_rows
from tests.support.round_trip import BREAKDOWNS, breakdown_metrics, exported

FIRST, LAST = dt.date(2026, 3, 1), dt.date(2026, 3, 3)
NOW = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)
GAP_MS = 30 * 60 * 1000


@pytest.fixture
def sites(settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Any, Any]:
    """(the original site's exact answers, the imported site's Stats API answers with imports)."""
    original, copy = settings.sites[0].site_id, settings.sites[1].site_id
    start = dt.datetime.combine(FIRST, dt.time(), dt.UTC)
    events = synthetic_events(
        visits=600, start=start, span=dt.timedelta(days=3) - dt.timedelta(hours=1), site_id=original
    )
    append_rows(settings, "raw.pageviews", events)
    out = tmp_path / "export.zip"
    with pytest.raises(SystemExit) as done:
        main(["export", "--site", original, "--from", str(FIRST), "--to", str(LAST), "--out", str(out)])
    printed = capsys.readouterr()
    assert done.value.code == 0, printed.err
    assert "imported_visitors_20260301_20260303.csv" in printed.out
    with pytest.raises(SystemExit) as done:
        main(["import", "plausible", str(out), "--site", copy])
    assert done.value.code == 0, capsys.readouterr().err
    exact = ExactQuery(ds.dataset(events), original, GAP_MS)
    key, _ = create_key(settings, name="t", sites=(copy,), now=NOW)
    client = TestClient(create_app(settings))

    def truth(
        metrics: list[str],
        dimensions: tuple[str, ...] = (),
        days: tuple[dt.date, dt.date] = (FIRST, LAST),
        filters: tuple[Filter, ...] = (),
    ) -> Any:
        rows = exact.answer(Query(original, *days, tuple(metrics), dimensions=dimensions, filters=filters))
        return sorted((r["dimensions"], [r["metrics"][m] for m in metrics]) for r in rows)

    def imported(
        metrics: list[str],
        dimensions: tuple[str, ...] = (),
        days: tuple[dt.date, dt.date] = (FIRST, LAST),
        filters: tuple[Filter, ...] = (),
    ) -> Any:
        body = {
            "site_id": copy,
            "metrics": metrics,
            "dimensions": list(dimensions),
            "date_range": [str(days[0]), str(days[1])],
            "filters": [_as_json(f) for f in filters],
            "include": {"imports": True},
        }
        answer = client.post("/api/v2/query", json=body, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["meta"]["imports_included"] is True, answer.json()["meta"]
        return sorted((r["dimensions"], r["metrics"]) for r in answer.json()["results"])

    return truth, imported


def test_the_export_is_plausibles_zip_with_its_ten_files(settings: Settings, tmp_path: Path) -> None:
    events = synthetic_events(visits=50, start=dt.datetime(2026, 3, 1, tzinfo=dt.UTC), span=dt.timedelta(hours=5))
    append_rows(settings, "raw.pageviews", events)
    out = tmp_path / "e.zip"
    with pytest.raises(SystemExit) as done:
        main(
            [
                "export",
                "--site",
                settings.sites[0].site_id,
                "--from",
                "2026-03-01",
                "--to",
                "2026-03-01",
                "--out",
                str(out),
            ]
        )
    assert done.value.code == 0
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
        assert {file_name(n).table.name for n in names} == set(TABLES) and len(names) == 10
        assert all(i.compress_type == zipfile.ZIP_STORED for i in archive.infolist()), "stored, as Plausible's"
        visitors = archive.read("imported_visitors_20260301_20260301.csv").decode().splitlines()
    assert visitors[0] == '"date","visitors","pageviews","bounces","visits","visit_duration"'
    assert visitors[1].startswith('"2026-03-01",') and len(visitors) == 2
    assert not list(tmp_path.glob(".*partial")), "no partial file left"


def test_each_days_figures_come_back_from_the_import_as_the_query_layer_gives_them(sites: tuple[Any, Any]) -> None:
    truth, imported = sites
    counts = ["visitors", "visits", "pageviews"]
    assert imported(counts, ("time:day",)) == truth(counts, ("time:day",))
    # A day's rates, as the query layer gives them in the original's daily series (a visit counts on the
    # day it began, whole), come back from the import of that day.
    rates = ["visitors", "visits", "pageviews", "bounce_rate", "visit_duration"]
    for (label,), want in truth(rates, ("time:day",)):
        day = dt.date.fromisoformat(label)
        ((_, got),) = imported(rates, days=(day, day))
        assert got[:4] == want[:4], day  # counts and the bounce rate exactly
        assert abs(got[4] - want[4]) <= 1, "the mean duration, from whole seconds summed per day"


@pytest.mark.parametrize("dimension", BREAKDOWNS)
def test_each_breakdown_comes_back_with_its_visits(sites: tuple[Any, Any], dimension: str) -> None:
    truth, imported = sites
    metrics = breakdown_metrics(dimension)
    want = {tuple(value): figures for value, figures in truth(metrics, (dimension,))}
    got = {tuple(value): figures for value, figures in imported(metrics, (dimension,))}
    assert got == exported(dimension, want)


def test_custom_events_come_back_by_name(sites: tuple[Any, Any]) -> None:
    truth, imported = sites
    want = [row for row in truth(["events"], ("event:name",)) if row[0] != ["pageview"]]
    assert want and imported(["events"], ("event:name",)) == want


def test_a_visit_across_midnight_to_a_page_of_the_next_day_exports(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by bench.import: the visit's row of its start day names the second page, which no event
    of that day has, so the row had no event figures, and the export failed on them."""
    from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA

    site = settings.sites[0].site_id
    times = [dt.datetime(2026, 3, 1, 23, 55, tzinfo=dt.UTC), dt.datetime(2026, 3, 2, 0, 15, tzinfo=dt.UTC)]
    rows = [
        {
            "event_id": f"e{i}",
            "type": "pageview",
            "site_id": site,
            "url": f"https://{site}{path}",
            "hostname": site,
            "path": path,
            "event_time": int(t.timestamp() * 1000),
            "ts_event": int(t.timestamp() * 1000),
            "ts_received": int(t.timestamp() * 1000),
            "visitor_id": "v1",
            "is_bot": False,
            "event_date": t.date(),
        }
        for i, (t, path) in enumerate(zip(times, ["/a", "/b"], strict=True))
    ]
    append_rows(settings, "raw.pageviews", pa.Table.from_pylist(rows, schema=RAW_PAGEVIEWS_SCHEMA))
    out = tmp_path / "export.zip"
    with pytest.raises(SystemExit) as done:
        main(["export", "--site", site, "--from", "2026-03-01", "--to", "2026-03-02", "--out", str(out)])
    assert done.value.code == 0, capsys.readouterr().err
    with zipfile.ZipFile(out) as z:
        pages = z.read("imported_pages_20260301_20260302.csv").decode().splitlines()
    assert pages[0].startswith('"date","hostname","page"')
    assert any(line.startswith(f'"2026-03-02","{site}","/b"') for line in pages[1:]), pages


def _as_json(f: Filter) -> list[Any]:
    """A filter as the Stats API's body writes it."""
    if f.op in ("and", "or"):
        return [f.op, [_as_json(c) for c in f.children]]
    if f.op == "not":
        return ["not", _as_json(f.children[0])]
    leaf: list[Any] = [f.op, f.dimension, list(f.values)]
    return leaf if f.case_sensitive else [*leaf, {"case_sensitive": False}]


def test_a_filter_on_a_dimension_of_the_export_table_comes_back_filtered(sites: tuple[Any, Any]) -> None:
    """As Plausible answers it: a filter on dimensions its imported table holds, with that table's
    breakdown or none; the figures the original gives for the same filter."""
    truth, imported = sites
    (top_source,), _ = max(truth(["visits"], ("visit:source",)), key=lambda r: r[1][0])
    (top_country,), _ = max(truth(["visits"], ("visit:country",)), key=lambda r: r[1][0])
    by_source = Filter("is", "visit:source", (top_source,))
    want = truth(["visits"], ("visit:source",), filters=(by_source,))
    assert len(want) == 1 and imported(["visits"], ("visit:source",), filters=(by_source,)) == want
    not_source = Filter("is_not", "visit:source", (top_source,))
    assert imported(["visits"], filters=(not_source,)) == truth(["visits"], filters=(not_source,))
    in_country = Filter("is", "visit:country", (top_country.lower(),), case_sensitive=False)
    assert imported(["visits"], ("time:day",), filters=(in_country,)) == truth(
        ["visits"], ("time:day",), filters=(in_country,)
    )
    page = Filter("contains", "event:page", ("/B",), case_sensitive=False)
    either = Filter("or", children=(page, Filter("matches", "event:page", ("^/$",))))
    pages = truth(["pageviews"], ("event:page",), filters=(either,))
    every = truth(["pageviews"], ("event:page",))
    assert 1 < len(pages) < len(every), "some pages kept, some left out"
    assert imported(["pageviews"], ("event:page",), filters=(either,)) == pages
