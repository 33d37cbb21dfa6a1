"""The fields a backfill reads from raw.pageviews for the views are event fields."""

from jobs.views import VIEW_FIELDS
from tally.schema import FIELDS


def test_view_fields_are_event_fields() -> None:
    assert set(VIEW_FIELDS) <= set(FIELDS), set(VIEW_FIELDS) - set(FIELDS)
    assert len(set(VIEW_FIELDS)) == len(VIEW_FIELDS)
