"""What Tally leaves on the host: a home only its user can read, logs that stop growing, one line
per repeated failure, and a dashboard no other site can frame."""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from dashboard.framing import FramingPolicy
from ops.log_rotation import rotate_if_large, rotate_logs
from ops.private_home import make_home_private
from ops.processes import Service, Supervisor
from tally.log import FailureLog
from tally.settings import DashboardSettings, LogSettings, SettingsError


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask() -> Iterator[None]:
    """The test process's umask, restored after a test that changes it."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_new_home_is_made_private_and_so_is_all_written_in_it(tmp_path: Path, umask: None) -> None:
    home = tmp_path / "home"
    make_home_private(home)
    (home / "warehouse").mkdir()
    (home / "warehouse" / "part.parquet").write_bytes(b"events")
    assert (mode(home), mode(home / "warehouse"), mode(home / "warehouse" / "part.parquet")) == (0o700, 0o700, 0o600)


def test_an_older_home_left_open_is_tightened(tmp_path: Path, umask: None) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    make_home_private(home)
    assert mode(home) == 0o700


def test_a_service_the_supervisor_starts_writes_files_only_its_user_can_read(tmp_path: Path, umask: None) -> None:
    written = tmp_path / "written"
    script = f"import pathlib, os; p = pathlib.Path({str(written)!r}); p.mkdir(); (p / 'log').write_text('x')"
    supervisor = Supervisor(tmp_path / "home")
    supervisor.start(Service("writer", [sys.executable, "-c", script]), wait=False)
    for _ in range(200):
        if (written / "log").exists():
            break
        time.sleep(0.05)
    assert (mode(written), mode(written / "log")) == (0o700, 0o600)
    assert mode(supervisor.log_dir / "writer.log") == 0o644  # opened by this test process (umask 022)


def test_a_log_past_its_size_is_copied_aside_and_emptied_while_its_writer_keeps_appending(tmp_path: Path) -> None:
    path = tmp_path / "ingest.log"
    with open(path, "ab", buffering=0) as writer:  # what the supervisor gives a service
        writer.write(b"a" * 100)
        assert not rotate_if_large(path, max_bytes=100, keep=2)
        writer.write(b"b")
        assert rotate_if_large(path, max_bytes=100, keep=2)
        writer.write(b"next line\n")
    assert path.read_bytes() == b"next line\n"  # appended at the emptied file's start, no hole
    assert path.with_name("ingest.log.1").read_bytes() == b"a" * 100 + b"b"


def test_only_the_newest_rotated_copies_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "views.log"
    for generation in range(5):
        path.write_bytes(str(generation).encode() * 10)
        assert rotate_logs(tmp_path, max_bytes=5, keep=3) == [path]
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["views.log", "views.log.1", "views.log.2", "views.log.3"]
    assert [path.with_name(f"views.log.{n}").read_bytes()[:1] for n in (1, 2, 3)] == [b"4", b"3", b"2"]


def test_log_settings_below_one_are_refused_naming_the_key() -> None:
    with pytest.raises(SettingsError, match=r"logs\.max_mib"):
        LogSettings(max_mib=0)
    with pytest.raises(SettingsError, match=r"logs\.keep"):
        LogSettings(keep=0)


def test_a_repeated_failure_is_logged_in_full_once_then_one_line_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = FailureLog(logging.getLogger("tally.test"), "request failed")
    for _ in range(3):
        try:
            "\ud800".encode()
        except UnicodeEncodeError as e:
            failures.record(e, path="/api/event")
    records = [r for r in caplog.records if r.name == "tally.test"]
    assert [r.exc_info is not None for r in records] == [True, False, False]
    assert [r.fields["count"] for r in records] == [1, 2, 3]  # type: ignore[attr-defined]
    assert {r.fields["kind"] for r in records} == {"UnicodeEncodeError"}  # type: ignore[attr-defined]


def framed(frame_ancestors: tuple[str, ...], response: Response | None = None) -> dict[str, str]:
    def page(_: object) -> Response:
        return response or PlainTextResponse("dashboard")

    app = FramingPolicy(Starlette(routes=[Route("/", page)]), frame_ancestors=frame_ancestors)
    return dict(TestClient(app).get("/").headers)


def test_every_dashboard_response_names_who_may_frame_it() -> None:
    headers = framed(())
    assert headers["content-security-policy"] == "frame-ancestors 'self'"
    assert headers["x-frame-options"] == "SAMEORIGIN"


def test_listed_origins_may_frame_the_dashboard_and_nothing_else_may() -> None:
    headers = framed(("https://www.example.com", "https://*.shop.example:8443"))
    assert (
        headers["content-security-policy"]
        == "frame-ancestors 'self' https://www.example.com https://*.shop.example:8443"
    )
    assert "x-frame-options" not in headers  # it cannot name them; browsers that read CSP ignore it


def test_a_stricter_header_a_route_set_itself_is_kept() -> None:
    headers = framed((), PlainTextResponse("login", headers={"X-Frame-Options": "DENY"}))
    assert headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("origin", ["example.com", "https://example.com/share", "javascript:alert(1)", "*", "'none'"])
def test_a_frame_ancestor_that_is_not_an_origin_is_refused(origin: str) -> None:
    with pytest.raises(SettingsError, match=r"dashboard\.frame_ancestors"):
        DashboardSettings(frame_ancestors=(origin,))
