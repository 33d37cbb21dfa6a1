"""Import and export benchmark (issue 67): ``tally import plausible`` of a Plausible export of
3 years × 1,000 pages a day, and ``tally export`` of native events with 1,000 pages a day, each
side by side in the same run with DuckDB reading and writing the same files.

Import. A Plausible CSV export ZIP is generated, seeded, into the run's home: 1,096 days, 1,000
pages a day in ``imported_pages`` (1,096,000 rows) and, a day, :data:`ROWS_A_DAY` rows of each
other table (1.87M rows in all, 125 MB stored uncompressed, as Plausible's). Tally's side is what
``tally import plausible`` runs: :func:`imports.plausible.read_export` (the ZIP read, every file
checked) then :func:`imports.store.add_import` (one Delta commit into ``imported.daily``), into a
fresh site in a warehouse of its own each time. DuckDB's side reads the same ten CSV files, taken
out of the ZIP beforehand (not timed), with ``read_csv`` and the same column types into tables in
memory, and counts them. Each round runs both, taking turns at going first; both must hold the
same rows.

Export. ``tally export`` computes from raw events (:mod:`query.export` over the exact path, one
question a table over one read and sessionising of the range's events), not from imports, so
exporting "the same" needs native events: :func:`simulator.synthetic.synthetic_events`, 1,000
visits a day spread over 1,000 pages (each day's first 1,000 page views one of each, the rest
skewed), written to raw.pageviews with delta-rs. Tally's export of the range is timed beside
DuckDB reading the same Delta table's files, sessionising them once with the same rule and writing
the same ten CSV files with ``COPY``; both must write the same rows to each file.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import statistics
import time
import zipfile
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
from deltalake import DeltaTable, write_deltalake

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from imports.plausible import read_export
from imports.store import add_import
from simulator.synthetic import synthetic_events
from tally.log import setup_logging
from tally.plausible_export import TABLES, column_type, file_name
from tally.settings import Settings, SiteSettings, load_settings
from tally.tables import RAW_PAGEVIEWS

SITE = "import.bench.local"
FIRST = dt.date(2023, 1, 1)
DAYS = 1_096  # 3 years
PAGES = 1_000  # a day, in imported_pages and in the native events
# Rows a day of each other table of the export: what a site with 1,000 pages a day might show.
ROWS_A_DAY = {
    "visitors": 1,
    "sources": 40,
    "entry_pages": 250,  # a quarter of the day's pages (of a smaller run's too)
    "exit_pages": 250,
    "custom_events": 6,
    "locations": 120,
    "devices": 3,
    "browsers": 25,
    "operating_systems": 12,
}
NATIVE_DAYS = DAYS  # the same 3 years: written in under a minute (the export itself is most of the run)
NATIVE_VISITS = 1_000  # a day: about 2,600 page views, so that every page is viewed every day
CHUNK_DAYS = 30  # days of native events generated and committed at a time
IMPORT_ROUNDS = 2
THREADS = 2  # DuckDB's, as the exact path's questions (query.raw_events.THREADS)
GAP_MS = 30 * 60 * 1000
_RUNS = itertools.count()  # each run in a process starts its export with the other side


def page_paths(pages: int) -> np.ndarray:
    return np.array([f"/docs/section-{i // 40}/page-{i}" for i in range(pages)])


def rows_a_day(table: str, pages: int) -> int:
    """Rows a day of an export table when the day has ``pages`` pages."""
    if table == "pages":
        return pages
    return pages // 4 if table in ("entry_pages", "exit_pages") else ROWS_A_DAY[table]


def _values(rng: np.random.Generator, table: str, days: int, pages: int) -> dict[str, np.ndarray]:
    """The dimension columns of ``table``: each day its rows' own values, none twice in a day."""
    per_day = rows_a_day(table, pages)
    n = days * per_day
    if table == "visitors":
        return {}
    paths = page_paths(2 * pages)  # a day's pages are half the site's
    vocabulary = {"pages": len(paths), "entry_pages": len(paths), "exit_pages": len(paths)}.get(table, 4 * per_day)
    picked = np.argsort(rng.random((days, vocabulary)), axis=1)[:, :per_day].ravel()
    if table == "pages":
        return {"hostname": np.full(n, "example.com"), "page": paths[picked]}
    if table in ("entry_pages", "exit_pages"):
        return {table.removesuffix("s"): paths[picked]}
    if table == "sources":
        names = np.array(["Google", "Bing", "DuckDuckGo", "Hacker News", "GitHub", "Newsletter", "reddit.com", ""])
        return {
            "source": names[picked % len(names)],
            "referrer": np.char.add("https://ref-", picked.astype(str)),
            "utm_source": np.where(picked % 3 == 0, names[picked % len(names)], ""),
            "utm_medium": np.where(picked % 3 == 0, "social", ""),
            "utm_campaign": np.where(picked % 3 == 0, np.char.add("campaign-", (picked % 9).astype(str)), ""),
            "utm_content": np.full(n, ""),
            "utm_term": np.full(n, ""),
        }
    if table == "custom_events":
        return {
            "name": np.char.add("Event ", picked.astype(str)),
            "link_url": np.full(n, ""),
            "path": np.full(n, ""),
        }
    if table == "locations":
        countries = np.array(["US", "DE", "FR", "GB", "IN", "BR", "JP", "NL", "ES", "CA", "PL", "SE"])
        country = countries[picked % len(countries)]
        region = np.char.add(np.char.add(country, "-R"), (picked // len(countries)).astype(str))
        return {"country": country, "region": region, "city": 2_900_000 + picked}
    kind = {"devices": "device", "browsers": "browser", "operating_systems": "operating_system"}[table]
    values = {"devices": ["Desktop", "Mobile", "Tablet"], "browsers": ["Chrome", "Firefox", "Safari", "Edge"]}
    names = np.array(values.get(table, ["Windows", "Mac", "iOS", "Android", "Linux", "ChromeOS"]))
    columns = {kind: names[picked % len(names)]}
    if table != "devices":
        columns[f"{kind}_version"] = (picked // len(names)).astype(str)
    return columns


def _metrics(rng: np.random.Generator, metrics: tuple[str, ...], n: int) -> dict[str, np.ndarray]:
    """Whole-number metrics that hold together: visits of the visitors, bounces of the visits, …"""
    visitors = rng.geometric(0.05, n)
    visits = visitors + rng.integers(0, visitors // 4 + 1)
    pageviews = visits + rng.integers(0, 2 * visits + 1)
    given = {
        "visitors": visitors,
        "visits": visits,
        "pageviews": pageviews,
        "bounces": rng.integers(0, visits + 1),
        "visit_duration": visits * rng.integers(5, 300, n),
        "entrances": visits,
        "exits": visits,
        "events": visitors + rng.integers(0, visitors + 1),
        "total_scroll_depth": pageviews * rng.integers(10, 100, n),
        "total_scroll_depth_visits": visits,
        "total_time_on_page": pageviews * rng.integers(5, 200, n),
        "total_time_on_page_visits": visits,
    }
    return {m: given[m] for m in metrics}


def write_export(path: Path, days: int, pages: int, seed: int = 67) -> int:
    """A Plausible export ZIP of ``days`` days from :data:`FIRST` at ``path``; returns its rows."""
    rng = np.random.default_rng(seed)
    last = FIRST + dt.timedelta(days=days - 1)
    dates = pa.array([FIRST + dt.timedelta(days=d) for d in range(days)], pa.date32())
    rows = 0
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:  # stored, as Plausible's
        for name, fmt in TABLES.items():
            columns = _values(rng, name, days, pages)
            n = days * rows_a_day(name, pages)
            columns |= _metrics(rng, fmt.metrics, n)
            table = pa.table(
                {"date": pc.take(dates, np.repeat(np.arange(days), n // days))}
                | {c: pa.array(columns[c], column_type(c)) for c in fmt.columns if c != "date"}
            )
            text = pa.BufferOutputStream()  # names and text quoted, numbers bare: ClickHouse's CSVWithNames
            pcsv.write_csv(table, text, pcsv.WriteOptions(quoting_style="needed"))
            archive.writestr(f"{fmt.file_stem}_{FIRST:%Y%m%d}_{last:%Y%m%d}.csv", text.getvalue().to_pybytes())
            rows += n
    return rows


def _settings(home: Path, warehouse: str) -> Settings:
    """Settings of a private home (``home``) with a warehouse of its own and the benchmark's site."""
    base = load_settings()
    settings = dataclasses.replace(
        base, home=str(home), warehouse=dataclasses.replace(base.warehouse, path=str(home / warehouse))
    )
    return settings.with_sites((SiteSettings(SITE),))


def tally_import(settings: Settings, archive: Path) -> tuple[float, float, int]:
    """``tally import plausible``'s path: seconds to read and check the ZIP, seconds to store it, rows stored."""
    began = time.perf_counter()
    export = read_export(archive)
    read = time.perf_counter() - began
    added = add_import(settings, SITE, export, origin="plausible", now=dt.datetime.now(dt.UTC))
    return read, time.perf_counter() - began - read, sum(added.record.rows.values())


def _duckdb_type(column: str) -> str:
    kind = column_type(column)
    return "DATE" if kind == pa.date32() else "BIGINT" if kind == pa.int64() else "VARCHAR"


def duckdb_import(folder: Path) -> tuple[float, int]:
    """Seconds DuckDB takes to read the export's CSV files into tables in memory, and their rows."""
    con = duckdb.connect(config={"threads": THREADS})
    began, rows = time.perf_counter(), 0
    for path in sorted(folder.glob("*.csv")):
        fmt = file_name(path.name).table
        types = ", ".join(f"'{c}': '{_duckdb_type(c)}'" for c in fmt.columns)
        con.execute(
            f"CREATE TABLE {fmt.name} AS SELECT * FROM read_csv(?, header = true, delim = ',', quote = '\"',"
            f" auto_detect = false, columns = {{{types}}})",
            [str(path)],
        )
        found = con.execute(f"SELECT count(*) FROM {fmt.name}").fetchone()
        rows += found[0] if found else 0
    seconds = time.perf_counter() - began
    con.close()
    return seconds, rows


def _paged(events: pa.Table, paths: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """``events`` over ``paths``: each day's first page views not of bots (in a random order) one of
    each page, the rest skewed to the first pages; an engagement or custom event on its visitor's
    last page."""
    kinds = events.column("type").to_numpy(zero_copy_only=False)
    days = events.column("event_date").cast(pa.int32()).to_numpy()
    visitors = pc.dictionary_encode(events.column("visitor_id")).combine_chunks().indices.to_numpy()
    times = events.column("event_time").to_numpy()
    views = kinds == "pageview"
    weights = 1 / np.arange(1, len(paths) + 1) ** 1.1
    page = np.where(views, rng.choice(len(paths), size=len(kinds), p=weights / weights.sum()), -1)
    counted = np.flatnonzero(views & ~events.column("is_bot").to_numpy(zero_copy_only=False))  # bots are not
    order = counted[np.lexsort((rng.random(len(counted)), days[counted]))]
    rank = np.arange(len(order)) - np.searchsorted(days[order], days[order])  # its place in its day
    page[order] = np.where(rank < len(paths), rank, page[order])
    by_visitor = np.lexsort((times, visitors))
    viewed = page[by_visitor]
    last_view = np.maximum.accumulate(np.where(viewed >= 0, np.arange(len(viewed)), 0))
    page[by_visitor] = np.maximum(viewed[last_view], 0)
    path = pa.array(paths[page])
    events = events.set_column(events.schema.get_field_index("path"), "path", path)
    url = pc.binary_join_element_wise(f"https://{SITE}", path, "")
    return events.set_column(events.schema.get_field_index("url"), "url", url)


def write_native(settings: Settings, days: int, pages: int, visits: int) -> int:
    """Synthetic events of ``visits`` visits a day over ``pages`` pages, ``days`` days from :data:`FIRST`."""
    rng, paths, written = np.random.default_rng(7), page_paths(pages), 0
    start = dt.datetime.combine(FIRST, dt.time(), dt.UTC)
    for chunk in range(0, days, CHUNK_DAYS):
        span = min(CHUNK_DAYS, days - chunk)
        events = synthetic_events(
            visits=visits * span,
            start=start + dt.timedelta(days=chunk),
            span=dt.timedelta(days=span),
            site_id=SITE,
            seed=chunk,
        )
        events = _paged(events, paths, rng)
        write_deltalake(settings.table_uri(RAW_PAGEVIEWS), events, mode="append", partition_by=["event_date"])
        written += events.num_rows
    return written


def tally_export(settings: Settings, first: dt.date, last: dt.date, out: Path) -> tuple[float, dict[str, int], str]:
    """``tally export``'s path (query.export over the exact path): seconds, the rows of each table,
    and the seconds each table took (its question and its file), as text."""
    from query.export import export_rows, write_zip
    from query.sources import Sources

    written: dict[str, int] = {}
    each: list[str] = []
    marks = [time.perf_counter()]  # when each file was written

    def done(name: str, rows: int) -> None:
        table = file_name(name).table.name
        written[table] = rows
        marks.append(time.perf_counter())
        each.append(f"{table} {marks[-1] - marks[-2]:.0f} s")

    exact = Sources(settings).exact(SITE, prepared=True)  # as tally export asks: the range sessionised once
    assert exact is not None, "raw.pageviews is empty: the native events were not written"
    with out.open("wb") as archive:
        write_zip(archive, export_rows(exact, SITE, first, last, "UTC"), first, last, progress=done)
    return marks[-1] - marks[0], written, ", ".join(each)


# How DuckDB's baseline asks each export table, with the exact path's meaning (query.exact): for each
# dimension column, its value for an event ``e`` and for a visit ``v``; whether the events counted
# need their visits (a dimension a visit owns); whether a visit's row comes from its events (a
# dimension its events hold, such as their pages, rather than one of its first event's).
@dataclasses.dataclass(frozen=True)
class Asked:
    dimensions: dict[str, tuple[str, str]]
    joined: bool = False
    by_events: bool = False
    where: str = "true"  # on the events counted
    kept: str = "true"  # on the table's rows, as query.export keeps them


def _each(column: str, event: str | None = None) -> dict[str, tuple[str, str]]:
    return {column: (f"e.{event or column}", f"v.{event or column}")}


_NAME = "CASE WHEN e.type = 'pageview' THEN 'pageview' ELSE e.name END"  # the exact path's event:name
ASKED = {
    "visitors": Asked({}),
    "sources": Asked(
        _each("source")
        | _each("referrer")
        | _each("utm_source")
        | _each("utm_medium")
        | _each("utm_campaign", "campaign")
        | _each("utm_content")
        | _each("utm_term")
    ),
    "pages": Asked({"hostname": ("e.hostname", "e.hostname"), "page": ("e.path", "e.path")}, by_events=True),
    "entry_pages": Asked({"entry_page": ("v.entry_page", "v.entry_page")}, joined=True),
    "exit_pages": Asked({"exit_page": ("v.exit_page", "v.exit_page")}, joined=True),
    "custom_events": Asked(
        {"name": (_NAME, _NAME)},
        by_events=True,
        where="e.type IN ('pageview', 'event')",
        kept="name IS NOT NULL AND name NOT IN ('', 'pageview')",
    ),
    "locations": Asked(_each("country") | _each("region"), kept="country IS NOT NULL AND country <> ''"),
    "devices": Asked(_each("device")),
    "browsers": Asked(_each("browser")),
    "operating_systems": Asked(_each("operating_system", "os")),
}
# Each export metric from the summed counts, as query.export fills them (visit_duration unrounded seconds:
# Python's round, to even).
_SESSION = {
    "visitors": "visitors",
    "visits": "visits",
    "visit_duration": "round_even(duration_ms / 1000, 0)::BIGINT",
    "bounces": "bounces",
    "pageviews": "visit_pageviews",
}
METRICS = {
    "visitors": _SESSION | {"pageviews": "pageviews"},
    "pages": {"visits": "visits", "visitors": "visitors", "pageviews": "pageviews"},
    "entry_pages": _SESSION | {"entrances": "visits"},
    "exit_pages": _SESSION | {"exits": "visits"},
    "custom_events": {"visitors": "visitors", "events": "events"},
}
# What a visit takes from its first event: the visit values the tables above ask, but entry and exit pages.
FIRST_EVENT = tuple(
    dict.fromkeys(v[2:] for a in ASKED.values() if not a.joined for _, v in a.dimensions.values() if v[:2] == "v.")
)
EVENT_COLUMNS = ", ".join(("visitor_id", "event_time", "event_id", "type", "path", "name", "hostname", *FIRST_EVENT))


def _column(column: str, keys: list[str], measured: dict[str, str]) -> str:
    """An export column's SQL: a dimension asked, a metric measured, or what Tally does not keep (0 or "")."""
    if column == "date" or column in keys:
        return column
    if column in measured:
        return f"{measured[column]} AS {column}"
    return f"{0 if column_type(column) == pa.int64() else repr('')} AS {column}"


def _table_sql(name: str) -> str:
    """The rows of one export table, in its columns: each row's event counts and visit sums added up."""
    asked, fmt = ASKED[name], TABLES[name]
    keys = list(asked.dimensions)
    day = "make_timestamp({} * 1000)::DATE AS date"
    events = "numbered e JOIN visits v USING (visitor_id, visit)" if asked.joined else "ev e"
    event_keys = ", ".join([day.format("e.event_time"), *(f"{e} AS {k}" for k, (e, _) in asked.dimensions.items())])
    visit_keys = ", ".join([day.format("v.started"), *(f"{v} AS {k}" for k, (_, v) in asked.dimensions.items())])
    if asked.by_events:  # a visit counts once under each value its events hold
        visits = (
            f"(SELECT DISTINCT {visit_keys}, v.visitor_id, v.visit FROM numbered e JOIN visits v"
            " USING (visitor_id, visit)) m JOIN visits v USING (visitor_id, visit)"
        )
        visit_keys = ", ".join(["m.date", *(f"m.{k}" for k in keys)])
    else:
        visits = "visits v"
    sums = "visitors, pageviews, events, visits, bounces, duration_ms, visit_pageviews"
    measured = METRICS.get(name, _SESSION)
    columns = [_column(c, keys, measured) for c in fmt.columns]
    totals = ", ".join(f"sum({s})::BIGINT AS {s}" for s in sums.split(", "))
    return f"""
        SELECT {", ".join(columns)} FROM (
            SELECT {", ".join(["date", *keys])}, {totals} FROM (
                SELECT {event_keys}, count(DISTINCT e.visitor_id) AS visitors,
                       count(*) FILTER (WHERE e.type = 'pageview') AS pageviews,
                       count(*) FILTER (WHERE e.type = 'event') AS events,
                       0 AS visits, 0 AS bounces, 0 AS duration_ms, 0 AS visit_pageviews
                FROM {events} WHERE {asked.where} GROUP BY ALL
                UNION ALL
                SELECT {visit_keys}, 0, 0, 0, count(*), count(*) FILTER (WHERE v.pageviews = 1),
                       coalesce(sum(v.duration_ms), 0), coalesce(sum(v.pageviews), 0)
                FROM {visits} GROUP BY ALL
            ) GROUP BY ALL
        ) WHERE {asked.kept}"""


def duckdb_export(settings: Settings, first: dt.date, last: dt.date, folder: Path) -> tuple[float, dict[str, int]]:
    """Seconds DuckDB takes to read the range's events from the Delta table's files, sessionise them
    once and write the ten CSV files; and the rows of each."""
    folder.mkdir(parents=True, exist_ok=True)
    spill = str(folder / "spill")
    con = duckdb.connect(
        config={"threads": THREADS, "memory_limit": "2GB", "temp_directory": spill, "preserve_insertion_order": False}
    )
    began = time.perf_counter()
    days = [("event_date", ">=", first.isoformat()), ("event_date", "<=", last.isoformat())]
    files = DeltaTable(settings.table_uri(RAW_PAGEVIEWS)).file_uris(file_pruning_predicate=days)
    con.execute(
        f"CREATE TABLE ev AS SELECT {EVENT_COLUMNS} FROM read_parquet(?, hive_partitioning = false)"
        " WHERE site_id = ? AND NOT coalesce(is_bot, false)",
        [files, SITE],
    )
    # The window runs over the events' keys alone, its visit numbers joined back: over every column it
    # held them all in memory at once (3 years of 4.8M events ran out of the 2 GB), as the exact path found.
    order = "PARTITION BY visitor_id ORDER BY event_time, event_id"
    con.execute(f"""
        CREATE TABLE marks AS SELECT r, sum(starts) OVER ({order}) AS visit FROM (
            SELECT rowid AS r, visitor_id, event_time, event_id,
                   CASE WHEN event_time - lag(event_time) OVER ({order}) < {GAP_MS} THEN 0 ELSE 1 END AS starts
            FROM ev)""")
    con.execute("CREATE TABLE numbered AS SELECT ev.*, marks.visit FROM ev JOIN marks ON ev.rowid = marks.r")
    first_event = ", ".join(f"first_event.{c} AS {c}" for c in FIRST_EVENT)
    con.execute(f"""
        CREATE TABLE visits AS SELECT * EXCLUDE (first_event), {first_event} FROM (
            SELECT visitor_id, visit, min(event_time) AS started, max(event_time) - min(event_time) AS duration_ms,
                   count(*) FILTER (WHERE type = 'pageview') AS pageviews,
                   arg_min(path, (event_time, event_id)) FILTER (WHERE type = 'pageview') AS entry_page,
                   arg_max(path, (event_time, event_id)) FILTER (WHERE type = 'pageview') AS exit_page,
                   arg_min(struct_pack({", ".join(FIRST_EVENT)}), (event_time, event_id)) AS first_event
            FROM numbered WHERE visitor_id IS NOT NULL GROUP BY visitor_id, visit HAVING pageviews > 0)""")
    written = {}
    for name, fmt in TABLES.items():
        path = folder / f"{fmt.file_stem}_{first:%Y%m%d}_{last:%Y%m%d}.csv"
        quoted = ", ".join(c for c in fmt.columns if column_type(c) != pa.int64())
        done = con.execute(f"COPY ({_table_sql(name)}) TO '{path}' (HEADER, FORCE_QUOTE ({quoted}))").fetchone()
        written[name] = done[0] if done else 0
    seconds = time.perf_counter() - began
    con.close()
    return seconds, written


def _import_rounds(home: Path, archive: Path, rounds: int) -> dict[str, list[float]]:
    """``rounds`` imports of the archive by each side, taking turns at going first: seconds of each."""
    folder = home / "csv"
    with zipfile.ZipFile(archive) as opened:
        opened.extractall(folder)  # DuckDB reads files, not a ZIP: taken out once, not timed
    took: dict[str, list[float]] = {"read": [], "store": [], "duckdb": []}
    for n in range(rounds):
        stored = read = 0
        for side in ("tally", "duckdb") if n % 2 == 0 else ("duckdb", "tally"):
            if side == "tally":  # a fresh site in a warehouse of its own: nothing imported before
                reading, storing, stored = tally_import(_settings(home, f"warehouse-import-{n}"), archive)
                took["read"].append(reading)
                took["store"].append(storing)
            else:
                seconds, read = duckdb_import(folder)
                took["duckdb"].append(seconds)
        if stored != read:
            raise AssertionError(f"import round {n + 1}: Tally stored {stored:,} rows, DuckDB read {read:,}")
        print(
            f"import round {n + 1}/{rounds}: read {took['read'][-1]:.1f} s, store {took['store'][-1]:.1f} s,"
            f" DuckDB {took['duckdb'][-1]:.1f} s",
            flush=True,
        )
    return took


def _exports(home: Path, days: int, tally_first: bool) -> tuple[dict[str, float], int, str]:
    """One export of the native events' range by each side: seconds of each, the CSV rows (the same
    on both sides, checked file by file), and Tally's seconds per table."""
    settings = _settings(home, "warehouse-native")
    last = FIRST + dt.timedelta(days=days - 1)
    took: dict[str, float] = {}
    rows: dict[str, dict[str, int]] = {}
    each = ""
    for side in ("tally", "duckdb") if tally_first else ("duckdb", "tally"):
        if side == "tally":
            took[side], rows[side], each = tally_export(settings, FIRST, last, home / "tally-export.zip")
        else:
            took[side], rows[side] = duckdb_export(settings, FIRST, last, home / "duckdb-export")
        print(f"export by {side}: {took[side]:.0f} s, {sum(rows[side].values()):,} rows", flush=True)
    if rows["tally"] != rows["duckdb"]:
        differ = {t: (rows["tally"].get(t), rows["duckdb"].get(t)) for t in TABLES}
        raise AssertionError(f"Tally's export and DuckDB's wrote different rows (Tally, DuckDB): {differ}")
    return took, sum(rows["tally"].values()), each


DUCKDB_IMPORT = "import: DuckDB read_csv of the same files into memory"
DUCKDB_EXPORT = "export: DuckDB over the same Delta table, sessionised once, COPY to the same ten CSV files"


@in_temporary_home("import")
def measure(
    home: Path, quick: bool = False, *, days: int | None = None, native_days: int | None = None
) -> list[Figure]:
    """One run: the export ZIP generated and imported both ways (rounds in turns), then the native
    events written and exported both ways."""
    days = days or (60 if quick else DAYS)
    native_days = native_days or (20 if quick else NATIVE_DAYS)
    pages, visits = (100, 300) if quick else (PAGES, NATIVE_VISITS)
    tally_first = next(_RUNS) % 2 == 0
    archive = home / "export.zip"
    began = time.perf_counter()
    rows = write_export(archive, days, pages)
    size = archive.stat().st_size / 1e6
    print(f"export ZIP: {rows:,} rows, {size:,.0f} MB, in {time.perf_counter() - began:.0f} s", flush=True)
    took = _import_rounds(home, archive, IMPORT_ROUNDS)
    read, store = statistics.median(took["read"]), statistics.median(took["store"])
    tally = statistics.median(a + b for a, b in zip(took["read"], took["store"], strict=True))
    duck = statistics.median(took["duckdb"])

    began = time.perf_counter()
    events = write_native(_settings(home, "warehouse-native"), native_days, pages, visits)
    print(f"native events: {events:,} over {native_days} days, in {time.perf_counter() - began:.0f} s", flush=True)
    exported, csv_rows, each = _exports(home, native_days, tally_first)
    rounds = f"median of {IMPORT_ROUNDS} rounds, taking turns at going first"
    first = "Tally" if tally_first else "DuckDB"
    return [
        Figure(
            "import: rows in the export", rows, "rows", note=f"{days:,} days × {pages:,} pages a day, {size:,.0f} MB"
        ),
        Figure("import: read and check the ZIP (read_export)", read, "s", baseline=DUCKDB_IMPORT, note=rounds),
        Figure("import: store it in one Delta commit (add_import)", store, "s", note="a fresh site and warehouse"),
        Figure("import: tally import plausible, in all", tally, "s", baseline=DUCKDB_IMPORT),
        Figure("import: tally import plausible, rows/s", rows / tally, "rows/s"),
        Figure(DUCKDB_IMPORT, duck, "s", note=f"{THREADS} threads; the files taken out of the ZIP beforehand, untimed"),
        Figure("import: DuckDB, rows/s", rows / duck, "rows/s"),
        Figure(
            "export: native events in the range",
            events,
            "events",
            note=f"{native_days:,} days × {pages:,} pages a day, {visits:,} visits a day",
        ),
        Figure("export: CSV rows written", csv_rows, "rows", note="the same in each of the ten files on both sides"),
        Figure("export: tally export", exported["tally"], "s", baseline=DUCKDB_EXPORT, note=f"{first} first; {each}"),
        Figure("export: tally export, CSV rows/s", csv_rows / exported["tally"], "rows/s"),
        Figure(DUCKDB_EXPORT, exported["duckdb"], "s", note=f"{THREADS} threads and 2 GB, as each exact question"),
        Figure("export: DuckDB, CSV rows/s", csv_rows / exported["duckdb"], "rows/s"),
    ]


TITLE = "Import and export: a Plausible export of 3 years × 1,000 pages a day, side by side with DuckDB"
NOTE = (
    "One run (about 4 minutes on an idle machine, most of it Tally's export). Import: a seeded Plausible export"
    " ZIP of 1,096 days,"
    " 1,000 pages a day in imported_pages and plausible sizes for the nine other tables (1.87M rows, stored"
    " uncompressed as Plausible's), imported as `tally import plausible` does (read_export, then add_import into"
    " a fresh site and warehouse) and read by DuckDB (read_csv with the same column types into tables in memory,"
    " a count each, 2 threads, from the files taken out of the ZIP beforehand); 2 rounds, taking turns at going"
    " first, each checking that both hold the same rows. Export: `tally export` computes from raw events, not"
    " from imports, so the same 3 years are written as native events (simulator.synthetic, 1,000 visits a day"
    " over 1,000 pages, every page viewed every day: 4.8M events in raw.pageviews) and exported by query.export"
    " (ten questions of the exact path over one read and sessionising of the range, as `tally export` asks"
    " them), side by side with DuckDB"
    " reading the same Delta table's files, sessionising once with the same rule and writing the same ten CSV"
    " files with COPY (2 threads and 2 GB, as each exact question; not zipped); both must write the same rows to"
    " each file. The export runs once a run, Tally first."
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.import_export", description=__doc__)
    parser.add_argument("--days", type=int, default=DAYS, help=f"days of the Plausible export (default {DAYS:,})")
    parser.add_argument(
        "--native-days", type=int, default=NATIVE_DAYS, help=f"days of native events exported (default {NATIVE_DAYS:,})"
    )
    parser.add_argument("--quick", action="store_true", help="60 days, 20 of native events, 100 pages (a smoke test)")
    args = parser.parse_args(argv)
    setup_logging()
    print_figures(measure(True) if args.quick else measure(False, days=args.days, native_days=args.native_days))


if __name__ == "__main__":
    main()
