"""`tally import plausible`: Plausible's CSV export into imported.daily, whole or not at all.

The archives are written here as Plausible writes them (ClickHouse's CSVWithNames: quoted header
and text, bare numbers; files ``imported_<table>_<YYYYMMDD>_<YYYYMMDD>.csv``, stored uncompressed),
some with rows quoted from Plausible's own importer tests; what must be stored is computed from the
rows written, and read back with DuckDB, an independent reader of the Delta table."""

from __future__ import annotations

import datetime as dt
import io
import re
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from imports.plausible import read_export
from tally.plausible_export import TABLES
from tally.settings import Settings
from tally.storage import append_rows, find_table
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.tables import IMPORTED_DAILY, RAW_PAGEVIEWS
from tests.support.import_commands import stored, tally_import
from tests.support.plausible_files import DAYS, FIRST, LAST, full_export, write_zip


@pytest.fixture
def site(settings: Settings) -> str:
    return settings.sites[0].site_id


def test_a_whole_export_is_stored_row_for_row_and_listed(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = write_zip(tmp_path / "plausible_io_20240304.zip", full_export())
    code, out, err = tally_import(capsys, "plausible", str(archive), "--site", site)
    assert code == 0, err
    assert "imported_pages_20240301_20240303.csv: 3 rows" in out and f"into {site}: 30 rows" in out
    # The visitors table as written: n visitors, 2n page views, 3n bounces, 4n visits, 5n seconds a day.
    assert stored(
        settings,
        "SELECT date, visitors, pageviews, bounces, visits, visit_duration FROM imported.daily"
        " WHERE table_name = 'visitors' ORDER BY date",
    ) == [(day, n, 2 * n, 3 * n, 4 * n, 5 * n) for n, day in enumerate(DAYS, start=1)]
    assert stored(settings, "SELECT DISTINCT table_name FROM imported.daily ORDER BY 1") == [
        (t,) for t in sorted(TABLES)
    ]
    assert stored(
        settings, "SELECT sum(entrances), sum(visits) FROM imported.daily WHERE table_name = 'entry_pages'"
    ) == [
        (2 + 4 + 6, 0)  # entrances is the entry pages' visits, kept under its own name
    ]
    assert stored(settings, "SELECT DISTINCT site_id, origin FROM imported.daily") == [(site, "plausible")]
    code, out, _ = tally_import(capsys, "list")
    assert code == 0 and site in out and "2024-03-01  2024-03-03" in out and "plausible_io_20240304.zip" in out


def test_columns_are_matched_by_name_and_a_missing_metric_is_zero_as_plausibles_importer_does(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = full_export()
    # Plausible's own importer tests: a visitors file unquoted, an entry-pages file reordered and
    # without pageviews, an old pages file with a column today's format dropped; names without the prefix.
    files.pop("imported_visitors_20240301_20240303.csv")
    files["visitors_20240301_20240303.csv"] = (
        "date,visitors,pageviews,bounces,visits,visit_duration\n2024-03-01,5,50,2,7,8640\n"
    )
    files.pop("imported_entry_pages_20240301_20240303.csv")
    files["entry_pages_20240301_20240303.csv"] = (
        '"date","visitors","entrances","visit_duration","bounces","entry_page"\n'
        '"2024-03-02",6,6,0,6,"/14776416252794997127"\n"2024-03-02",1,1,43,0,"/10399835914295020763"\n'
    )
    files.pop("imported_pages_20240301_20240303.csv")
    files["imported_pages_20240301_20240303.csv"] = (
        '"date","hostname","page","visits","visitors","pageviews","exits","time_on_page"\n"2024-03-03","a.example","/a",3,2,4,1,60\n'
    )
    code, _, err = tally_import(capsys, "plausible", str(write_zip(tmp_path / "e.zip", files)), "--site", site)
    assert code == 0, err
    assert stored(
        settings,
        "SELECT visitors, pageviews, bounces, visits, visit_duration FROM imported.daily WHERE table_name = 'visitors'",
    ) == [(5, 50, 2, 7, 8640)]
    assert stored(
        settings,
        "SELECT entry_page, visitors, entrances, visit_duration, bounces, pageviews FROM imported.daily"
        " WHERE table_name = 'entry_pages' ORDER BY visitors",
    ) == [("/10399835914295020763", 1, 1, 43, 0, 0), ("/14776416252794997127", 6, 6, 0, 6, 0)]
    assert stored(settings, "SELECT page, visits, pageviews, exits FROM imported.daily WHERE table_name = 'pages'") == [
        ("/a", 3, 4, 0)  # exits: a column of 2024's exports that today's format leaves out
    ]


def test_the_same_archive_twice_is_refused_and_removing_an_import_removes_exactly_its_rows(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write_zip(tmp_path / "first.zip", full_export())
    assert tally_import(capsys, "plausible", str(first), "--site", site)[0] == 0
    code, _, err = tally_import(capsys, "plausible", str(first), "--site", site)
    assert code == 2 and "imported into" in err and "already" in err and "nothing was imported" in err
    # A later export of the next days: an import of its own.
    later = {
        n.replace("20240301_20240303", "20240304_20240305"): t.replace("2024-03-01", "2024-03-04")
        .replace("2024-03-02", "2024-03-05")
        .replace('"2024-03-03"', '"2024-03-05"')
        for n, t in full_export().items()
    }
    assert tally_import(capsys, "plausible", str(write_zip(tmp_path / "later.zip", later)), "--site", site)[0] == 0
    assert stored(settings, "SELECT count(DISTINCT import_id), count(*) FROM imported.daily") == [(2, 60)]
    first_id = stored(settings, "SELECT import_id FROM imported.daily WHERE file_name = 'first.zip' LIMIT 1")[0][0]
    code, out, _ = tally_import(capsys, "remove", first_id)
    assert code == 0 and "30 rows" in out
    assert stored(settings, "SELECT DISTINCT file_name FROM imported.daily") == [("later.zip",)]
    assert stored(settings, "SELECT count(*) FROM imported.daily") == [(30,)]
    assert tally_import(capsys, "remove", first_id)[0] == 2, "gone"
    assert tally_import(capsys, "remove", "x' OR '1'='1")[0] == 2, "not an id: no predicate is built from it"
    assert stored(settings, "SELECT count(*) FROM imported.daily") == [(30,)]


def test_days_from_the_sites_first_own_event_and_days_an_earlier_import_holds_are_left_out(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = dt.datetime(2024, 3, 3, 9, 30, tzinfo=dt.UTC)  # the site's first event: 2024-03-03, UTC
    event = {"event_id": "e1", "site_id": site, "event_time": int(own.timestamp() * 1000), "event_date": own.date()}
    other = {**event, "event_id": "e2", "site_id": "other.example", "event_time": 0, "event_date": dt.date(1970, 1, 1)}
    append_rows(settings, RAW_PAGEVIEWS, pa.Table.from_pylist([event, other], schema=RAW_PAGEVIEWS_SCHEMA))
    code, out, err = tally_import(
        capsys, "plausible", str(write_zip(tmp_path / "a.zip", full_export())), "--site", site
    )
    assert code == 0, err
    assert "left out 1 days from 2024-03-03 on" in out
    assert stored(settings, "SELECT DISTINCT date FROM imported.daily ORDER BY 1") == [(DAYS[0],), (DAYS[1],)]
    # Another export of the same days (a different file): every day is held or the site's own.
    again = {n: t + "\n" for n, t in full_export().items()}
    code, _, err = tally_import(capsys, "plausible", str(write_zip(tmp_path / "b.zip", again)), "--site", site)
    assert code == 2 and "nothing of b.zip" in err and "2 of its days are held by an earlier import" in err
    assert stored(settings, "SELECT count(*) FROM imported.daily") == [(20,)]


def bad(name: str, text: str) -> dict[str, str]:
    """A whole export with one file replaced (or added, for a new name)."""
    files = full_export()
    key = next((k for k in files if k.startswith(name)), name)
    files[key] = text
    return files


VISITORS = "imported_visitors_20240301_20240303.csv"
HEADER = '"date","visitors","pageviews","bounces","visits","visit_duration"\n'


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({k: v for k, v in full_export().items() if "locations" not in k}, r"no file of imported_locations"),
        (bad("notes.txt", "hello"), r"notes\.txt: not a file of Plausible's export"),
        (bad("imported_visitors_20240301_20240301.csv", HEADER), r"a second file of imported_visitors"),
        (
            bad("imported_visitors_20240303_20240301.csv", HEADER) | {VISITORS: HEADER},
            r"ends \(2024-03-01\) before it starts",
        ),
        (
            bad(VISITORS, '"date","visitors","exits"\n'),
            rf"{VISITORS}, line 1: 'exits' is not a column of imported_visitors",
        ),
        (bad(VISITORS, '"visitors","pageviews"\n5,6\n'), rf"{VISITORS}, line 1: no date column"),
        (bad(VISITORS, '"date","visitors","visitors"\n'), r"'visitors' is named twice"),
        (bad(VISITORS, ""), rf"{VISITORS}, line 1: no header"),
        (
            bad(VISITORS, HEADER + '"2024-03-01",5,50,2,7,8640\n"2024-03-02",5,fifty,2,7,8640\n'),
            rf"{VISITORS}, line 3, column 'pageviews': 'fifty' is not a whole number",
        ),
        (
            bad(VISITORS, HEADER + '"2024-03-01",5,50,2,7,1.5\n'),
            r"line 2, column 'visit_duration': '1\.5' is not a whole number",
        ),
        (
            bad(VISITORS, HEADER + '"2024-03-01",5,50,2,7,8640\n"2024-03-02",-1,50,2,7,8640\n'),
            r"line 3, column 'visitors': -1 is negative",
        ),
        (
            bad(VISITORS, HEADER + '"2024-03-01",5,50,2,7,99999999999999999999\n'),
            r"line 2, column 'visit_duration': .* too large",
        ),
        (
            bad(VISITORS, HEADER + '"2024-03-09",5,50,2,7,8640\n'),
            r"line 2, column 'date': 2024-03-09 is outside the range the file's name gives",
        ),
        (bad(VISITORS, HEADER + '"03/01/2024",5,50,2,7,8640\n'), r"line 2, column 'date': '03/01/2024' is not a date"),
        (bad(VISITORS, HEADER + '"2024-03-01",5,50,2,7\n'), r"line 2: 5 cells where the header names 6"),
        (
            bad("imported_pages", '"date","hostname","page","visits"\n"2024-03-01","a","\xff",1\n'),
            r"imported_pages.*line 2: not UTF-8",
        ),
    ],
    ids=[
        "missing-file",
        "unknown-file",
        "two-files-of-a-table",
        "range-backwards",
        "unknown-column",
        "no-date",
        "column-twice",
        "empty-file",
        "non-numeric",
        "fraction",
        "negative",
        "too-large",
        "date-outside-range",
        "not-iso-date",
        "short-row",
        "not-utf8",
    ],
)
def test_a_bad_file_is_refused_naming_where_and_nothing_is_stored(
    settings: Settings,
    site: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    message: str,
) -> None:
    latin = {k: (v.encode("latin-1") if "\xff" in v else v) for k, v in files.items()}
    code, _, err = tally_import(capsys, "plausible", str(write_zip(tmp_path / "e.zip", latin)), "--site", site)
    assert code == 2
    assert re.search(message, err), err
    assert "nothing was imported" in err and "Traceback" not in err
    assert find_table(settings, IMPORTED_DAILY) is None


def test_an_archive_that_is_not_a_zip_a_bomb_or_too_many_files_is_refused_before_it_is_unpacked(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "export.zip"
    text.write_text(full_export()[VISITORS])
    code, _, err = tally_import(capsys, "plausible", str(text), "--site", site)
    assert code == 2 and "export.zip: not a ZIP archive" in err
    bomb = full_export() | {VISITORS: HEADER + '"2024-03-01",5,50,2,7,8640\n' * 400_000}  # 12 MB of one line
    path = write_zip(tmp_path / "bomb.zip", bomb, compression=zipfile.ZIP_DEFLATED)
    code, _, err = tally_import(capsys, "plausible", str(path), "--site", site)
    assert code == 2 and "refused as a ZIP bomb" in err and VISITORS in err
    many = full_export() | {f"x{i}.csv": "" for i in range(40)}
    code, _, err = tally_import(capsys, "plausible", str(write_zip(tmp_path / "many.zip", many)), "--site", site)
    assert code == 2 and "50 files; an export holds at most 32" in err
    code, _, err = tally_import(capsys, "plausible", str(tmp_path / "absent.zip"), "--site", site)
    assert code == 2 and "no file" in err
    code, _, err = tally_import(
        capsys, "plausible", str(write_zip(tmp_path / "ok.zip", full_export())), "--site", "nowhere.example"
    )
    assert code == 2 and "no site 'nowhere.example'" in err
    assert find_table(settings, IMPORTED_DAILY) is None


def test_folders_and_a_zip_tools_own_files_in_the_archive_are_passed_over(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in full_export().items():
            archive.writestr(f"export/{name}", text)
        archive.writestr("__MACOSX/export/._imported_pages_20240301_20240303.csv", b"\x00")
        archive.writestr("export/.DS_Store", b"\x00")
    path = tmp_path / "folder.zip"
    path.write_bytes(buffer.getvalue())
    export = read_export(path)
    assert set(export.tables) == set(TABLES) and export.rows == 30
    assert (export.first, export.last) == (FIRST, LAST)


def test_an_import_interrupted_while_reading_stores_nothing(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import imports.plausible
    from imports.plausible_csv import read_rows as read

    calls: list[str] = []

    def interrupted(name: str, *args: Any) -> Any:
        calls.append(name)
        if len(calls) == 5:
            raise KeyboardInterrupt  # Ctrl-C with four files read
        return read(name, *args)

    monkeypatch.setattr(imports.plausible, "read_rows", interrupted)
    archive = write_zip(tmp_path / "plausible.zip", full_export())
    code, out, _ = tally_import(capsys, "plausible", str(archive), "--site", site)
    assert code == 130 and out.count(" rows") == 4  # progress up to the interruption
    assert find_table(settings, IMPORTED_DAILY) is None  # nothing stored
    monkeypatch.setattr(imports.plausible, "read_rows", read)
    assert tally_import(capsys, "plausible", str(archive), "--site", site)[0] == 0  # and it imports whole after
