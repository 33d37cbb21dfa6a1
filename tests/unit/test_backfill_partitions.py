import pytest

from jobs.backfill_chunks import EVENTS_PER_SHUFFLE_PARTITION, shuffle_partitions_for


@pytest.mark.parametrize(
    ("events", "configured", "expected"),
    [
        (0, 2, 2),
        (500_000, 2, 2),  # a week of a small site: the session's own partitions
        (4_000_000, 2, 14),  # 10M events in 3-day jobs: 2 and 7 partitions ran out of heap
        (4_000_000, 16, 16),  # a cluster's setting already spreads it
        (EVENTS_PER_SHUFFLE_PARTITION * 3, 1, 3),
        (EVENTS_PER_SHUFFLE_PARTITION * 3 + 1, 1, 4),
    ],
)
def test_big_backfill_jobs_get_enough_shuffle_partitions_to_fit_in_memory(
    events: int, configured: int, expected: int
) -> None:
    assert shuffle_partitions_for(events, configured) == expected
