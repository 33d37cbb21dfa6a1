import json

import pytest

from bench.ingest import beacon, beacon_json


@pytest.mark.parametrize("n", [0, 49, 123_456_789, 2_000_000_000 * 50 + 49, 2**48 - 1])
def test_the_benchmarks_formatted_beacons_are_the_beacons_it_means(n: int) -> None:
    assert json.loads(beacon_json(n)) == beacon(n)
