from pathlib import Path

from ingest.salts import DAY_MS, SaltStore


def test_a_day_has_one_salt_shared_by_workers_and_yesterdays_is_deleted(tmp_path: Path) -> None:
    worker_a, worker_b = SaltStore(tmp_path), SaltStore(tmp_path)
    monday = 20_000 * DAY_MS
    salt = worker_a.salt_for(monday + 1)
    assert worker_a.salt_for(monday + DAY_MS - 1) == salt == worker_b.salt_for(monday + 5)
    tuesday = worker_a.salt_for(monday + DAY_MS)
    assert tuesday != salt
    assert [p.stem for p in tmp_path.glob("*.salt")] == ["2024-10-05"]
