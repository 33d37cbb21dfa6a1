"""A range's raw events read and sessionised once for every question over it (query.scans.PreparedScan):
the answers are those of a scan per question, to the row, and the scan is built once."""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import duckdb
import pytest

from query import scans
from query.aggregates import Range
from query.exact import ExactQuery
from query.goals import Step
from query.plausible import parse_query
from query.raw_events import open_events
from query.scan_cache import PreparedScans
from query.scans import PreparedScan
from query.spec import Filter, Query, QueryError
from query.vitals import ExactVitals
from tests.unit.test_query_exact import EVENTS, GAP_MS, SITE, START, TODAY, dataset
from tests.unit.test_query_vitals import DAY as VITALS_DAY
from tests.unit.test_query_vitals import EVENTS as VITALS_EVENTS
from tests.unit.test_query_vitals import SITE as VITALS_SITE
from tests.unit.test_query_vitals import raw_dataset

SNAPSHOT = ("memory://raw.pageviews", 7)
BODIES: list[dict[str, Any]] = [
    {"metrics": ["visitors", "pageviews", "events", "visits", "bounce_rate", "visit_duration"]},
    {"metrics": ["visitors", "visits", "bounce_rate"], "dimensions": ["visit:entry_page"]},
    {"metrics": ["visits", "views_per_visit"], "dimensions": ["visit:exit_page", "visit:country"]},
    {"metrics": ["visitors", "pageviews"], "dimensions": ["event:page"], "filters": [["is", "visit:country", ["DE"]]]},
    {"metrics": ["visits", "bounce_rate"], "filters": [["is", "event:page", ["/pricing"]]]},
    {
        "metrics": ["visitors", "pageviews", "visits"],
        "dimensions": ["time:day"],
        "filters": [["is", "visit:device", ["mobile"]]],
    },
    {
        "metrics": ["visitors", "events"],
        "dimensions": ["event:props:plan"],
        "filters": [["is", "event:name", ["signup"]]],
    },
    {"metrics": ["visitors", "conversion_rate"], "dimensions": ["event:goal", "visit:source"]},
    {"metrics": ["visitors", "visits"], "date_range": ["2026-11-01T06:00:00", "2026-11-09T18:30:00"]},
]


pytestmark = pytest.mark.usefixtures("prepared_scans")  # each test its own cache (tests/unit/conftest.py)


def query(body: dict[str, Any]) -> Query:
    return parse_query({"site_id": SITE, "date_range": [START.isoformat(), TODAY.isoformat()], **body}, today=TODAY)


def rows(answer: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine's rows in one order (it returns them unordered)."""
    return sorted(answer, key=lambda r: [str(d) for d in r["dimensions"]])


def engine(snapshot: tuple[str, int] | None, goals: tuple[Step, ...] = ()) -> ExactQuery:
    return ExactQuery(dataset(EVENTS), SITE, GAP_MS, goals, snapshot=snapshot)


@pytest.mark.parametrize("body", BODIES, ids=lambda b: ",".join(b.get("dimensions", ["totals"])))
def test_a_prepared_scan_answers_every_question_as_a_scan_of_its_own(body: dict[str, Any]) -> None:
    asked = query(body)
    assert rows(engine(SNAPSHOT).answer(asked)) == rows(engine(None).answer(asked))


def test_questions_asked_side_by_side_share_one_scan_built_once(
    scan_reads: list[PreparedScan],
) -> None:
    built = scan_reads
    questions = [query(b) for b in BODIES[:7]] * 3  # one range, every kind of question
    alone = [rows(engine(None).answer(q)) for q in questions]
    together = threading.Barrier(6)  # the six threads' first questions start at once
    started = threading.local()

    def ask(q: Query) -> Any:
        if not getattr(started, "yes", False):
            started.yes = True
            together.wait(timeout=30)
        return rows(engine(SNAPSHOT).answer(q))

    with ThreadPoolExecutor(6) as pool:
        shared = list(pool.map(ask, questions))
    assert shared == alone
    assert len(built) == 1, "one range of one table version is read and sessionised once"
    # The copy is written in any order while the scan is built; its questions get DuckDB's default back.
    assert built[0].con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (True,)


def test_a_scan_that_fails_while_sessionising_leaves_its_duckdb_s_settings_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[duckdb.DuckDBPyConnection] = []

    def recorded(*args: Any, **kw: Any) -> duckdb.DuckDBPyConnection:
        opened.append(con := open_events(*args, **kw))
        return con

    monkeypatch.setattr(scans, "open_events", recorded)
    monkeypatch.setattr(scans, "visits_sql", lambda *_: "SELECT * FROM no_such_table")
    days = Range(START, TODAY)
    with pytest.raises(duckdb.CatalogException):
        PreparedScan.read(dataset(EVENTS), SITE, days, None, GAP_MS)
    setting = opened[0].execute("SELECT current_setting('preserve_insertion_order')").fetchone()
    assert setting == (True,)


def test_a_new_table_version_or_range_is_a_new_scan_and_old_ranges_are_dropped(prepared_scans: PreparedScans) -> None:
    whole = query(BODIES[0])
    first_week = query({**BODIES[0], "date_range": [START.isoformat(), (START + dt.timedelta(days=6)).isoformat()]})
    last_week = query({**BODIES[0], "date_range": [(TODAY - dt.timedelta(days=6)).isoformat(), TODAY.isoformat()]})
    engine(SNAPSHOT).answer(whole)
    engine((SNAPSHOT[0], SNAPSHOT[1] + 1)).answer(whole)  # a table in memory has no files: read again
    assert list(prepared_scans.kept().values()) == [[SNAPSHOT[1], SNAPSHOT[1] + 1]]
    engine(SNAPSHOT).answer(first_week)
    engine(SNAPSHOT).answer(last_week)  # a third range: the least recently used goes
    keys = list(prepared_scans.kept())
    assert len(keys) == prepared_scans.size == 2
    assert [k.start for k in keys] == [first_week.start, last_week.start]


def test_a_bad_regular_expression_over_a_prepared_scan_is_still_a_clear_error() -> None:
    with pytest.raises(QueryError) as e:
        engine(SNAPSHOT).answer(query({"metrics": ["visitors"], "filters": [["matches", "event:page", ["(["]]]}))
    assert e.value.part == "filters"


@pytest.mark.parametrize("dimension", ["all", "page", "device"])
@pytest.mark.parametrize("filters", [(), (Filter("is", dimension="visit:country", values=("DE",)),)], ids=["all", "DE"])
def test_core_web_vitals_over_a_prepared_scan_are_those_of_a_scan_of_their_own(
    dimension: str, filters: tuple[Filter, ...], prepared_scans: PreparedScans
) -> None:
    raw = raw_dataset(VITALS_EVENTS)
    days = Range(VITALS_DAY, VITALS_DAY)
    alone = ExactVitals(raw, VITALS_SITE, days, filters).vitals(dimension)
    shared = ExactVitals(raw, VITALS_SITE, days, filters, snapshot=SNAPSHOT, gap_ms=GAP_MS).vitals(dimension)
    assert shared == alone and alone
    # the page's other drill-downs over the same range read the same scan
    asked = parse_query(
        {"site_id": VITALS_SITE, "metrics": ["visits"], "date_range": [str(VITALS_DAY)] * 2},
        today=VITALS_DAY,
    )
    ExactQuery(raw, VITALS_SITE, GAP_MS, snapshot=SNAPSHOT).answer(asked)
    assert len(prepared_scans.kept()) == 1
