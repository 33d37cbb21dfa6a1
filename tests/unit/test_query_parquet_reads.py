"""A local table's raw events read by DuckDB's own Parquet reader (query.raw_events.open_events over
tally.storage.arrow_dataset): every answer is the one the Arrow dataset gives, over a real Delta
table written in appends whose older files lack columns the newer ones have; the files read are
those of the dates that can hold the site's events; anything but local files reads through Arrow."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyarrow import fs

from query.aggregates import Range
from query.exact import ExactQuery
from query.raw import RawQuery
from query.raw_events import SCAN_COLUMNS, local_files, open_events
from query.spec import Filter
from query.vitals import ExactVitals
from tally.storage import arrow_dataset
from tests.unit.test_query_exact import COLUMNS, GAP_MS, SITE, START, TODAY, dataset, make_events
from tests.unit.test_query_prepared_scan import BODIES, query, rows
from tests.unit.test_query_vitals import DAY as VITALS_DAY
from tests.unit.test_query_vitals import EVENTS as VITALS_EVENTS
from tests.unit.test_query_vitals import SCHEMA as VITALS_SCHEMA
from tests.unit.test_query_vitals import SITE as VITALS_SITE

pytestmark = pytest.mark.usefixtures("prepared_scans")  # each test its own cache (tests/unit/conftest.py)

OLD = ("region", "city", "load_ms")  # columns the table's first files lack
HALF = len(make_events()) // 2
# The events as the table holds them: the first append's have no value in the columns it lacks.
EVENTS = [{**e, **dict.fromkeys(OLD)} if i < HALF else e for i, e in enumerate(make_events())]


def append(table: Path, events: list[dict[str, Any]], schema: pa.Schema) -> None:
    columns: dict[str, list[Any]] = {name: [e.get(name) for e in events] for name in schema.names}
    if "props" in columns:
        columns["props"] = [list((e.get("props") or {}).items()) for e in events]
    write_deltalake(
        str(table), pa.table(columns, schema=schema), mode="append", partition_by=["event_date"], schema_mode="merge"
    )


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The events in a Delta table written in two appends, the first without the columns of ``OLD``
    (a table an older Tally wrote, which a newer one then added columns to)."""
    table = tmp_path_factory.mktemp("parquet-reads") / "pageviews"
    append(table, EVENTS[:HALF], pa.schema({n: t for n, t in COLUMNS.items() if n not in OLD}))
    append(table, EVENTS[HALF:], pa.schema(COLUMNS))
    return table


def both(table: Path) -> tuple[ds.Dataset, ds.Dataset]:
    """The table read by DuckDB from its files, and through delta-rs's own file system (Arrow)."""
    opened = DeltaTable(str(table))
    native, arrow = arrow_dataset(opened), opened.to_pyarrow_dataset()
    assert local_files(native, SITE, Range(START, TODAY)) and local_files(arrow, SITE, Range(START, TODAY)) is None
    return native, arrow


@pytest.mark.parametrize("body", BODIES, ids=lambda b: ",".join(b.get("dimensions", ["totals"])))
def test_every_question_read_from_the_files_is_answered_as_through_arrow(evolved: Path, body: dict[str, Any]) -> None:
    native, arrow = both(evolved)
    asked = query(body)
    expected = rows(ExactQuery(arrow, SITE, GAP_MS).answer(asked))
    assert rows(ExactQuery(native, SITE, GAP_MS).answer(asked)) == expected
    assert expected == rows(ExactQuery(dataset(EVENTS), SITE, GAP_MS).answer(asked)), "the table holds the events"
    # and over the range's prepared scan, read from the files as the dashboard reads it
    version = DeltaTable(str(evolved)).version()
    assert rows(ExactQuery(native, SITE, GAP_MS, snapshot=(str(evolved), version)).answer(asked)) == expected


def test_a_column_only_newer_files_have_reads_as_null_of_its_type_in_older_dates(evolved: Path) -> None:
    native, arrow = both(evolved)
    older = {e["event_date"] for e in EVENTS[:HALF]} - {e["event_date"] for e in EVENTS[HALF:]}
    days = Range(min(older), min(older))  # a date only the first append wrote
    files = local_files(native, SITE, days)
    assert files and all("load_ms" not in pq.read_schema(f).names for f in files)
    found = {}
    for name, raw in (("native", native), ("arrow", arrow)):
        with open_events(raw, SITE, days, SCAN_COLUMNS) as con:
            types = {row[0]: row[1] for row in con.execute("DESCRIBE SELECT * FROM ev").fetchall()}
            found[name] = (types, con.execute("SELECT * FROM ev ORDER BY event_id").fetchall())
    assert found["native"] == found["arrow"]
    types, events = found["native"]
    assert events and all(e[list(types).index("load_ms")] is None for e in events)
    assert types["load_ms"] == "BIGINT" and types["region"] == "VARCHAR"  # the table's types
    assert types["lcp_ms"] == "VARCHAR"  # a column the table itself lacks (an older Tally's), as before


def test_the_files_read_are_the_dates_that_can_hold_the_sites_events(tmp_path: Path) -> None:
    table = tmp_path / "pageviews"
    day = dt.date(2026, 11, 20)
    base = {"type": "pageview", "visitor_id": "v", "is_bot": False, "path": "/", "event_time": 1}
    events = [
        {**base, "event_id": f"{site}-{d}", "site_id": site, "event_date": day + dt.timedelta(days=d)}
        for site in ("a.example", "b.example")
        for d in range(3)
    ]
    for site in ("a.example", "b.example"):  # a file per site and date: each file's statistics name one site
        append(table, [e for e in events if e["site_id"] == site], pa.schema(COLUMNS))
    native = arrow_dataset(DeltaTable(str(table)))
    found = local_files(native, "a.example", Range(day, day + dt.timedelta(days=1)))
    assert found is not None and len(found) == 2
    assert all(Path(f).is_file() for f in found)
    assert sorted(Path(f).parent.name for f in found) == [f"event_date={day + dt.timedelta(days=d)}" for d in (0, 1)]
    assert all(pq.read_table(f).column("site_id").to_pylist() == ["a.example"] for f in found)
    assert local_files(native, "c.example", Range(day, day)) is None  # no file can hold it: read through Arrow
    with open_events(native, "c.example", Range(day, day), SCAN_COLUMNS) as con:
        assert con.execute("SELECT count(*) FROM ev").fetchone() == (0,)
    assert local_files(dataset(EVENTS), SITE, Range(START, TODAY)) is None  # a table in memory


def test_core_web_vitals_read_from_the_files_are_those_read_through_arrow(tmp_path: Path) -> None:
    table = tmp_path / "pageviews"
    append(table, VITALS_EVENTS, VITALS_SCHEMA)
    opened = DeltaTable(str(table))
    native, arrow = arrow_dataset(opened), opened.to_pyarrow_dataset()
    days = Range(VITALS_DAY, VITALS_DAY)
    filters = (Filter("is", dimension="event:page", values=("/pricing",)),)
    for dimension in ("all", "page", "device"):
        expected = ExactVitals(arrow, VITALS_SITE, days, filters).vitals(dimension)
        assert expected and ExactVitals(native, VITALS_SITE, days, filters).vitals(dimension) == expected


def test_the_dashboards_drill_down_reads_from_the_files_as_through_arrow(evolved: Path) -> None:
    native, arrow = both(evolved)
    # a site on a half-hour offset: its days are read from the UTC dates around them
    drill = {
        name: RawQuery(raw, SITE, Range(START, TODAY), {"country": "DE"}, GAP_MS, timezone="Asia/Kolkata")
        for name, raw in (("native", native), ("arrow", arrow))
    }
    assert drill["native"].totals() == drill["arrow"].totals() and drill["arrow"].totals().pageviews > 0
    assert drill["native"].top("page").equals(drill["arrow"].top("page"))
    assert drill["native"].series("day").equals(drill["arrow"].series("day"))


def test_files_whose_path_reads_as_a_pattern_are_read_through_arrow(evolved: Path, tmp_path: Path) -> None:
    # delta-rs refuses such a table path; a copy of a table's files, opened with Arrow, has one
    root = tmp_path / "home[1]"  # DuckDB would take the brackets for a glob
    shutil.copytree(evolved, root, ignore=shutil.ignore_patterns("_delta_log"))
    files = ds.dataset(
        ".",
        filesystem=fs.SubTreeFileSystem(str(root), fs.LocalFileSystem()),
        partitioning=ds.partitioning(pa.schema({"event_date": pa.date32()}), flavor="hive"),
        format="parquet",
    )
    assert local_files(files, SITE, Range(START, TODAY)) is None
    with open_events(files, SITE, Range(START, TODAY), SCAN_COLUMNS) as con:
        found = con.execute("SELECT count(*) FROM ev").fetchone()
    assert found == (sum(1 for e in EVENTS if e["site_id"] == SITE and not e["is_bot"]),)


def test_a_table_under_a_path_with_spaces_and_percent_signs_is_read_from_its_files(tmp_path: Path) -> None:
    table = tmp_path / "my home 100%" / "pageviews"  # its URI is percent-encoded
    append(table, EVENTS, pa.schema(COLUMNS))
    native = arrow_dataset(DeltaTable(str(table)))
    files = local_files(native, SITE, Range(START, TODAY))
    assert files and all(Path(f).is_file() and "my home 100%" in f for f in files)
    asked = query(BODIES[2])
    assert rows(ExactQuery(native, SITE, GAP_MS).answer(asked)) == rows(
        ExactQuery(dataset(EVENTS), SITE, GAP_MS).answer(asked)
    )
