"""Core Web Vitals and scroll depth through the Stats API over real tables.

Vitals and engagement beacons go into raw.pageviews (delta-rs, as the archiver writes them), the
real Spark backfill computes agg.vitals_1h, and the API app answers over HTTP in-process. Every
figure is compared with a truth computed here in plain Python from the beacons written: band
shares and scroll depth equal, each p75 within the rank bound the answer states; filtered
questions are answered from raw events and equal the exact p75.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from jobs.backfill import backfill
from tally.settings import Settings
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.vitals import BANDS, VITALS
from tests.integration.views_support import write_raw

SITE = "demo.tally.local"  # a site of conf/test.yaml
DAYS = (dt.date(2026, 4, 6), dt.date(2026, 4, 7))
WHOLE = [DAYS[0].isoformat(), DAYS[1].isoformat()]
PAGES = ["/", "/pricing", "/docs"]
DEVICES = ["desktop", "mobile"]


def beacons(seed: int = 28, pageviews: int = 700) -> list[dict[str, Any]]:
    """Measured page views over two days (some on Google's band edges, some without INP, a few by
    bots), and engagement beacons with a scroll depth."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(pageviews):
        day = DAYS[i % 2]
        at = dt.datetime.combine(day, dt.time(rng.randrange(24), rng.randrange(60)), dt.UTC)
        base = {
            "site_id": SITE,
            "hostname": SITE,
            "path": rng.choice(PAGES),
            "url": f"https://{SITE}/",
            "device": rng.choice(DEVICES),
            "country": rng.choice(["DE", "FR"]),
            "visitor_id": f"visitor-{i % 90}",
            "is_bot": i % 53 == 0,
            "event_time": int(at.timestamp() * 1000),
            "event_date": day,
            "schema_version": 1,
        }
        vitals: dict[str, Any] = {"event_id": f"v-{i}", "type": "vitals"}
        for v in VITALS:
            if v.name == "inp" and rng.random() < 0.25:
                continue
            value = rng.choice([v.good_max, v.poor_above]) if rng.random() < 0.1 else rng.uniform(0, 1.7 * v.poor_above)
            vitals[v.column] = round(value, 4) if v.name == "cls" else round(value)
        if rng.random() < 0.6:
            vitals["scroll_depth"] = rng.randrange(0, 101)
        rows.append({**base, **vitals})
        if rng.random() < 0.4:
            rows.append({**base, "event_id": f"e-{i}", "type": "engagement", "scroll_depth": rng.randrange(0, 101)})
    return rows


BEACONS = beacons()


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
def api(settings: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    home = tmp_path_factory.mktemp("vitals-query")
    iso = dataclasses.replace(
        settings,
        home=str(home),
        warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse")),
        api=dataclasses.replace(settings.api, requests_per_hour=100_000),
    )
    columns = {name: [e.get(name) for e in BEACONS] for name in RAW_PAGEVIEWS_SCHEMA.names}
    write_raw(iso, pa.table(columns, schema=RAW_PAGEVIEWS_SCHEMA))
    backfill(spark, iso, start=DAYS[0], end=DAYS[1], progress=False)
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
