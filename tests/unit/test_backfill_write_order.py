"""The order a backfill chunk begins its views in (``jobs.backfill.write_order``)."""

from __future__ import annotations

from jobs.backfill import ROLL_UPS, write_order
from tally.tables import BACKFILL_VIEWS, SESSIONS, TRAFFIC_1D, TRAFFIC_1H, TRAFFIC_1M


def test_views_from_the_events_begin_first_and_each_roll_up_after_the_view_it_reads() -> None:
    order = write_order(BACKFILL_VIEWS)
    assert sorted(order, key=BACKFILL_VIEWS.index) == list(BACKFILL_VIEWS)
    assert order[:2] == [TRAFFIC_1M, SESSIONS]  # the two heaviest, together
    rolled_up = [spec for spec in order if spec in ROLL_UPS]
    assert order[-len(rolled_up) :] == rolled_up
    for spec, (source, _) in ROLL_UPS.items():
        assert order.index(source) < order.index(spec)
    assert write_order([TRAFFIC_1D, TRAFFIC_1H]) == [TRAFFIC_1H, TRAFFIC_1D]
