"""Prepared scans: one site's raw events of a range, read once per table version into DuckDB and
sessionised there, for every drill-down question over the range (the dashboard's filtered page
asks about twenty: :class:`query.exact.ExactQuery`, :class:`query.vitals.ExactVitals`). Which
scans a process keeps is :mod:`query.scan_cache`'s.

A running archiver commits a version of ``raw.pageviews`` every few seconds, by adding files. The
scan of a newer version is built from the scan of the one before when every file that one read
is still in the table and the columns it read kept their types: only the added files are read,
and only the visitors whose events they hold are sessionised again, over all their events. The
new version's tables are then views: the read scan's rows but those visitors', and theirs
sessionised again (a layer over the read scan, which is not copied: copying 1M events took 2.6 s
of the 2.8 s an extension took). The version whose re-sessionised events pass a tenth of the
read's is copied into a scan of its own instead.

A compaction (the archiver's of its recent dates every 100 commits, ``archiver/tables.py``, or
``tally maintain``'s) removes files but writes their rows again: the table's log
(:mod:`query.delta_log`) says which, and the scan follows it, reading the rows added since from
the files that hold them, or held them until the compaction (still on disk until a vacuum). Any
other removal (a forgotten visitor) reads the range again. Either way a scan's tables are those a
read of its version gives, row for row and type for type (tests/unit/test_query_scans.py).
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow.dataset as ds

from query import delta_log
from query.aggregates import Range
from query.raw_events import SCAN_COLUMNS, Interval, open_events, visits_sql, within
from tally.log import kv

log = logging.getLogger("tally.query.scans")

# The version whose re-sessionised events (the touched visitors' old and new) pass 1/COPY_PAST of
# the read's is copied into a scan of its own: redoing them at every version would cost more.
COPY_PAST = 10
_DATABASES = itertools.count()  # each scan's tables are in an in-memory database of its own: scan_<n>
_SAME_VISITOR = "visitor_id IS NOT DISTINCT FROM touched.visitor_id"  # NULL ids are one visitor, as in a read
Columns = tuple[tuple[str, str], ...]  # the scanned columns the table has, with their Arrow types


def _files(raw: ds.Dataset) -> frozenset[str] | None:
    """The files a dataset reads (None for one in memory: its scans are never extended)."""
    return frozenset(raw.files) if isinstance(raw, ds.FileSystemDataset) else None


def _columns(raw: ds.Dataset) -> Columns:
    """The scanned columns ``raw`` has and their types (a missing one is read as NULL::VARCHAR)."""
    names = set(raw.schema.names)
    return tuple((c, str(raw.schema.field(c).type)) for c in SCAN_COLUMNS.split(", ") if c in names)


def _detach(con: duckdb.DuckDBPyConnection, database: str) -> None:
    """Free a scan's tables once nothing holds the scan (no question reads it, no range keeps it)."""
    try:
        with con.cursor() as cursor:
            cursor.execute(f"DETACH DATABASE IF EXISTS {database}")
    except duckdb.Error:  # the DuckDB itself was closed first: its memory went with it
        log.debug("detaching a prepared scan failed", extra=kv(database=database), exc_info=True)


class PreparedScan:
    """The events of one site's range at one table version, in an in-memory DuckDB database of
    their own (``numbered``, ``visits``, and ``evr``: ``numbered``'s events), sessionised once.

    Every question over the range reads these tables instead of scanning and sessionising the raw
    events again, each filter being a ``WHERE`` over the same events (a visit matches when one of
    its events does). Questions run side by side, each on a cursor of its own.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        database: str,
        *,
        files: frozenset[str] | None,
        columns: Columns,
        rows: int,
        read: PreparedScan | None = None,
        version: int | None = None,
    ) -> None:
        self.con = con  # the DuckDB the database is attached to, shared by the range's versions
        self.database = database
        self.files = files  # the table's files this scan holds the events of
        self.columns = columns
        self.rows = rows  # events read from the table (a layer: those of the scan it lies over)
        # A layer's tables are views over ``read``'s tables (held here, so they outlive it) and its
        # own: ``fresh`` (every event added since that read), ``touched`` (their visitors), and
        # ``numbered_again`` and ``visits_again`` (those visitors sessionised again).
        self.read_scan = read
        self.version = version  # the table version whose files ``files`` are (None: unknown)
        # Detached when the scan is dropped and its last reader is done (readers hold the scan).
        weakref.finalize(self, _detach, con, database)

    @classmethod
    def read(
        cls, raw: ds.Dataset, site_id: str, days: Range, interval: Interval, gap_ms: int, *, version: int | None = None
    ) -> PreparedScan:
        """Read the range's events from ``raw`` (the table's ``version``) and sessionise them."""
        database = f"scan_{next(_DATABASES)}"
        con = open_events(raw, site_id, days, SCAN_COLUMNS)
        con.execute(f"CREATE TEMP VIEW scanned AS SELECT * FROM ev WHERE {within(interval)}")
        # Kept compressed, as DuckDB keeps a file: 1M events over 30 days took 14 MB instead of 73,
        # and a question over them about 10 ms longer.
        con.execute(f"ATTACH ':memory:' AS {database} (COMPRESS)")
        # The copy's rows in any order (DuckDB then writes them from both threads at once: 90 days
        # of 10M events copied in 15.6 s instead of 21.0). Its row ids order only events of equal
        # keys (the same id at the same time: one event kept twice, a beacon replayed after the
        # archiver's dedup horizon, whose rows are alike); every question orders its own rows.
        # The setting is the whole DuckDB's, and this one is the scan's own, not yet shared.
        con.execute("SET preserve_insertion_order = false")
        try:
            con.execute(visits_sql("temp.scanned", gap_ms, database))  # the one read of the dataset
        finally:
            con.execute("RESET preserve_insertion_order")
        _events_view(con, database)
        con.execute("DROP VIEW temp.scanned; DROP VIEW temp.ev")
        con.unregister("raw")  # the events are copied: the dataset's files are not read again
        rows = _count(con, f"{database}.main.numbered")
        return cls(con, database, files=_files(raw), columns=_columns(raw), rows=rows, version=version)

    def extended(
        self, raw: ds.Dataset, site_id: str, days: Range, interval: Interval, gap_ms: int, *, version: int | None = None
    ) -> PreparedScan | None:
        """The scan of a newer ``version`` (``raw``) of the table, from this one and the rows added
        since; this scan itself when they hold none of the range's events. None (a read then gives
        the new version's tables) when a column's type changed, or files this scan read were removed
        other than by a compaction it can follow (:meth:`_rewritten`)."""
        held, files = self.files, _files(raw)
        if held is None or files is None or _columns(raw) != self.columns:
            return None
        if held <= files:  # only appends since
            added: list[ds.Fragment] | None = [f for f in raw.get_fragments() if f.path not in held]
        else:
            added = self._rewritten(raw, files, version)
        if added is None:
            return None
        dataset = ds.FileSystemDataset(added, raw.schema, raw.format, raw.filesystem)
        with self.con.cursor() as cursor:
            open_events(dataset, site_id, days, SCAN_COLUMNS, con=cursor)
            cursor.execute(f"CREATE TEMP TABLE fresh AS SELECT * FROM ev WHERE {within(interval)}")
            cursor.unregister("raw")
            if not _count(cursor, "fresh"):
                # The same events: this scan is the new version's too. Holding the newer files, it
                # can no longer be extended to a version between the two; that one is read.
                self.files, self.version = files, version
                return self
            read = self.read_scan or self
            if self.read_scan is not None:  # every event since the read, not only since this layer
                cursor.execute(f"INSERT INTO fresh BY NAME SELECT * FROM {self.database}.main.fresh")
            database = f"scan_{next(_DATABASES)}"
            scan = PreparedScan(
                self.con, database, files=files, columns=self.columns, rows=read.rows, read=read, version=version
            )
            _sessionise_again(cursor, read.database, gap_ms)
            if _count(cursor, "again") * COPY_PAST > read.rows:
                _copied(cursor, read.database, scan.database)
                scan.read_scan, scan.rows = None, _count(cursor, f"{scan.database}.main.numbered")
            else:
                _layer(cursor, read.database, scan.database)
            return scan

    def _rewritten(self, raw: ds.Dataset, files: frozenset[str], version: int | None) -> list[ds.Fragment] | None:
        """The files holding the rows added since this scan's version when files it read were
        removed: None unless every removal since was a rewrite of the same rows (a compaction).

        The table's commits are followed one by one (at most ``delta_log.MAX_COMMITS``). A
        compaction's new files hold the rows of the files it removed: rows this scan holds, and
        rows added since that it has to read, from the removed files themselves (None when a vacuum
        deleted one). A file is taken with the partition values of the commit that added it."""
        assert self.files is not None
        found = None if self.version is None or version is None else delta_log.commits(raw, self.version, version)
        if found is None:
            return None
        held: set[str] = set(self.files)
        pending: dict[str, delta_log.Partition] = {}  # added since, rows to read
        gone: dict[str, delta_log.Partition] = {}  # of those, the ones a compaction removed
        for commit in found:
            if commit.added.keys() & (held | gone.keys()):  # a file added twice: not what delta-rs writes
                return None
            if not commit.rewrite:
                if commit.removed:  # rows went (a forgotten visitor)
                    return None
                pending |= commit.added
                continue
            removed = commit.removed.keys()
            if not removed <= held | pending.keys():
                return None
            gone |= {path: pending.pop(path) for path in removed & pending.keys()}
            held = (held - removed) | commit.added.keys()
        if held | pending.keys() != files or held & pending.keys():
            return None
        if not all(delta_log.exists(raw, path) for path in gone):
            return None
        fragments = [f for f in raw.get_fragments() if f.path in pending]
        return fragments + [delta_log.fragment(raw, path, partition) for path, partition in gone.items()]

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of this question's own to the scan's database (closed after)."""
        cursor = self.con.cursor()
        try:
            cursor.execute(f"USE {self.database}")
            yield cursor
        finally:
            cursor.close()


def _count(cursor: duckdb.DuckDBPyConnection, table: str) -> int:
    found = cursor.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(found[0]) if found else 0


def _events_view(con: duckdb.DuckDBPyConnection, database: str) -> None:
    con.execute(f"CREATE VIEW {database}.main.evr AS SELECT * EXCLUDE (starts, visit) FROM {database}.main.numbered")


def _sessionise_again(cursor: duckdb.DuckDBPyConnection, read: str, gap_ms: int) -> None:
    """From ``temp.fresh`` (the events added since the ``read`` scan), the cursor's temporary tables
    ``touched`` (their visitors), ``again`` (every event of those visitors, read and added), and
    ``numbered`` and ``visits``: ``again`` sessionised (a late event can join, split or start any visit)."""
    cursor.execute(f"""
        CREATE TEMP TABLE touched AS SELECT DISTINCT visitor_id FROM fresh;
        CREATE TEMP TABLE again AS
            SELECT o.* EXCLUDE (starts, visit) FROM {read}.main.numbered o SEMI JOIN touched ON o.{_SAME_VISITOR}
            UNION ALL BY NAME SELECT * FROM fresh;
    """)
    cursor.execute(visits_sql("temp.again", gap_ms))


def _kept_rows(read: str, table: str, touched: str) -> str:
    """The ``read`` scan's rows of ``table`` but those of the visitors in ``touched``."""
    return f"SELECT o.* FROM {read}.main.{table} o ANTI JOIN {touched} touched ON o.{_SAME_VISITOR}"


def _copied(cursor: duckdb.DuckDBPyConnection, read: str, new: str) -> None:
    """``new``'s tables: the read scan's rows of the untouched visitors and the touched ones' again."""
    cursor.execute(f"ATTACH ':memory:' AS {new} (COMPRESS)")
    for table in ("numbered", "visits"):
        kept = _kept_rows(read, table, "temp.touched")
        cursor.execute(f"CREATE TABLE {new}.main.{table} AS {kept} UNION ALL BY NAME SELECT * FROM temp.{table}")
    _events_view(cursor, new)


def _layer(cursor: duckdb.DuckDBPyConnection, read: str, new: str) -> None:
    """``new``'s tables as views over the read scan's and the touched visitors' rows, kept in ``new``."""
    cursor.execute(f"""
        ATTACH ':memory:' AS {new} (COMPRESS);
        CREATE TABLE {new}.main.fresh AS SELECT * FROM temp.fresh;
        CREATE TABLE {new}.main.touched AS SELECT * FROM temp.touched;
        CREATE TABLE {new}.main.numbered_again AS SELECT * FROM temp.numbered;
        CREATE TABLE {new}.main.visits_again AS SELECT * FROM temp.visits;
    """)
    for table in ("numbered", "visits"):
        kept = _kept_rows(read, table, f"{new}.main.touched")
        cursor.execute(
            f"CREATE VIEW {new}.main.{table} AS {kept} UNION ALL BY NAME SELECT * FROM {new}.main.{table}_again"
        )
    _events_view(cursor, new)
