"""One site's raw events (``raw.pageviews``) in DuckDB: the columns questions read, the view ``ev``
of a site's non-bot events of some dates, the condition of a UTC interval, and sessionising.

Shared by the exact engine (:mod:`query.exact`), the drill-downs (:mod:`query.raw`), the exact
vitals (:mod:`query.vitals`) and the prepared scans (:mod:`query.scans`), so that each reads and
sessionises the events one way.

A local table's events are read by DuckDB's own Parquet reader, from the files of the dates that
can hold the site's events (:func:`local_files`): over 90 days of 10M events, a question reading a
few columns took 0.1-0.15 s instead of 0.7-0.8 s through the Arrow dataset, which stays the way in
for tables on an object store (no DuckDB extension is installed for one) and tables in memory.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
from pyarrow import fs

from query.aggregates import Range
from tally.dimensions import AUDIENCE_DIMENSIONS
from tally.vitals import SCROLL_DEPTH_COLUMN, VITALS

MEMORY_LIMIT = "2GB"  # per question answered from raw events, unless a budget's slot says otherwise
THREADS = 2  # DuckDB threads per question answered from raw events, unless a budget's slot says otherwise
# The memory limit and threads of the raw connections a question opens: a budget's slot sets them for
# the question (api.budget: the API's raw questions share api.raw_memory, each with api.raw_threads);
# the dashboard's keep MEMORY_LIMIT and THREADS.
_MEMORY_LIMIT: ContextVar[str] = ContextVar("tally_raw_memory_limit", default=MEMORY_LIMIT)
_THREADS: ContextVar[int] = ContextVar("tally_raw_threads", default=THREADS)
_CONNECTIONS = itertools.count()  # numbers each raw connection's spill directory (connection_spill_dir)
# What a visit takes from its first event (the visit dimensions besides entry and exit page).
VISIT_ATTRIBUTES = (*AUDIENCE_DIMENSIONS, "referrer", "utm_source", "utm_medium", "utm_content", "utm_term")
# The columns an exact question reads; a prepared scan also answers Core Web Vitals.
COLUMNS = "visitor_id, event_time, event_id, type, path, name, hostname, props, engagement_ms, load_ms, " + ", ".join(
    VISIT_ATTRIBUTES
)
SCAN_COLUMNS = ", ".join([COLUMNS, SCROLL_DEPTH_COLUMN, *(v.column for v in VITALS)])

Interval = tuple[dt.datetime, dt.datetime] | None


_GLOB = "*?[{"  # the characters that make a path a pattern to DuckDB's file readers


def local_files(raw: ds.Dataset, site_id: str, days: Range) -> list[str] | None:
    """The local Parquet files of ``raw`` that can hold the site's events of the dates (their date
    partition, and the site ids their statistics say they hold); None when ``raw`` is not local
    files (an object store, a table in memory), no file can hold them, or a path would read as a
    pattern (a home directory named with ``*``, ``?``, ``[`` or ``{``)."""
    filesystem = getattr(raw, "filesystem", None)
    if not isinstance(filesystem, fs.SubTreeFileSystem) or not isinstance(filesystem.base_fs, fs.LocalFileSystem):
        return None
    dates = (ds.field("event_date") >= days.start) & (ds.field("event_date") <= days.end)
    found = [
        os.path.join(filesystem.base_path, f.path)
        for f in raw.get_fragments(filter=dates & (ds.field("site_id") == site_id))
    ]
    if any(c in path for path in found for c in _GLOB):  # DuckDB would take such a path for a pattern
        return None
    return found or None


def _columns_read(con: duckdb.DuckDBPyConnection, raw: ds.Dataset, held: set[str], columns: str) -> str:
    """The select list of ``columns`` from a source holding the columns ``held``: a column it lacks
    reads as NULL (one a table written by an older Tally lacks, such as ``region``, as NULL::VARCHAR;
    one the table has but none of the files read, of the table's type)."""
    wanted = columns.split(", ")
    typed = {c for c in wanted if c not in held} & set(raw.schema.names)
    types = dict(zip(raw.schema.names, _duckdb_types(con, raw.schema), strict=True)) if typed else {}
    return ", ".join(c if c in held else f"NULL::{types.get(c, 'VARCHAR')} AS {c}" for c in wanted)


def _duckdb_types(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> list[str]:
    """DuckDB's types of an Arrow schema's columns (on the question's own connection: DuckDB's
    module-level default connection is one for the whole process, not safe across threads)."""
    return [str(kind) for kind in con.from_arrow(schema.empty_table()).types]


@contextmanager
def slot_limited(memory: str, threads: int) -> Iterator[None]:
    """Raw connections opened inside the block (in this thread or task, and the worker threads it
    starts with the context copied) get DuckDB's ``memory_limit`` ``memory`` and ``threads``
    instead of :data:`MEMORY_LIMIT` and :data:`THREADS`."""
    memory_token, threads_token = _MEMORY_LIMIT.set(memory), _THREADS.set(threads)
    try:
        yield
    finally:
        _MEMORY_LIMIT.reset(memory_token)
        _THREADS.reset(threads_token)


def memory_limit() -> str:
    """The memory limit of a raw connection opened here now (:func:`slot_limited`, else :data:`MEMORY_LIMIT`)."""
    return _MEMORY_LIMIT.get()


def open_events(
    raw: ds.Dataset, site_id: str, days: Range, columns: str, con: duckdb.DuckDBPyConnection | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view ``ev``: the site's non-bot events of the dates, those columns
    (a column a table written by an older Tally lacks, such as ``region``, reads as NULL).
    ``con``: a connection (a cursor of a DuckDB already open) to add them to instead of a new one."""
    if con is None:
        # Bounded, so that one question cannot take the machine: past the limit DuckDB spills to
        # disk or fails the query (a 400 the engine reports), never the process.
        spill = str(connection_spill_dir())
        con = duckdb.connect(
            config={"memory_limit": memory_limit(), "threads": _THREADS.get(), "temp_directory": spill}
        )
    con.register("raw", raw)  # the way in when the files are not local
    # A view cannot take prepared parameters: the site is a configured id and the dates are
    # dates, quoted as SQL literals here.
    site = site_id.replace("'", "''")
    files = local_files(raw, site_id, days)
    if files is None:
        source, held = "raw", set(raw.schema.names)
        dates = f"AND event_date BETWEEN DATE '{days.start.isoformat()}' AND DATE '{days.end.isoformat()}' "
    else:  # the files hold the dates' events only; columns the older ones lack read as NULL
        paths = ", ".join("'" + path.replace("'", "''") + "'" for path in files)
        source = f"read_parquet([{paths}], union_by_name = true, hive_partitioning = false)"
        held = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        dates = ""
    selected = _columns_read(con, raw, held, columns)
    con.execute(
        f"CREATE TEMP VIEW ev AS SELECT {selected} FROM {source} WHERE site_id = '{site}' "
        f"{dates}AND NOT coalesce(is_bot, false)"
    )
    return con


SPILL_PREFIX = "tally-duckdb-"  # + the process id: the directory DuckDB spills into


def spill_dir() -> Path:
    """Where this process's DuckDBs spill what passes their memory limit: a directory of the process's
    own in the system's temporary directory (DuckDB's default, ``.tmp`` in the working directory,
    would be the project's checkout), holding one of each connection's own (:func:`connection_spill_dir`).
    The first call in a process removes the directories of processes no longer running (one killed
    while spilling leaves its files: gigabytes for a large range)."""
    sweep_spills()
    return Path(tempfile.gettempdir()) / f"{SPILL_PREFIX}{os.getpid()}"


def connection_spill_dir() -> Path:
    """A directory of one connection's own inside the process's (:func:`spill_dir`), which DuckDB
    makes when the connection first spills and removes when it closes. Two DuckDBs of one process
    spilling into the same directory write over each other's files: two 400-day questions at 150 MB
    each crashed the process (a segmentation fault); each in a directory of its own, they ran to their
    end (an answer, or DuckDB's out-of-memory error)."""
    process = spill_dir()
    process.mkdir(mode=0o700, exist_ok=True)  # DuckDB makes only the last directory of the path
    return process / str(next(_CONNECTIONS))


@functools.cache
def sweep_spills() -> None:
    """Remove the spill directories of Tally processes that are no longer running (once per process)."""
    for path in Path(tempfile.gettempdir()).glob(f"{SPILL_PREFIX}*"):
        pid = path.name.removeprefix(SPILL_PREFIX)
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # running, as another user
            continue


def within(interval: Interval, alias: str = "") -> str:
    """SQL condition keeping the events inside a half-open UTC interval (``true`` for None)."""
    if interval is None:
        return "true"
    start, end = (int(t.timestamp() * 1000) for t in interval)
    return f"{alias}event_time >= {start} AND {alias}event_time < {end}"


def visits_sql(source: str, gap_ms: int, database: str | None = None) -> str:
    """Sessionise ``source`` (events) into ``numbered`` (each event with its visit number, and
    ``starts`` = 1 on a visit's first event) and ``visits`` (one row per visit with a page view,
    with the attributes of its first event), with the views' rule (``jobs/sessions.py``).
    ``database``: the attached database the two tables are made in (None: the connection's own
    temporary tables).

    The events are copied once, with a slot for each mark, and the window runs over their keys
    alone (visitor, time, id, and the copy's row id, which also orders events whose keys are
    equal); its marks are written into the slots by row id. A window over every column held them
    all in memory at once (90 days of 10M events ran out of the 2 GB limit), and joining the marks
    back into a second copy took 17-19 s of that range's 50-55 s, writing them in 1.4 s. A visit
    number is a BIGINT (a sum is a HUGEINT): a question joining events to their visits on it took
    0.33 s instead of 2.55 over that range.

    Events without a visitor id are numbered as one visitor's, but make no ``visits`` row: the
    questions join events to visits on the visitor, which never matches a NULL (as the join of a
    visit's first event did before the marks were written into the copy)."""
    # The attributes of a visit's first event (its one row with starts = 1), taken as one struct: an
    # aggregate for each of the 14 took 8.3 s instead of 6.1 over 90 days of 10M events (one run).
    first = f"any_value(struct_pack({', '.join(VISIT_ATTRIBUTES)})) FILTER (WHERE starts = 1) AS first_event"
    attributes = ", ".join(f"first_event.{a} AS {a}" for a in VISIT_ATTRIBUTES)
    create, into = ("CREATE TEMP TABLE ", "temp.main.") if database is None else ("CREATE TABLE ", f"{database}.main.")
    order = "PARTITION BY visitor_id ORDER BY event_time, event_id, r"
    return f"""
        {create}{into}numbered AS SELECT *, 0::INTEGER AS starts, 0::BIGINT AS visit FROM {source};
        CREATE TEMP TABLE visit_marks AS
        WITH marked AS (
            SELECT rowid AS r, visitor_id, event_time, event_id,
                   CASE WHEN event_time - lag(event_time) OVER w < {int(gap_ms)} THEN 0 ELSE 1 END AS starts
            FROM {into}numbered WINDOW w AS ({order})
        )
        SELECT r, starts, (sum(starts) OVER ({order}))::BIGINT AS visit FROM marked;
        UPDATE {into}numbered AS n SET starts = m.starts, visit = m.visit FROM temp.visit_marks m WHERE n.rowid = m.r;
        DROP TABLE temp.visit_marks;
        {create}{into}visits AS
        SELECT * EXCLUDE (first_event), {attributes} FROM (
            SELECT visitor_id, visit, min(event_time) AS started, max(event_time) - min(event_time) AS duration_ms,
                   count(*) FILTER (WHERE type = 'pageview') AS pageviews,
                   arg_min(path, (event_time, event_id)) FILTER (WHERE type = 'pageview') AS entry_page,
                   arg_max(path, (event_time, event_id)) FILTER (WHERE type = 'pageview') AS exit_page,
                   {first}
            FROM {into}numbered WHERE visitor_id IS NOT NULL
            GROUP BY visitor_id, visit HAVING count(*) FILTER (WHERE type = 'pageview') > 0
        )
    """
