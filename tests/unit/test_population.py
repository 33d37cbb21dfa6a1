import json

from ingest.beacon import ParsedBody, parse_beacons
from simulator.population import Population


def test_generated_beacons_are_valid_and_reproducible() -> None:
    a = Population(site_id="s", host="s.example", visitors=50, seed=3)
    b = Population(site_id="s", host="s.example", visitors=50, seed=3)
    beacons = [x for t in range(500) for x in a.next_beacons(1_000_000 + t)]
    assert [x.payload for x in beacons] == [x.payload for t in range(500) for x in b.next_beacons(1_000_000 + t)]
    parsed = parse_beacons(json.dumps([x.payload for x in beacons[:50]]).encode(), max_batch=50)
    assert isinstance(parsed, ParsedBody) and not parsed.invalid
    kinds = {x.payload["k"] for x in beacons}
    assert kinds == {"pageview", "event", "engagement"}
    assert len({x.ip for x in beacons}) > 20
