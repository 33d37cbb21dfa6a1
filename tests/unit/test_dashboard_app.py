"""The whole dashboard page (access gate + report) with Streamlit's AppTest: no server, no browser."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.auth import write_file_users
from dashboard.controls import FILTERS_OPEN, GOALS_OPEN
from dashboard.page import ANNOTATE_OPEN
from dashboard.passwords import hash_password
from dashboard.top_tables import TOP_TAB_KEY
from quality.quarantine import record_statuses
from tally.annotations import load_annotations
from tally.quarantine import PartitionStatus
from tally.settings import DashboardUser, Settings
from tests.unit import markup_reader
from tests.unit.dashboard_page import APP, logged_in
from tests.unit.fragment_reruns import rerun_fragments_alone

pytestmark = pytest.mark.usefixtures("dashboard_cookies")


def test_an_anonymous_visitor_gets_the_login_form_and_no_figures(settings: Settings) -> None:
    write_file_users(settings, [DashboardUser("ana", hash_password("correct horse", n=1024), ("*",))])
    app = AppTest.from_file(APP, default_timeout=60).run()
    assert not app.exception
    assert 'action="/login"' in app.html[0].value, "a login form"
    assert not markup_reader.figures_shown(app) and not app.sidebar.selectbox


def test_a_logged_in_user_sees_the_report_with_an_empty_warehouse(settings: Settings) -> None:
    app = logged_in(settings).run()
    assert not app.exception
    shown = markup_reader.cards(app)
    assert {"Unique visitors (≈)", "Page views", "Visits", "Bounce rate", "Visit duration"} <= set(shown)
    assert shown["Page views"] == "0" and shown["Visitors in the last 5 minutes"] == "0"
    assert any("No page views in this range yet" in i.value for i in app.info)
    assert app.query_params["site"] == "demo.tally.local"
    assert "Visitors here are daily visitor ids" in markup_reader.text(app)


def test_an_annotation_made_on_the_page_is_kept_for_the_chart_and_the_api(settings: Settings) -> None:
    app = logged_in(settings).run()
    assert not app.text_input, "the form is drawn only once asked for"
    app.session_state[ANNOTATE_OPEN] = True  # what opening "Annotate a day" does
    app.run()
    app.text_input(key="annotation_text").input("launched the pricing page")
    next(b for b in app.button if b.label == "Add to the chart").click().run()
    assert not app.exception
    notes = load_annotations(settings)
    assert [(n.site_id, n.text, n.author) for n in notes] == [
        ("demo.tally.local", "launched the pricing page", "dashboard")
    ]
    assert f"{notes[0].day}: launched the pricing page" in markup_reader.text(app), "the chart shows the note"


def test_a_user_cannot_open_a_site_not_granted_by_editing_the_url(settings: Settings) -> None:
    app = logged_in(settings, sites=("demo.tally.local",))
    app.query_params["site"] = "limited.tally.test"
    app.run()
    assert not app.exception
    assert any("not shared with you" in e.value for e in app.error)
    assert not markup_reader.figures_shown(app)


def test_a_bad_view_in_the_url_is_refused_with_what_to_do(settings: Settings) -> None:
    app = logged_in(settings)
    app.query_params["range"] = "forever"
    app.run()
    assert any("range must be one of" in e.value for e in app.error)
    assert not markup_reader.figures_shown(app)


def test_the_dashboard_warns_about_quarantined_partitions(settings: Settings) -> None:
    day = dt.date(2026, 1, 10)
    record_statuses(
        settings,
        [PartitionStatus("agg.traffic_1h", day, "audit", True, "run-1", dt.datetime.now(dt.UTC), ("pageviews",))],
    )
    app = logged_in(settings).run()
    assert not app.exception
    assert any("agg.traffic_1h 2026-01-10" in w.value for w in app.warning)


def test_the_dashboard_shows_no_warning_when_every_partition_passed(settings: Settings) -> None:
    app = logged_in(settings).run()
    assert not app.exception
    assert not app.warning


def test_the_custom_properties_panel_breaks_a_property_down_with_a_csv(settings: Settings) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from tally.sketches import sketch_from_ids
    from tally.tables import PROPS_1D

    today = dt.datetime.now(dt.UTC).date()
    start = dt.datetime.combine(today, dt.time(), dt.UTC)
    rows = [
        {
            "site_id": "demo.tally.local",
            "window_start": start,
            "window_end": start + dt.timedelta(days=1),
            "name": "signup",
            "key": "plan",
            "value": value,
            "events": events,
            "visitors_sketch": sketch_from_ids([f"{value}-{i}" for i in range(events)]),
            "event_date": today,
        }
        for value, events in (("pro", 3), ("free", 5))
    ]
    write_deltalake(settings.table_uri(PROPS_1D.table), pa.Table.from_pylist(rows), partition_by=["event_date"])
    app = logged_in(settings).run()
    assert not app.exception
    assert "Custom properties" in [h.value for h in app.subheader]
    assert [s.value for s in app.selectbox if s.key == "props_key"] == ["plan"]
    shown = markup_reader.tables(app)["props"]
    assert shown["Value"].tolist() == ["free", "pro"]
    assert shown["events"].tolist() == ["5", "3"]
    assert any(c.startswith("Visitors (≈ ±") for c in shown.columns)
    assert [b.proto.label for b in app.get("download_button")] == ["Property values (CSV)"]


def test_the_top_tables_draw_only_the_open_tab_and_picking_another_draws_its_tables(settings: Settings) -> None:
    app = logged_in(settings).run()
    assert not app.exception
    assert [t.label for t in app.tabs][:4] == ["Pages", "Sources", "Devices", "Countries"]
    titles = markup_reader.titles(app)
    assert {"Top pages", "Entry pages", "Exit pages"} <= set(titles)
    assert "Browsers" not in titles and "Countries" not in titles, "a closed tab's tables are drawn"

    app.session_state[TOP_TAB_KEY] = "Devices"  # what picking the tab does
    app.run()
    assert not app.exception
    titles = markup_reader.titles(app)
    assert {"Browsers", "Operating systems", "Devices"} <= set(titles)
    assert "Top pages" not in titles


def test_the_filter_menu_draws_its_pickers_only_when_open_and_the_urls_filter_holds_while_closed(
    settings: Settings,
) -> None:
    app = logged_in(settings)
    app.query_params["f_country"] = "DE"
    app.run()
    assert not app.exception
    assert [s.label for s in app.sidebar.selectbox] == ["Site", "Date range"], "no picker drawn while closed"
    assert app.query_params["f_country"] == "DE"
    assert [c.value for c in app.sidebar.caption if c.value.startswith("Filtered by")] == ["Filtered by country."]

    app.session_state[FILTERS_OPEN] = True  # what opening the menu does
    app.run()
    assert not app.exception
    pickers = {s.label: s for s in app.selectbox if s.key and s.key.startswith("f_")}
    assert list(pickers) == ["Page", "Source", "Country", "Region", "City", "Device", "Browser"]
    assert pickers["Country"].value == "DE", "the picker starts from the URL's filter"
    assert any("first filter on a range" in c.value for c in app.sidebar.caption), "what the first filter costs"
    app.session_state[FILTERS_OPEN] = False  # closed again, nothing picked: the URL's filter holds
    app.run()
    assert app.query_params["f_country"] == "DE" and not [s for s in app.selectbox if s.key == "f_country"]

    app.session_state[FILTERS_OPEN] = True
    app.run()
    app.selectbox(key="f_country").set_value("(any)").run()
    assert not app.exception
    assert "f_country" not in app.query_params
    app.session_state[FILTERS_OPEN] = False  # closed after the pick: the pick holds
    app.run()
    assert "f_country" not in app.query_params
    assert not [c for c in app.sidebar.caption if c.value.startswith("Filtered by")]


def test_a_filter_value_from_the_url_is_never_shown_as_markdown(settings: Settings) -> None:
    app = logged_in(settings)
    app.query_params["f_page"] = "[log in again](https://evil.example/) <img src=x onerror=alert(1)>"
    app.run()
    assert not app.exception
    shown = [e.value for e in (*app.markdown, *app.caption, *app.info, *app.warning, *app.error)]
    assert not [v for v in shown if "evil.example" in v or "onerror" in v], shown
    assert "Filtered by page." in [c.value for c in app.sidebar.caption]


def test_the_goals_menu_draws_its_pickers_only_when_open_and_keeps_the_urls_goals_while_closed(
    settings: Settings,
) -> None:
    app = logged_in(settings)
    app.query_params["goals"] = "page:/pricing"
    app.run()
    assert not app.exception and not app.multiselect
    assert app.query_params["goals"] == "page:/pricing"
    assert any("1 goal(s)" in c.value for c in app.sidebar.caption)

    app.session_state[GOALS_OPEN] = True
    app.run()
    assert not app.exception
    assert [m.label for m in app.multiselect] == ["Goals", "Funnel steps (2–5, in order)"]
    assert app.multiselect(key="goals").value == ["page:/pricing"]


def test_a_page_whose_raw_events_do_not_fit_in_memory_says_what_to_do_instead_of_a_traceback(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import duckdb

    import dashboard.live
    import dashboard.login
    import dashboard.questions

    def too_many(*_: object) -> None:
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block (1.8 GiB/1.8 GiB used)")

    monkeypatch.setattr(dashboard.live, "figures", too_many)  # what a 90-day filtered page of 10M events raised
    app = logged_in(settings).run()
    assert not app.exception, "no traceback"
    assert [e.value for e in app.error] == [dashboard.questions.TOO_MANY_EVENTS]
    assert "Pick a shorter range" in dashboard.questions.TOO_MANY_EVENTS


def test_a_refresh_of_the_live_figures_asks_the_gate_then_the_page_reports_again(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dashboard.live
    import dashboard.login
    import dashboard.questions

    gate: list[bool] = []
    asked: list[object] = []
    allowed = dashboard.login.still_allowed

    def still_allowed(*args: Any) -> bool:
        gate.append(allowed(*args))
        return gate[-1]

    def page_reports(*args: Any) -> Any:
        asked.append(args)
        return dashboard.questions.page_reports(*args)

    monkeypatch.setattr(dashboard.login, "still_allowed", still_allowed)
    monkeypatch.setattr(dashboard.live, "page_reports", page_reports)
    app = logged_in(settings).run()
    assert not app.exception
    assert (gate, asked) == ([True], []), "the page run's live figures: the gate, and the reports it asked"
    rerun_fragments_alone(app)  # the refresh every dashboard.refresh_seconds, a tab picked
    assert len(asked) == 1, "the refresh read the tables again"
    assert gate == [True, True, True], "the live figures and the top tables each asked the gate first"


def test_a_filtered_page_before_any_raw_event_says_the_filters_cannot_be_applied_yet(settings: Settings) -> None:
    app = logged_in(settings)
    app.query_params["f_country"] = "DE"
    app.run()
    assert not app.exception
    assert [i.value for i in app.info] == ["No raw events yet, so filters cannot be applied."]
    assert not markup_reader.figures_shown(app)
