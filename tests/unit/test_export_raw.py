"""`tally export --raw` writes a site's raw events of a range as Parquet files, one per local day,
in a ZIP: read back with DuckDB, they are exactly the site's stored events of those days (no other
site's, none outside the range), without the fields Tally keeps for itself; an interrupted export
leaves no file behind."""

from __future__ import annotations

import datetime as dt
import zipfile
import zoneinfo
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from ops.cli import main
from query import raw_export
from simulator.synthetic import synthetic_events
from tally.settings import Settings
from tally.storage import append_rows

FIRST, LAST = dt.date(2026, 3, 1), dt.date(2026, 3, 3)


@pytest.fixture
def events(settings: Settings) -> pa.Table:
    """Two sites' events from the day before the range to the day after it, in raw.pageviews."""
    start = dt.datetime.combine(FIRST - dt.timedelta(days=1), dt.time(), dt.UTC)
    both = [
        synthetic_events(visits=300, start=start, span=dt.timedelta(days=5), site_id=site.site_id, seed=i)
        for i, site in enumerate(settings.sites[:2])
    ]
    table = pa.concat_tables(both)
    append_rows(settings, "raw.pageviews", table, partition_by=["event_date"])
    return table


def _export(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["export", "--raw", *args])
    printed = capsys.readouterr()
    return int(done.value.code or 0), printed.out, printed.err


def _read_back(archive: Path, into: Path) -> dict[str, pa.Table]:
    """Each file of the ZIP, read by DuckDB from the extracted Parquet file."""
    with zipfile.ZipFile(archive) as z:
        z.extractall(into)
        names = z.namelist()
    return {name: duckdb.sql(f"SELECT * FROM read_parquet('{into / name}')").arrow().read_all() for name in names}


def _local_days(times_ms: pa.Array, timezone: str) -> list[dt.date]:
    zone = zoneinfo.ZoneInfo(timezone)
    return [dt.datetime.fromtimestamp(t / 1000, zone).date() for t in times_ms.to_pylist()]


def test_each_local_day_of_the_range_is_a_file_of_exactly_that_day_s_events_of_the_site(
    settings: Settings, events: pa.Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = settings.sites[0].site_id
    out = tmp_path / "raw.zip"
    code, printed, err = _export(["--site", site, "--from", str(FIRST), "--to", str(LAST), "--out", str(out)], capsys)
    assert code == 0, err
    files = _read_back(out, tmp_path / "files")
    days = [FIRST + dt.timedelta(days=i) for i in range(3)]
    assert sorted(files) == [f"raw_pageviews_{site}_{d:%Y%m%d}.parquet" for d in days]
    for day in days:
        assert f"raw_pageviews_{site}_{day:%Y%m%d}.parquet" in printed  # progress, file by file

    mine = events.filter(pc.equal(events["site_id"], site))
    in_range = [i for i, d in enumerate(_local_days(mine["event_time"], "UTC")) if FIRST <= d <= LAST]
    expected = sorted(mine.take(in_range)["event_id"].to_pylist())
    read = []
    for name, table in files.items():
        day = dt.datetime.strptime(name.rsplit("_", 1)[1].removesuffix(".parquet"), "%Y%m%d").date()
        assert set(_local_days(table["event_time"], "UTC")) == {day}, name
        assert set(table["site_id"].to_pylist()) == {site}
        read += table["event_id"].to_pylist()
    assert sorted(read) == expected  # every event of the range once, no other site's
    assert f"exported {len(expected):,} raw events" in printed

    columns = next(iter(files.values())).column_names
    assert "client_hash" not in columns and "kafka_offset" not in columns and "kafka_partition" not in columns
    assert {"event_id", "event_time", "path", "visitor_id", "source", "country", "props"} <= set(columns)
    # The stored values come back as stored.
    original = {r["event_id"]: r for r in mine.select(["event_id", "path", "referrer", "screen_w"]).to_pylist()}
    for table in files.values():
        for row in table.select(["event_id", "path", "referrer", "screen_w"]).to_pylist():
            assert row == original[row["event_id"]]


def test_a_site_s_local_days_are_its_time_zone_s(settings: Settings, events: pa.Table, tmp_path: Path) -> None:
    site, zone = settings.sites[0].site_id, "Asia/Kolkata"
    raw = ds.dataset(events)
    out = tmp_path / "raw.zip"
    with out.open("wb") as written:
        count = raw_export.write_zip(written, raw, site, FIRST, LAST, zone)
    files = _read_back(out, tmp_path / "files")
    mine = events.filter(pc.equal(events["site_id"], site))
    local = _local_days(mine["event_time"], zone)
    assert count == sum(FIRST <= d <= LAST for d in local)
    for name, table in files.items():
        day = dt.datetime.strptime(name.rsplit("_", 1)[1].removesuffix(".parquet"), "%Y%m%d").date()
        assert set(_local_days(table["event_time"], zone)) == {day}
        assert table["event_time"].to_pylist() == sorted(table["event_time"].to_pylist())


def test_a_day_without_events_is_a_file_without_rows(settings: Settings, events: pa.Table, tmp_path: Path) -> None:
    quiet = dt.date(2026, 4, 1)
    out = tmp_path / "raw.zip"
    with out.open("wb") as written:
        raw_export.write_zip(written, ds.dataset(events), settings.sites[0].site_id, quiet, quiet, "UTC")
    (table,) = _read_back(out, tmp_path / "files").values()
    assert table.num_rows == 0
    assert table.column_names == list(raw_export.COLUMNS)


def test_an_interrupted_export_leaves_no_file(
    settings: Settings,
    events: pa.Table,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read = raw_export.day_events
    calls = []

    def interrupted(*args: object) -> pa.Table:
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C while the second day is read
        return read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(raw_export, "day_events", interrupted)
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "raw.zip"
    with pytest.raises(SystemExit) as done:
        main(
            [
                "export",
                "--raw",
                "--site",
                settings.sites[0].site_id,
                "--from",
                str(FIRST),
                "--to",
                str(LAST),
                "--out",
                str(out),
            ]
        )
    assert done.value.code == 130  # as a Ctrl-C ends a command
    assert list(folder.iterdir()) == []  # neither the ZIP nor its partial file


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--from", "2026-03-03", "--to", "2026-03-01"], "is before --from"),
        (["--from", "2026-3-1x", "--to", "2026-03-01"], "YYYY-MM-DD"),
        (["--from", "0001-01-01", "--to", "9999-12-31"], "at most"),
    ],
)
def test_a_range_that_cannot_be_exported_is_refused_saying_why(
    settings: Settings, events: pa.Table, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    code, _, err = _export(["--site", settings.sites[0].site_id, *args, "--out", str(folder / "x.zip")], capsys)
    assert code == 2 and said in err
    assert list(folder.iterdir()) == []
