"""Text filters over Delta tables whose files delta-rs rewrote: a DELETE (``tally forget``), a MERGE
or a compaction writes text as ``string_view``, which pyarrow's ``equal`` cannot compare with a
string. Every reader filters text through :func:`tally.storage.text_is`, which holds for both."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from imports.records import first_native_day
from query import raw_export
from simulator.synthetic import synthetic_events
from tally.settings import Settings
from tally.storage import append_rows, arrow_dataset, find_table, text_is
from tally.tables import RAW_PAGEVIEWS


@pytest.fixture
def rewritten(settings: Settings) -> DeltaTable:
    """raw.pageviews of two sites, one visitor's events deleted by delta-rs (its files rewritten)."""
    start = dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC)
    events = pa.concat_tables(
        [
            synthetic_events(visits=40, start=start, span=dt.timedelta(hours=2), site_id=site.site_id, seed=i)
            for i, site in enumerate(settings.sites[:2])
        ]
    )
    append_rows(settings, RAW_PAGEVIEWS, events, partition_by=["event_date"])
    table = find_table(settings, RAW_PAGEVIEWS)
    assert table is not None
    table.delete(f"visitor_id = '{events['visitor_id'][0]}'")
    return DeltaTable(table.table_uri)


def test_a_rewritten_table_stores_text_as_string_view_which_a_plain_filter_cannot_compare(
    settings: Settings, rewritten: DeltaTable
) -> None:
    dataset = arrow_dataset(rewritten)
    assert any(pa.types.is_string_view(f.physical_schema.field("site_id").type) for f in dataset.get_fragments())
    site = settings.sites[0].site_id
    with pytest.raises(pa.ArrowNotImplementedError):
        dataset.to_table(filter=pc.field("site_id") == site)  # why text_is exists
    kept = dataset.to_table(columns=["site_id"], filter=text_is("site_id", site))
    assert kept.num_rows > 0 and set(kept["site_id"].to_pylist()) == {site}


def test_the_readers_of_a_rewritten_table_answer(settings: Settings, rewritten: DeltaTable) -> None:
    site = settings.sites[0].site_id
    assert first_native_day(settings, site, "UTC") == dt.date(2026, 3, 1)
    day = raw_export.day_events(arrow_dataset(rewritten), site, dt.date(2026, 3, 1), "UTC")
    assert day.num_rows > 0 and set(day["site_id"].to_pylist()) == {site}
