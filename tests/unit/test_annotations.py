"""Annotations: made with `tally annotate` or the API, refused when they are not a short line of
text on a configured site's day, and returned beside a time series."""

from __future__ import annotations

import datetime as dt
import os
import stat
import subprocess
import sys

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from tally.annotations import AnnotationError, add_annotation, annotations_for, delete_annotation, load_annotations
from tally.settings import Settings

SITE, OTHER = "demo.tally.local", "limited.tally.test"  # sites of conf/test.yaml
NOW = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def generous_api_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """More API requests an hour than the tests below send (`settings` reads it)."""
    monkeypatch.setenv("TALLY_API__REQUESTS_PER_HOUR", "100")


def test_annotations_are_kept_per_site_and_day_in_a_private_file(settings: Settings) -> None:
    first = add_annotation(settings, site_id=SITE, day=dt.date(2026, 11, 20), text=" launch ", author="ops", now=NOW)
    add_annotation(settings, site_id=OTHER, day=dt.date(2026, 11, 21), text="other site", author="ops", now=NOW)
    assert first.text == "launch"
    assert [a.text for a in annotations_for(settings, SITE, dt.date(2026, 11, 1), dt.date(2026, 11, 30))] == ["launch"]
    assert annotations_for(settings, SITE, dt.date(2026, 11, 21), dt.date(2026, 11, 30)) == []
    path = settings.home_dir / "annotations" / "annotations.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert delete_annotation(settings, first.annotation_id, site_ids=(OTHER,)) is False, "not that site's"
    assert delete_annotation(settings, first.annotation_id) is True
    assert [a.site_id for a in load_annotations(settings)] == [OTHER]


@pytest.mark.parametrize(
    ("site", "day", "text", "message"),
    [
        ("nowhere.test", dt.date(2026, 11, 20), "x", "not configured"),
        (SITE, dt.date(2026, 11, 20), "   ", "needs some text"),
        (SITE, dt.date(2026, 11, 20), "x" * 281, "at most 280"),
        (SITE, dt.date(2026, 11, 20), "bell\x07", "control"),
        (SITE, dt.date(2026, 11, 20), "right-to-left \u202e override", "control"),
        (SITE, dt.date(1999, 1, 1), "old", "not a day"),
    ],
)
def test_what_is_not_a_short_line_on_a_configured_sites_day_is_refused(
    settings: Settings, site: str, day: dt.date, text: str, message: str
) -> None:
    with pytest.raises(AnnotationError, match=message):
        add_annotation(settings, site_id=site, day=day, text=text, author="ops", now=NOW)
    assert load_annotations(settings) == []


def test_tally_annotate_adds_lists_and_deletes(settings: Settings) -> None:
    env = {**os.environ, "TALLY_HOME": str(settings.home_dir), "TALLY_ENV": "test"}

    def tally(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tally", "annotate", *args], capture_output=True, text=True, env=env
        )

    added = tally("--site", SITE, "--date", "2026-11-20", "pricing page launched")
    assert added.returncode == 0, added.stderr
    listed = tally("--list")
    assert "2026-11-20" in listed.stdout and "pricing page launched" in listed.stdout
    assert tally("--site", "nowhere.test", "x").returncode == 2
    assert tally("--site", SITE, "--date", "someday", "x").stderr.startswith("tally annotate: --date")
    note_id = load_annotations(settings)[0].annotation_id
    assert tally("--delete", note_id).returncode == 0 and load_annotations(settings) == []


def test_the_api_adds_and_lists_annotations_of_the_keys_sites_and_returns_them_with_a_time_series(
    settings: Settings,
) -> None:
    key, _ = create_key(settings, name="t", sites=(SITE,), now=NOW)
    client = TestClient(create_app(settings))
    headers = {"Authorization": f"Bearer {key}"}
    today = dt.datetime.now(dt.UTC).date().isoformat()
    made = client.post("/api/v1/annotations", json={"site_id": SITE, "date": today, "text": "deploy"}, headers=headers)
    assert made.status_code == 201, made.text
    assert made.json()["text"] == "deploy" and "author" not in made.json()
    other = client.post("/api/v1/annotations", json={"site_id": OTHER, "date": today, "text": "x"}, headers=headers)
    assert other.status_code == 403
    bad = client.post("/api/v1/annotations", json={"site_id": SITE, "date": "soon", "text": "x"}, headers=headers)
    assert bad.status_code == 400 and bad.json()["part"] == "date"
    assert client.get("/api/v1/annotations", params={"site_id": SITE}).status_code == 401
    listed = client.get("/api/v1/annotations", params={"site_id": SITE}, headers=headers).json()["annotations"]
    assert [a["text"] for a in listed] == ["deploy"]
    series = client.post(
        "/api/v2/query",
        json={"site_id": SITE, "metrics": ["pageviews"], "date_range": "7d", "dimensions": ["time:day"]},
        headers=headers,
    )
    assert series.json()["meta"]["annotations"] == [{"date": today, "text": "deploy"}]
