"""Imported history on the dashboard (AppTest: the whole page, no browser) and the sidebar's exports.

A Plausible export imported into a site with no events of its own is shown over a range holding its
days: its page views and visitors as the chart's lines marked "imported", and its own tables marked
"(imported)" with the figures the files hold; the sidebar's switch (``imports=0`` in the URL) leaves
it out. The sidebar's two exports are the files `tally export` writes."""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from dashboard.export import EXPORT_OPEN, plausible_zip, raw_zip
from ops.cli import main
from query.sources import Sources
from simulator.synthetic import synthetic_events
from tally.plausible_export import TABLES
from tally.settings import Settings
from tally.storage import append_rows
from tests.support.import_commands import umami
from tests.support.plausible_files import DAYS, FIRST, LAST, full_export, rows_of, write_zip
from tests.support.umami_files import ROWS, export_files
from tests.unit import markup_reader
from tests.unit.dashboard_page import logged_in

pytestmark = pytest.mark.usefixtures("dashboard_cookies")


@pytest.fixture
def imported_site(settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    site = settings.sites[0].site_id
    archive = write_zip(tmp_path / "plausible.zip", full_export())
    with pytest.raises(SystemExit) as done:
        main(["import", "plausible", str(archive), "--site", site])
    assert done.value.code == 0, capsys.readouterr().err
    return site


def page(settings: Settings, site: str, **params: str) -> AppTest:
    app = logged_in(settings)
    app.query_params.update({"site": site, "range": "custom", "from": str(FIRST), "to": str(LAST), **params})
    return app.run()


def test_imported_days_are_drawn_in_the_chart_and_in_tables_of_their_own_marked_imported(
    settings: Settings, imported_site: str
) -> None:
    app = page(settings, imported_site)
    assert not app.exception
    assert any(h.value == "Imported history" for h in app.subheader)
    shown = markup_reader.text(app)
    assert "Page views (imported)" in shown and "Visitors (imported)" in shown  # the chart's legend
    tables = markup_reader.tables(app)
    # The files' figures (tests/support/plausible_files.py): row n of day n, metrics n × (1, 2, …) in column order.
    assert "Top pages (imported)" in markup_reader.titles(app)
    pages = tables["imported-event:page"]
    metrics = TABLES["pages"].metrics
    expected = {rows_of("pages", day, n)["page"]: rows_of("pages", day, n) for n, day in enumerate(DAYS, start=1)}
    assert set(pages["Page"]) == set(expected)
    for _, row in pages.iterrows():
        source = expected[row["Page"]]
        assert (int(row["Visitors"]), int(row["Visits"]), int(row["Pageviews"])) == (
            source["visitors"],
            source["visits"],
            source["pageviews"],
        ), metrics
    assert {"Custom events (imported)", "Browsers (imported)"} <= set(markup_reader.titles(app))
    assert len(tables["imported-event:name"]) == 3 and len(tables["imported-visit:browser"]) == 3
    # The site's own figures stay its own: it has no events, so its page views are 0.
    assert markup_reader.cards(app)["Page views"] == "0"


def test_the_switch_leaves_imported_history_out(settings: Settings, imported_site: str) -> None:
    app = page(settings, imported_site, imports="0")
    assert not app.exception
    assert not any(h.value == "Imported history" for h in app.subheader)
    assert "(imported)" not in markup_reader.text(app)
    assert app.checkbox(key="imports").value is False
    app.checkbox(key="imports").check().run()
    assert any(h.value == "Imported history" for h in app.subheader)
    assert "imports" not in app.query_params  # on is the default, left out of the URL


def test_a_range_without_imported_days_shows_no_imported_section(settings: Settings, imported_site: str) -> None:
    app = logged_in(settings)
    app.query_params.update({"site": imported_site, "range": "7d"})
    app.run()
    assert not app.exception
    assert "(imported)" not in markup_reader.text(app)


def test_the_sidebar_s_exports_are_the_files_tally_export_writes(settings: Settings, tmp_path: Path) -> None:
    site = settings.sites[0].site_id
    start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    append_rows(
        settings,
        "raw.pageviews",
        synthetic_events(visits=200, start=start, span=dt.timedelta(days=2), site_id=site),
        partition_by=["event_date"],
    )
    first, last = dt.date(2026, 3, 1), dt.date(2026, 3, 2)
    sources = Sources(settings)
    made = plausible_zip(sources, site, first, last, "UTC")
    out = tmp_path / "cli.zip"
    with pytest.raises(SystemExit):
        main(["export", "--site", site, "--from", str(first), "--to", str(last), "--out", str(out)])
    with zipfile.ZipFile(io.BytesIO(made)) as ours, zipfile.ZipFile(out) as theirs:
        assert ours.namelist() == theirs.namelist() and len(ours.namelist()) == 10
        assert all(ours.read(n) == theirs.read(n) for n in ours.namelist())  # byte for byte

    raw = zipfile.ZipFile(io.BytesIO(raw_zip(sources, site, first, last, "UTC")))
    assert len(raw.namelist()) == 2
    raw.extractall(tmp_path / "raw")
    count = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path / 'raw'}/*.parquet')").fetchone()
    events = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path / 'raw'}/*.parquet') WHERE site_id = '{site}'")
    assert count is not None and count == events.fetchone() and count[0] > 0

    app = logged_in(settings)
    app.session_state[EXPORT_OPEN] = True  # what opening the sidebar's "Export" does
    app.query_params.update({"site": site, "range": "custom", "from": str(first), "to": str(last)})
    app.run()
    assert not app.exception
    assert "The same files as `tally export`" in " ".join(c.value for c in app.sidebar.caption)


def test_a_site_without_events_exports_files_without_rows(settings: Settings) -> None:
    site, day = settings.sites[0].site_id, dt.date(2026, 3, 1)
    with zipfile.ZipFile(io.BytesIO(plausible_zip(Sources(settings), site, day, day, "UTC"))) as made:
        assert len(made.namelist()) == 10
        assert all(len(made.read(n).splitlines()) == 1 for n in made.namelist())  # the header alone
    with zipfile.ZipFile(io.BytesIO(raw_zip(Sources(settings), site, day, day, "UTC"))) as made:
        assert made.namelist() == [f"raw_pageviews_{site}_20260301.parquet"]


def test_a_umami_range_is_shown_in_tables_of_its_own_over_dates_that_hold_it(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = settings.sites[0].site_id
    assert umami(capsys, write_zip(tmp_path / "umami.zip", export_files()), site)[0] == 0
    app = page(settings, site, **{"from": "2023-12-01", "to": "2024-02-29"})
    assert not app.exception
    assert "Top pages (imported range)" in markup_reader.titles(app)
    pages = markup_reader.tables(app)["imported-range-event:page"]
    assert [(p, int(v)) for p, v in zip(pages["Page"], pages["Visitors"], strict=True)] == sorted(
        ROWS["pages"], key=lambda r: -r[1]
    )
    events = markup_reader.tables(app)["imported-range-event:name"]
    assert int(events.loc[events["Event"] == "signup", "Events"].iloc[0]) == dict(ROWS["events"])["signup"]
    # Dates that cut the range do not show it: its figures are of the whole range.
    cut = page(settings, site, **{"from": "2024-01-15", "to": "2024-02-29"})
    assert "(imported range)" not in markup_reader.text(cut)
