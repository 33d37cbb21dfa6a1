"""Core Web Vitals and scroll depth from the wire to raw.pageviews: real ingest, Kafka and archiver."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from tally.deadletter import DeadLetter
from tally.settings import Settings
from tally.tables import RAW_PAGEVIEWS
from tally.vitals import SCROLL_DEPTH_COLUMN, VITALS_TYPE
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
COLUMNS = ["event_id", "type", "path", "lcp_ms", "inp_ms", "cls", "fcp_ms", "ttfb_ms", SCROLL_DEPTH_COLUMN]


# This test's own client (the loopback peer is a trusted proxy): the session's other tests send from
# 127.0.0.1 too, and may have used up that client's hourly page-view limit by the time this one runs.
CLIENT_IP = f"198.18.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 1}"


def post(url: str, body: Any) -> httpx.Response:
    headers = {"Content-Type": "text/plain", "User-Agent": FIREFOX, "X-Forwarded-For": CLIENT_IP}
    return httpx.post(f"{url}/api/event", content=json.dumps(body).encode(), headers=headers, timeout=10)


def raw_rows_on(settings: Settings, path: str) -> list[dict[str, Any]]:
    """raw.pageviews rows of one page (this test's own), by Kafka offset; none before the table exists."""
    try:
        table = DeltaTable(settings.table_uri(RAW_PAGEVIEWS)).to_pyarrow_table(columns=[*COLUMNS, "kafka_offset"])
    except TableNotFoundError:  # the archiver has not written its first commit yet
        return []
    rows = table.filter(pc.equal(table.column("path"), path)).to_pylist()
    return sorted(rows, key=lambda row: row["kafka_offset"])


def test_vitals_and_scroll_depth_reach_raw_pageviews_and_refusals_are_dead_letters(
    settings: Settings, ingest_url: str, archiver: None
) -> None:
    site = settings.sites[0].site_id
    path = f"/vitals-{uuid.uuid4().hex[:12]}"
    now = int(time.time() * 1000)

    def beacon(**keys: Any) -> dict[str, Any]:
        return {"id": str(uuid.uuid4()), "s": site, "u": f"https://{site}{path}", "te": now, "ts": now} | keys

    vitals = beacon(k=VITALS_TYPE, lcp=2400, inp=180, cls=0.12, fcp=900, ttfb=300, sd=75)
    cls_only = beacon(k=VITALS_TYPE, cls=1)
    engagement = beacon(k="engagement", e=5000, sd=40)
    misplaced = beacon(lcp=2400)  # a page view: refused
    empty = beacon(k=VITALS_TYPE)  # no measure: refused
    answer = post(ingest_url, [vitals, cls_only, engagement, misplaced, empty])
    assert answer.status_code == 202, answer.text
    assert answer.json()["accepted"] == 3
    assert post(ingest_url, {"n": "engagement", "u": f"https://{site}{path}", "d": site, "sd": 140}).status_code == 202

    wait_for(lambda: len(raw_rows_on(settings, path)) == 4, 90, "the four accepted events in raw.pageviews")
    by_id = {row["event_id"]: row for row in raw_rows_on(settings, path)}
    measures = ("lcp_ms", "inp_ms", "cls", "fcp_ms", "ttfb_ms", SCROLL_DEPTH_COLUMN)
    assert [by_id[vitals["id"]][m] for m in measures] == [2400, 180, 0.12, 900, 300, 75]
    assert [by_id[cls_only["id"]][m] for m in measures] == [None, None, 1.0, None, None, None]
    assert (by_id[engagement["id"]]["type"], by_id[engagement["id"]][SCROLL_DEPTH_COLUMN]) == ("engagement", 40)
    ours = {vitals["id"], cls_only["id"], engagement["id"]}
    (plausible,) = [row for event_id, row in by_id.items() if event_id not in ours]
    assert (plausible["type"], plausible[SCROLL_DEPTH_COLUMN], plausible["lcp_ms"]) == ("engagement", 100, None)

    def refused() -> dict[str, DeadLetter]:
        """This test's dead letters, by the id of the beacon each one holds."""
        values = read_topic(settings.kafka.servers, settings.kafka.rejected_topic)
        letters = [DeadLetter.from_json(value) for _, value in values]
        ids = (misplaced["id"], empty["id"])
        return {i: letter for letter in letters for i in ids if i in (letter.payload or "")}

    wait_for(lambda: len(refused()) == 2, 30, "both refused beacons on the dead-letter topic")
    letters = refused()
    assert all(letter.kind == "invalid_event" and letter.status == 422 for letter in letters.values())
    assert [e["field"] for e in letters[misplaced["id"]].errors] == ["[3].lcp (lcp_ms)"]
    assert [e["field"] for e in letters[empty["id"]].errors] == ["[4].k (type)"]
