"""`tally import umami`: Umami's website export into imported.ranges, whole or not at all, and the
Stats API adding it where a range's totals answer the question.

The exports are written here as Umami's export route writes them (umami-software/umami v3.1.0,
``src/app/api/websites/[websiteId]/export/route.ts``): seven files, each ``Papa.unparse`` of its
metric query's rows (header ``x,y``, CRLF between lines and none after the last, a cell quoted only
when it must be, a file of no rows 0 bytes), in a stored ZIP (JSZip's default), answered as
``{"zip": "<base64>"}``. What must be stored and answered is computed from the rows written, and
the table is read back with DuckDB, an independent reader of the Delta table."""

from __future__ import annotations

import base64
import datetime as dt
import re
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from imports.archive import Limits
from imports.umami import read_umami
from tally.plausible_export import FormatError
from tally.settings import Settings
from tally.storage import append_rows, find_table
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.tables import IMPORTED_DAILY, IMPORTED_RANGES, RAW_PAGEVIEWS
from tests.support.import_commands import stored, tally_import, umami
from tests.support.plausible_files import full_export, write_zip
from tests.support.umami_files import FIRST, LAST, ROWS, answer_of, export_files, unparse


def test_the_files_are_written_as_papaparse_writes_them() -> None:
    # What papaparse 5.5.3 (Umami 3.1.0's) writes for these rows with the route's options, run by hand.
    assert unparse([("/a,b", 10), ("", 3)]) == 'x,y\r\n"/a,b",10\r\n,3'
    assert unparse([("Chrome", 5)]) == "x,y\r\nChrome,5" and unparse([]) == ""


@pytest.fixture
def site(settings: Settings) -> str:
    return settings.sites[0].site_id


def test_the_json_answer_is_stored_row_for_row_with_its_range_and_its_zip_is_the_same_export(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = write_zip(tmp_path / "download.zip", export_files())
    code, out, err = umami(capsys, answer_of(archive, tmp_path / "export.json"), site)
    assert code == 0, err
    assert "pages.csv: 4 rows" in out and "countries.csv: 3 rows" in out
    assert f"into {site}: {sum(len(r) for r in ROWS.values())} rows, 2024-01-01 to 2024-01-31" in out
    for name, rows in ROWS.items():
        figure = "events" if name == "events" else "visitors"
        other = "visitors" if name == "events" else "events"
        assert (
            stored(
                settings,
                f"SELECT value, {figure} FROM imported.ranges WHERE table_name = '{name}' AND {other} IS NULL"
                f" ORDER BY {figure} DESC",
            )
            == rows
        ), name
    assert stored(
        settings, "SELECT DISTINCT site_id, origin, first_date, last_date, file_name FROM imported.ranges"
    ) == [(site, "umami", FIRST, LAST, "export.json")]
    code, out, _ = tally_import(capsys, "list")
    assert code == 0 and "2024-01-01  2024-01-31" in out and "export.json (umami: one range, no dates)" in out
    code, _, err = umami(capsys, archive, site)  # the ZIP the answer held: the same export
    assert code == 2 and "download.zip was imported into" in err and "already" in err and "nothing was imported" in err


def test_an_empty_file_is_no_rows_and_a_file_of_umamis_500_rows_says_it_is_cut(
    site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many = [(f"/page-{i}", 1000 - i) for i in range(500)]
    files = export_files(ROWS | {"events": [], "pages": many})
    assert files["events.csv"] == ""
    code, out, err = umami(capsys, write_zip(tmp_path / "e.zip", files), site)
    assert code == 0, err
    assert "events.csv: 0 rows\n" in out
    assert "pages.csv: 500 rows (Umami's top 500: values past them are not in the export)" in out


def test_a_range_reaching_the_sites_own_events_or_an_earlier_import_is_refused_whole(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = write_zip(tmp_path / "jan.zip", export_files())
    # Plausible's export holds 2024-03-01 to 03-03 (tests/support/plausible_files.py).
    plausible = write_zip(tmp_path / "plausible.zip", full_export())
    assert tally_import(capsys, "plausible", str(plausible), "--site", site)[0] == 0
    code, _, err = umami(capsys, archive, site, dt.date(2024, 2, 1), dt.date(2024, 3, 1))
    assert code == 2 and "overlaps import" in err and "plausible.zip" in err and "tally import remove" in err
    assert umami(capsys, archive, site)[0] == 0
    other = write_zip(tmp_path / "jan2.zip", export_files() | {"os.csv": unparse([("Linux", 5)])})
    code, _, err = umami(capsys, other, site, dt.date(2023, 12, 1), dt.date(2024, 1, 1))
    assert code == 2 and "2023-12-01 to 2024-01-01 overlaps import" in err and "jan.zip" in err
    code, _, err = umami(capsys, other, site, LAST, FIRST)
    assert code == 2 and "ends (2024-01-01) before it starts (2024-01-31)" in err
    code, _, err = umami(capsys, other, site, FIRST, dt.date.today() + dt.timedelta(days=2))
    assert code == 2 and "after today" in err
    empty = write_zip(tmp_path / "empty.zip", {f"{name}.csv": "" for name in ROWS})
    code, _, err = umami(capsys, empty, site, dt.date(2023, 1, 1), dt.date(2023, 1, 31))
    assert code == 2 and "every file of empty.zip is empty" in err
    code, _, err = umami(capsys, other, "nowhere.example", dt.date(2023, 1, 1), dt.date(2023, 1, 31))
    assert code == 2 and "no site 'nowhere.example'" in err
    own = dt.datetime(2024, 5, 10, 9, 30, tzinfo=dt.UTC)  # the site's first event of its own
    event = {"event_id": "e1", "site_id": site, "event_time": int(own.timestamp() * 1000), "event_date": own.date()}
    append_rows(settings, RAW_PAGEVIEWS, pa.Table.from_pylist([event], schema=RAW_PAGEVIEWS_SCHEMA))
    code, _, err = umami(capsys, other, site, dt.date(2024, 4, 1), dt.date(2024, 5, 10))
    assert code == 2 and "own events begin on 2024-05-10" in err and "ends by 2024-05-09" in err
    assert "nothing was imported" in err
    assert umami(capsys, other, site, dt.date(2024, 4, 1), dt.date(2024, 5, 9))[0] == 0
    assert stored(settings, "SELECT count(DISTINCT import_id) FROM imported.ranges") == [(2,)]


def test_a_plausible_import_leaves_out_the_days_a_range_holds_and_remove_takes_exactly_one_import(
    settings: Settings, site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        umami(capsys, write_zip(tmp_path / "u.zip", export_files()), site, dt.date(2024, 2, 1), dt.date(2024, 3, 1))[0]
        == 0
    )
    code, out, err = tally_import(
        capsys, "plausible", str(write_zip(tmp_path / "p.zip", full_export())), "--site", site
    )
    assert code == 0, err
    assert "left out 1 days an earlier import holds" in out  # 2024-03-01, inside the range
    daily = find_table(settings, IMPORTED_DAILY)
    assert daily is not None
    days = set(daily.to_pyarrow_dataset().to_table(columns=["date"]).column("date").to_pylist())
    assert days == {dt.date(2024, 3, 2), dt.date(2024, 3, 3)}
    code, out, _ = tally_import(capsys, "list", "--site", site)
    assert out.count(site) == 2 and "(plausible)" in out and "(umami: one range, no dates)" in out
    range_id = stored(settings, "SELECT DISTINCT import_id FROM imported.ranges")[0][0]
    code, out, _ = tally_import(capsys, "remove", range_id)
    assert code == 0 and f"{sum(len(r) for r in ROWS.values())} rows" in out
    assert stored(settings, "SELECT count(*) FROM imported.ranges") == [(0,)]
    daily.update_incremental()
    assert daily.to_pyarrow_dataset().count_rows() == 20, "untouched"
    assert tally_import(capsys, "remove", range_id)[0] == 2, "gone"


def replaced(name: str, text: str | bytes) -> dict[str, str | bytes]:
    return export_files() | {name: text}


PAGES = "x,y\r\n/,120\r\n"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({k: v for k, v in export_files().items() if k != "countries.csv"}, r"no countries\.csv; Umami's export holds"),
        (replaced("notes.txt", "hi"), r"notes\.txt: not a file of Umami's export"),
        (full_export(), r"imported_\w+\.csv: not a file of Umami's export"),
        ({("pages.txt" if k == "pages.csv" else k): v for k, v in export_files().items()}, r"pages\.txt: not a file"),
        (replaced("pages.csv", "name,count\r\n/,3"), r"pages\.csv, line 1: the header is 'name,count'"),
        (replaced("pages.csv", "x, y\r\n/,3"), r"pages\.csv, line 1: the header is 'x, y'"),
        (replaced("pages.csv", PAGES + "/a,many"), r"pages\.csv, line 3, column 'y': 'many' is not a whole number"),
        (replaced("pages.csv", PAGES + "/a,1.5"), r"line 3, column 'y': '1\.5' is not a whole number"),
        (replaced("pages.csv", PAGES + "/a,-4"), r"pages\.csv, line 3, column 'y': -4 is negative"),
        (replaced("pages.csv", PAGES + "/a,"), r"line 3, column 'y': empty"),
        (replaced("pages.csv", PAGES + f"/a,{2**63}"), r"line 3, column 'y': 9223372036854775808 is too large"),
        (replaced("pages.csv", PAGES + "/a," + "9" * 5000), r"line 3, column 'y': 9+ is too large"),
        (replaced("pages.csv", PAGES + "/" + "a" * 2048 + ",1"), r"line 3, column 'x': longer than 2,048 characters"),
        (replaced("pages.csv", PAGES + "/a,1,2"), r"pages\.csv, line 3: 3 cells where the header names 2"),
        (replaced("pages.csv", PAGES.encode() + b"/caf\xe9,1"), r"pages\.csv, line 3: not UTF-8"),
        (replaced("pages.csv", 'x,y\r\n"/a\r\nb",1\r\n/c,zero'), r"pages\.csv, line 4, column 'y': 'zero'"),
    ],
    ids=[
        "missing-file",
        "unknown-file",
        "plausibles-export",
        "not-csv",
        "bad-header",
        "header-with-space",
        "non-numeric",
        "fraction",
        "negative",
        "empty-count",
        "too-large",
        "thousands-of-digits",
        "too-long-value",
        "three-cells",
        "not-utf8",
        "line-after-a-quoted-newline",
    ],
)
def test_a_bad_file_is_refused_naming_where_and_nothing_is_stored(
    settings: Settings,
    site: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str | bytes],
    message: str,
) -> None:
    archive = write_zip(tmp_path / "e.zip", files)
    for given in (archive, answer_of(archive, tmp_path / "e.json")):
        code, _, err = umami(capsys, given, site)
        assert code == 2
        assert re.search(message, err), err
        assert "nothing was imported" in err and "Traceback" not in err
    assert find_table(settings, IMPORTED_RANGES) is None


def test_a_second_file_of_one_name_is_refused(site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "two.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in export_files().items():
            archive.writestr(f"a/{name}", text)
        archive.writestr("b/pages.csv", PAGES)
    code, _, err = umami(capsys, path, site)
    assert code == 2 and "two.zip: pages.csv: a second pages.csv" in err


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"x,y\r\n/,1", r"a\.json: neither a ZIP archive nor the export's answer"),
        (b'{"zip": "UEsD', r"a\.json, line 1, column 9: not JSON"),
        (
            b'{"error": {"message": "Unauthorized", "status": 401}}',
            r'no "zip" in the answer; Umami answered an error \(Unauthorized\)',
        ),
        (b'{"zip": 5}', r'a\.json: "zip": not text'),
        (b'{"zip": "not base64!"}', r'a\.json: "zip": not base64'),
        (b'{"zip": "' + base64.b64encode(b"hello, world") + b'"}', r'"zip": the base64 does not hold a ZIP archive'),
        (b'{"zip": "\xff"}', r"a\.json, line 1: not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, r"neither a ZIP archive nor"),
        (b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", r"nested too deeply"),
    ],
    ids=[
        "csv",
        "cut-json",
        "error-answer",
        "zip-not-text",
        "bad-base64",
        "base64-not-zip",
        "not-utf8",
        "a-list",
        "deep",
    ],
)
def test_a_bad_answer_is_refused_saying_what_it_is(
    site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, message: str
) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(body)
    code, _, err = umami(capsys, path, site)
    assert code == 2 and re.search(message, err), err
    assert "nothing was imported" in err and "Traceback" not in err


def test_an_answer_over_the_limits_and_a_zip_bomb_are_refused_before_they_are_unpacked(
    site: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = write_zip(tmp_path / "e.zip", export_files())
    small = Limits(max_total_bytes=1000)
    with pytest.raises(FormatError, match=r"e\.json: [\d,]+ bytes, over the limit of [\d,]+ for Umami's answer"):
        read_umami(
            answer_of(write_zip(tmp_path / "big.zip", replaced("pages.csv", PAGES * 5000)), tmp_path / "e.json"), small
        )
    assert read_umami(answer_of(archive, tmp_path / "ok.json"), small).rows == sum(len(r) for r in ROWS.values())
    bomb = replaced("pages.csv", PAGES + "/a,1\r\n" * 400_000)  # 2.4 MB of one line, deflated
    path = write_zip(tmp_path / "bomb.zip", bomb, compression=zipfile.ZIP_DEFLATED)
    for given in (path, answer_of(path, tmp_path / "bomb.json")):
        code, _, err = umami(capsys, given, site)
        assert code == 2 and "pages.csv: grows" in err and "refused as a ZIP bomb" in err, err
    code, _, err = umami(capsys, tmp_path / "absent.zip", site)
    assert code == 2 and "no file" in err
    code, _, err = tally_import(
        capsys, "umami", str(archive), "--site", site, "--from", "January", "--to", "2024-01-31"
    )
    assert code == 2 and "--from and --to are days" in err


# The Stats API, through the query layer.
