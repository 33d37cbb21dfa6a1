"""Core Web Vitals and scroll depth through the Stats API over real tables.

Vitals and engagement beacons of a site of their own are in raw.pageviews (delta-rs, as the
archiver writes them; the session's shared ``march`` warehouse, see march_sites.py), the real
Spark backfill computed agg.vitals_1h, and the API app answers over HTTP in-process. Every figure
is compared with a truth computed here in plain Python from the beacons written: band shares and
scroll depth equal, each p75 within the rank bound the answer states; filtered questions are
answered from raw events and equal the exact p75.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from tally.settings import Settings
from tally.vitals import BANDS, VITALS
from tests.integration.march_sites import VITALS_DAYS as DAYS
from tests.integration.march_sites import VITALS_PAGES as PAGES
from tests.integration.march_sites import VITALS_SITE as SITE
from tests.integration.march_sites import vitals_beacons

WHOLE = [DAYS[0].isoformat(), DAYS[1].isoformat()]


BEACONS = vitals_beacons()


def truth(pick: str | None, keep: Any = lambda e: True) -> dict[str, dict[str, Any]]:
    """Per value of column ``pick`` (None: the site total ``""``): each vital's values and the scroll depths."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"values": defaultdict(list), "depths": []})
    for e in BEACONS:
        if e["is_bot"] or not keep(e):
            continue
        key = "" if pick is None else e[pick]
        if e.get("scroll_depth") is not None:
            out[key]["depths"].append(e["scroll_depth"])
        if e["type"] == "vitals":
            for v in VITALS:
                if e.get(v.column) is not None:
                    out[key]["values"][v.name].append(e[v.column])
    return out


def shares(values: list[float], name: str) -> list[float]:
    vital = next(v for v in VITALS if v.name == name)
    return [round(100 * sum(1 for x in values if vital.band(x) == b) / len(values), 1) for b in BANDS]


def within_rank_bound(estimate: float, values: list[float], bound: float) -> bool:
    """Whether ``estimate`` lies between the values ranked ``(0.75 ± bound) · n`` (one value's rank of slack)."""
    ordered = sorted(values)
    n = len(ordered)
    low = ordered[max(0, int(np.floor((0.75 - bound) * n)) - 1)]
    high = ordered[min(n - 1, int(np.ceil((0.75 + bound) * n)))]
    return low <= estimate <= high


@pytest.fixture(scope="module")
def api(march: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    home = tmp_path_factory.mktemp("vitals-query")
    # The session's shared backfilled tables (read only), with a home of its own for the key.
    iso = dataclasses.replace(march, home=str(home), api=dataclasses.replace(march.api, requests_per_hour=100_000))
    key, _ = create_key(iso, name="vitals", sites=(SITE,), now=dt.datetime.now(dt.UTC))
    with TestClient(create_app(iso), headers={"Authorization": f"Bearer {key}"}) as client:
        yield client


def ask(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/api/v2/query", json={"site_id": SITE, "date_range": WHOLE, **body})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.mark.parametrize(("dimension", "pick"), [(None, None), ("event:page", "path"), ("visit:device", "device")])
def test_the_views_vitals_equal_the_beacons_shares_exactly_and_their_p75_within_the_stated_bound(
    api: TestClient, dimension: str | None, pick: str | None
) -> None:
    metrics = [f"{v.name}_p75" for v in VITALS] + [f"{v.name}_{b}" for v in VITALS for b in BANDS] + ["scroll_depth"]
    answer = ask(api, {"metrics": metrics, "dimensions": [dimension] if dimension else []})
    assert answer["meta"]["source"] == "aggregates"
    rows = {(r["dimensions"] or [""])[0]: dict(zip(metrics, r["metrics"], strict=True)) for r in answer["results"]}
    expected = truth(pick)
    assert set(rows) == set(expected)
    for value, measured in expected.items():
        row = rows[value]
        for v in VITALS:
            values = measured["values"][v.name]
            bound = answer["meta"]["metrics"][f"{v.name}_p75"]["rank_error_bound"]
            assert within_rank_bound(row[f"{v.name}_p75"], values, bound), (value, v.name, row[f"{v.name}_p75"])
            assert [row[f"{v.name}_{b}"] for b in BANDS] == shares(values, v.name), (value, v.name)
        assert row["scroll_depth"] == round(sum(measured["depths"]) / len(measured["depths"]))
    assert all(answer["meta"]["metrics"][m]["exact"] for m in metrics if not m.endswith("_p75"))


def test_the_browser_tests_question_gives_each_page_its_lcp_and_cls(api: TestClient) -> None:
    answer = ask(api, {"metrics": ["lcp_p75", "cls_p75"], "dimensions": ["event:page"]})
    pages = {r["dimensions"][0]: r["metrics"] for r in answer["results"]}
    assert set(pages) == set(PAGES)
    for page, measured in truth("path").items():
        lcp, cls = pages[page]
        assert within_rank_bound(lcp, measured["values"]["lcp"], 0.005)
        assert within_rank_bound(cls, measured["values"]["cls"], 0.005)


def test_a_filtered_question_is_answered_from_raw_events_with_the_exact_p75(api: TestClient) -> None:
    answer = ask(
        api,
        {"metrics": ["lcp_p75", "inp_poor", "scroll_depth"], "filters": [["is", "visit:country", ["DE"]]]},
    )
    assert answer["meta"]["source"] == "raw" and answer["meta"]["metrics"]["lcp_p75"]["exact"] is True
    german = truth(None, lambda e: e["country"] == "DE")[""]
    lcp, inp_poor, depth = answer["results"][0]["metrics"]
    assert lcp == round(float(np.quantile(german["values"]["lcp"], 0.75)))
    assert inp_poor == shares(german["values"]["inp"], "inp")[2]
    assert depth == round(sum(german["depths"]) / len(german["depths"]))
