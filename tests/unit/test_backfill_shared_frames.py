"""Which frames a backfill caches while it writes a chunk: those read more than once."""

from __future__ import annotations

from jobs.backfill import ROLL_UPS, shared_frames
from tally.tables import (
    ACTIVE_5M,
    BACKFILL_VIEWS,
    PROPS_1D,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1H,
    TRAFFIC_1M,
    VISITS_1D,
    VISITS_1H,
)


def test_every_view_caches_the_minutes_the_hours_and_the_sessions() -> None:
    assert shared_frames(BACKFILL_VIEWS) == [TRAFFIC_1M, TRAFFIC_1H, SESSIONS]


def test_a_view_read_once_is_not_cached() -> None:
    assert shared_frames((SESSIONS,)) == []
    assert shared_frames((PROPS_1D,)) == []
    assert shared_frames((TRAFFIC_1D,)) == []  # the minutes roll up to hours, the hours to days: once each
    assert shared_frames((VISITS_1H,)) == []


def test_a_frame_rolled_up_into_two_views_is_cached_even_when_not_written() -> None:
    assert shared_frames((VISITS_1H, VISITS_1D)) == [SESSIONS]
    assert shared_frames((TRAFFIC_1D, ACTIVE_5M)) == [TRAFFIC_1M]
    assert shared_frames((TRAFFIC_1H, TRAFFIC_1D)) == [TRAFFIC_1H]


def test_each_roll_up_comes_after_the_view_it_reads() -> None:
    order = [TRAFFIC_1M, SESSIONS, *ROLL_UPS]
    for spec, (source, _) in ROLL_UPS.items():
        assert order.index(source) < order.index(spec), spec.table


def test_a_chunk_written_in_several_runs_of_dates_caches_every_frame_it_reads() -> None:
    assert shared_frames((SESSIONS,), runs=2) == [SESSIONS]
    assert shared_frames((TRAFFIC_1D,), runs=2) == [TRAFFIC_1M, TRAFFIC_1H, TRAFFIC_1D]
    assert shared_frames((PROPS_1D,), runs=3) == [PROPS_1D]
    assert shared_frames((SESSIONS,), runs=1) == []
