"""The Stats API with a Umami import (`tally import umami`, imported.ranges): its range totals are
added where they answer the question (a one-dimension breakdown of visitors, of events by name,
over dates that hold the whole range), and ``meta`` says why not otherwise (Plausible's
``imports_*`` keys). The expected figures are the rows the test's export holds."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from tally.settings import Settings
from tests.support.import_commands import tally_import, umami
from tests.support.plausible_files import full_export, write_zip
from tests.support.umami_files import ROWS, export_files


@pytest.fixture
def site(settings: Settings) -> str:
    return settings.sites[0].site_id


@pytest.fixture
def ask(settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    assert umami(capsys, write_zip(tmp_path / "u.zip", export_files()), site)[0] == 0
    now = dt.datetime.now(dt.UTC)
    key, _ = create_key(settings, name="t", sites=(site,), now=now)
    client = TestClient(create_app(settings))

    def post(**body: Any) -> dict[str, Any]:
        body = {"site_id": site, "date_range": ["2023-12-01", "2024-02-29"], "include": {"imports": True}, **body}
        answer = client.post("/api/v2/query", json=body, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    return post


def by_figure(rows: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """The rows as the API answers a breakdown: most first, an empty value as (none)."""
    ordered = sorted(rows, key=lambda r: -r[1])
    return [{"dimensions": [x or "(none)"], "metrics": [y]} for x, y in ordered]


@pytest.mark.parametrize(
    ("dimension", "name"),
    [
        ("visit:browser", "browsers"),
        ("visit:os", "os"),
        ("visit:device", "devices"),
        ("visit:country", "countries"),
        ("event:page", "pages"),
        ("visit:source", "referrers"),  # Umami's referrer domains, not sources' names
    ],
)
def test_a_breakdown_whose_dates_hold_the_range_gets_its_visitors(ask: Any, dimension: str, name: str) -> None:
    answer = ask(metrics=["visitors"], dimensions=[dimension])
    assert answer["results"] == by_figure(ROWS[name])
    assert answer["meta"]["imports_included"] is True and "imports_warning" not in answer["meta"]
    visitors = answer["meta"]["metrics"]["visitors"]
    assert visitors["exact"] is False and "Umami's sessions" in visitors["method"]


def test_custom_events_give_their_count_and_not_visitors(ask: Any) -> None:
    answer = ask(metrics=["events"], dimensions=["event:name"])
    assert answer["results"] == by_figure(ROWS["events"])
    visitors = ask(metrics=["visitors", "events"], dimensions=["event:name"])
    assert visitors["meta"]["imports_skip_reason"] == "unsupported_query"
    assert "has no visitors" in visitors["meta"]["imports_warning"]


def test_dates_that_do_not_hold_the_whole_range_leave_it_out(ask: Any) -> None:
    inside = ask(metrics=["visitors"], dimensions=["visit:browser"], date_range=["2024-01-10", "2024-02-29"])
    assert inside["results"] == []
    meta = inside["meta"]
    assert meta["imports_included"] is False and meta["imports_skip_reason"] == "out_of_range"
    assert "2024-01-01 to 2024-01-31" in meta["imports_warning"]
    elsewhere = ask(metrics=["visitors"], dimensions=["visit:browser"], date_range=["2024-03-01", "2024-03-31"])
    assert elsewhere["meta"]["imports_skip_reason"] == "no_imported_data"


@pytest.mark.parametrize(
    "body",
    [
        {"metrics": ["visitors"], "dimensions": ["visit:browser"], "filters": [["is", "visit:country", ["DE"]]]},
        {"metrics": ["visitors"], "dimensions": ["time:day"]},
        {"metrics": ["visitors"]},
        {"metrics": ["visitors", "visits"], "dimensions": ["visit:browser"]},
        {"metrics": ["visitors"], "dimensions": ["visit:entry_page"]},
        {
            "metrics": ["visitors"],
            "dimensions": ["visit:browser"],
            "include": {"imports": True, "compare": "previous_period"},
        },
    ],
    ids=["filter", "time", "totals", "visits", "entry-pages", "comparison"],
)
def test_a_question_a_range_cannot_answer_leaves_it_out_saying_why(ask: Any, body: dict[str, Any]) -> None:
    answer = ask(**body)
    meta = answer["meta"]
    assert meta["imports_included"] is False and meta["imports_skip_reason"] == "unsupported_query", meta
    assert meta["imports_warning"]
    assert all(m == 0 or m is None for r in answer["results"] for m in r["metrics"] if not isinstance(m, dict))


def test_a_ranges_figures_are_added_to_a_daily_imports_and_each_is_said(
    ask: Any, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = tally_import(capsys, "plausible", str(write_zip(tmp_path / "p.zip", full_export())), "--site", site)
    assert code == 0, err
    # Plausible's browsers file: browser-n on 2024-03-0n, its visitors n (tests/support/plausible_files.py).
    both = ask(metrics=["visitors"], dimensions=["visit:browser"], date_range=["2024-01-01", "2024-03-31"])
    daily = [(f"browser-{n}", n) for n in (1, 2, 3)]
    assert both["results"] == by_figure(ROWS["browsers"] + daily)
    assert both["meta"]["imports_included"] is True
    only_march = ask(metrics=["visitors"], dimensions=["visit:browser"], date_range=["2024-01-15", "2024-03-31"])
    assert only_march["results"] == by_figure(daily)
    assert (
        only_march["meta"]["imports_included"] is True
        and "left out: 2024-01-01 to 2024-01-31" in only_march["meta"]["imports_warning"]
    )
    totals = ask(metrics=["visitors"], date_range=["2024-01-01", "2024-03-31"])
    assert totals["results"] == [{"dimensions": [], "metrics": [1 + 2 + 3]}], "Plausible's visitors table alone"
    assert "no totals" in totals["meta"]["imports_warning"]
    assert "Umami" not in totals["meta"]["metrics"]["visitors"]["method"]
