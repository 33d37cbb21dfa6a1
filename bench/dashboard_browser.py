"""Dashboard in a browser: the report page as a person waits for it, in headless Chromium.

Starts the real dashboard (``streamlit run dashboard/server.py`` with the login routes, as
``tally up`` runs it) and the bundled broker, on free 127.0.0.1 ports in a home of their own, over
``bench.dashboard``'s data set (its warehouse, read only). Logs in as the first-run admin (every
site, as the e2e tests do) through ``POST /login``, then drives the page with Playwright and times
it from navigation (or from the click that changes the view) to the last panel drawn:

- the script run is over (``stApp``'s ``data-test-script-state`` is ``notRunning``; after a
  change, only once a run has started since the click),
- nothing on screen is left from an earlier run (no ``data-stale`` element, no skeleton),
- the page's last line ("Figures as of …") is there and every chart is drawn (a Vega chart's canvas,
  or the lines' image of an HTML chart, ``dashboard/markup.py``, decoded).

Figures, per range (today, 7 days, 90 days): the first load of a dashboard process just started
(every server cache cold, and a new browser profile: nothing cached), then warm loads (a new tab of
the same browser: a new Streamlit session over a warm server). The profile is on disk, as a person's
browser's is: the HTTP cache and the scripts the browser compiled are kept for the next tab (a
profile in memory only, a private window's, keeps no compiled scripts; the floor is measured in both,
side by side). Before the first load, the new profile opens the server's health check (plain text,
nothing the page uses), untimed, so the first load does not also pay for setting the profile up.
Then, on a warm 7-day page, the range changed in the sidebar (7 → 90 days and back), and on the
90-day page a country picked in the Country filter (a new country each time, so no answer can be
cached; the filter is cleared again between samples, untimed). The filter pickers are in the
sidebar's Filters menu (drawn only while open): it is opened once before the first pick, untimed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin

from bench.dashboard import SITE, dataset
from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from ops import broker, chromium
from ops.access_commands import ensure_admin
from ops.processes import Service, Supervisor
from ops.stack import free_ports, services
from tally.log import setup_logging
from tally.settings import PROJECT_ROOT, Settings, load_settings

RANGES = {"today": "today", "7 days": "7d", "90 days": "90d"}  # figure name -> the sidebar's preset
GOALS = {"warm 90 days": "≤ 1,000 ms", "first load, 90 days": "≤ 2,500 ms", "filter change": "≤ 1,500 ms"}
SAMPLES = 6  # warm loads per range, range changes and filter changes in one run
VIEWPORT = {"width": 1400, "height": 1600}
WAIT_MS = 180_000  # a page that takes longer than this is broken, not slow
ARTIFACTS = PROJECT_ROOT / "test-artifacts"
METHOD = (
    "The real dashboard process (`streamlit run dashboard/server.py`) and the bundled broker on free ports over"
    " bench.dashboard's data set, driven in headless Chromium (Playwright) by a user logged in as the first-run"
    " admin (every site: the data-health panel's whole-instance figures included). Each figure runs from"
    " navigation (or the click in the sidebar) to the last panel drawn: the script run over, no element left"
    " from an earlier run, the page's last line and every chart drawn. First load: a dashboard process just"
    " started and a new browser profile on disk, as a person's (every cache cold), one per range and run; warm: "
    f"{SAMPLES} new tabs of the same browser (a new Streamlit session each). Range change: {SAMPLES} changes of"
    " the sidebar's range, 7 ↔ 90 days, on a warm page; filter change: "
    f"{SAMPLES} countries picked in the Country filter on the 90-day page, each one not picked before (answered"
    " from raw events; the Filters menu opened first, untimed). The floor: the same loads of a bare Streamlit"
    " page (`bench/bare_streamlit.py`: a title and the last line) served with the dashboard's options, first in"
    " the same run, also in a profile kept in"
    " memory only (a private window: no compiled scripts kept), as every load was measured before 2026-11-28."
    " Each new profile first opens the server's health check, untimed (its stores set up, nothing of the page"
    " cached). The ranges end today, so the live figures refresh every 10 s (`dashboard.refresh_seconds`)"
    " during the runs, as on any page a person keeps open."
)
# Figures of the page before issue 29's changes: (median, min, max) over 3 runs, in ms.
BEFORE_COMMIT = "d18399a; its runs started 2026-11-26 19:38 UTC"
BEFORE: dict[str, tuple[float, float, float]] = {
    "first load, today": (7158, 5742, 8489),
    "warm, today: p50": (4686, 4194, 5203),
    "warm, today: p95": (5189, 4561, 5757),
    "first load, 7 days": (6991, 5350, 7157),
    "warm, 7 days: p50": (4676, 3412, 4728),
    "warm, 7 days: p95": (4814, 3783, 5128),
    "first load, 90 days": (6579, 5058, 7011),
    "warm, 90 days: p50": (4835, 3904, 4956),
    "warm, 90 days: p95": (5077, 4157, 5491),
    "range change (7 ↔ 90 days): p50": (2529, 2079, 2883),
    "range change (7 ↔ 90 days): p95": (2954, 2278, 3816),
    "filter change (a country, 90 days): p50": (48351, 38947, 57439),
    "filter change (a country, 90 days): p95": (91727, 58578, 104636),
}


def before_table() -> str:
    """The figures measured before issue 29's changes, in the document's own table format."""
    if not BEFORE:
        return ""
    from bench.markdown import number, spread

    rows = [f"| {name} | {number(m)} | {spread(lo, hi)} | ms | 3 |" for name, (m, lo, hi) in BEFORE.items()]
    head = ["| figure (before) | median | spread (min – max) | unit | runs |", "|---|---:|---:|---|---:|"]
    title = (
        f"Before issue 29's changes (commit {BEFORE_COMMIT}, the same command and data set, the browser's profile"
        " in memory only)"
    )
    return f"\n\n{title}:\n\n" + "\n".join(head + rows)


NOTE = METHOD + before_table()

# The page is drawn: see the module docstring. ``afterChange``: a run must have started since the
# change (``window.__tallyRan``, set by RUN_WATCH), else the page before the click would count.
DRAWN = """(afterChange) => {
  if (document.querySelector("[data-testid='stException']")) return "exception";
  const app = document.querySelector("[data-testid='stApp']");
  if (!app || app.dataset.testScriptState !== "notRunning") return false;
  if (afterChange && !window.__tallyRan) return false;
  if (document.querySelector("[data-stale='true'], [data-testid='stSkeleton']")) return false;
  const captions = [...document.querySelectorAll("[data-testid='stCaptionContainer']")];
  if (!captions.some((c) => c.textContent.startsWith("Figures as of"))) return false;
  const charts = [...document.querySelectorAll("[data-testid='stVegaLiteChart']")];
  if (!charts.every((c) => c.querySelector("canvas, svg"))) return false;
  const lines = [...document.querySelectorAll("img.tly-lines")];  // dashboard/markup.py's charts
  return lines.every((i) => i.complete && i.naturalWidth > 0) ? "drawn" : false;
}"""
RUN_WATCH = """() => {
  window.__tallyRan = false;
  if (window.__tallyWatch) return;
  const app = document.querySelector("[data-testid='stApp']");
  window.__tallyWatch = new MutationObserver(() => {
    if (app.dataset.testScriptState !== "notRunning") window.__tallyRan = true;
  });
  window.__tallyWatch.observe(app, {attributes: true, attributeFilter: ["data-test-script-state"]});
}"""


def page_url(base: str, preset: str, **extra: str) -> str:
    """The page of the benchmark's site over one of the sidebar's presets (``today``, ``7d``, ``90d``)."""
    return f"{base}/?{urlencode({'site': SITE, 'range': preset, **extra})}"


def percentile(sample: list[float], q: float) -> float:
    """The nearest-rank percentile of a sample (as bench.dashboard.timed reports p95)."""
    ordered = sorted(sample)
    return ordered[max(0, round(q * len(ordered)) - 1)]


def spread_figures(name: str, sample: list[float], *, goal: str = "", note: str = "") -> list[Figure]:
    """``<name>: p50`` and ``<name>: p95`` of a sample of milliseconds (one figure alone when one sample)."""
    if not sample:
        return []
    if len(sample) == 1:
        return [Figure(name, sample[0], "ms", goal=goal, note=note)]
    return [
        Figure(f"{name}: p50", statistics.median(sample), "ms", goal=goal, note=note or f"{len(sample)} samples"),
        Figure(f"{name}: p95", percentile(sample, 0.95), "ms"),
    ]


def wait_drawn(page: Any, *, after_change: bool) -> None:
    """Wait until the page is drawn (:data:`DRAWN`); an exception on the page fails the run."""
    handle = page.wait_for_function(DRAWN, arg=after_change, polling="raf", timeout=WAIT_MS)
    if handle.json_value() == "exception":
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "bench-dashboard-exception.png"), full_page=True)
        raise RuntimeError(f"the page raised an exception; see {ARTIFACTS / 'bench-dashboard-exception.png'}")


def timed_load(page: Any, url: str) -> float:
    """Milliseconds from navigation to the page drawn."""
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    wait_drawn(page, after_change=False)
    return (time.perf_counter() - t0) * 1000


def timed_change(page: Any, change: Callable[[], None]) -> float:
    """Milliseconds from ``change`` (the click that picks a new value) to the page drawn again."""
    page.evaluate(RUN_WATCH)
    t0 = time.perf_counter()
    change()
    wait_drawn(page, after_change=True)
    return (time.perf_counter() - t0) * 1000


MENUS = {"Country": "Filters"}  # pickers in a sidebar menu (dashboard/controls.py), and the menu's name


def picker(page: Any, label: str) -> Any:
    """A sidebar select box; one in a menu is shown first (the menu opened, its run waited for, untimed:
    a person opens the menu, then picks)."""
    menu = MENUS.get(label)
    if menu is None:
        return page.locator("[data-testid='stSidebar']").get_by_label(label)
    inside = page.locator("[data-testid='stPopoverBody']").get_by_label(label)
    if not inside.count():
        page.evaluate(RUN_WATCH)
        page.locator("[data-testid='stSidebar']").get_by_role("button", name=menu).click()
        wait_drawn(page, after_change=True)
    return inside


def pick(page: Any, label: str, option: str | re.Pattern[str]) -> Callable[[], None]:
    """Open a sidebar select box and return the click on one of its options (the change to time)."""
    picker(page, label).click()
    choice = page.get_by_role("option", name=option, exact=isinstance(option, str)).first
    choice.wait_for(timeout=WAIT_MS)
    return choice.click  # type: ignore[no-any-return]


def options(page: Any, label: str) -> list[str]:
    """The options of a sidebar select box (opened, read and closed again)."""
    picker(page, label).click()
    page.get_by_role("option").first.wait_for(timeout=WAIT_MS)
    names = [str(o) for o in page.get_by_role("option").all_inner_texts()]
    page.keyboard.press("Escape")
    return names


def log_in(context: Any, base: str, password: str) -> None:
    """Log in as the admin through ``POST /login`` (the browser's own cookie jar keeps the session),
    without loading the page: the timed navigation is the first page run of the process."""
    form = context.request.get(f"{base}/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text())
    assert token, f"no form token in GET /login ({form.status})"
    answer = context.request.post(
        f"{base}/login",
        form={"csrf": token[1], "next": "/", "user": "admin", "password": password},
        headers={"Origin": base},
        max_redirects=0,
    )
    assert answer.status == 303, f"login refused: {answer.status} {answer.text()[:200]}"


def bare_service(settings: Settings) -> Service:
    """``bench/bare_streamlit.py`` served exactly as the dashboard is (its ``streamlit run`` options)."""
    dashboard = services(settings)["dashboard"]
    command = [
        str(Path(__file__).with_name("bare_streamlit.py")) if c.endswith("server.py") else c for c in dashboard.command
    ]
    assert command != dashboard.command, "the dashboard's command names its page file"
    return dataclasses.replace(dashboard, name="bare-streamlit", command=command)


def floor(playwright: Any, settings: Settings, supervisor: Supervisor, runs: int) -> list[Figure]:
    """First and warm loads of the bare Streamlit page (:mod:`bench.bare_streamlit`), timed as the
    dashboard's; then the same in a profile kept in memory only (a private window), as this benchmark
    ran them before 2026-11-28: what the scripts compiled and kept on disk are worth."""
    supervisor.start(bare_service(settings))
    url = f"http://127.0.0.1:{settings.dashboard.port}/"
    try:
        with browser_profile(playwright) as context:
            first, warm = loads(context, url, runs)
        browser = playwright.chromium.launch(**chromium.launch_options())
        try:
            first_in_memory, in_memory = loads(browser.new_context(viewport=VIEWPORT), url, runs)
        finally:
            browser.close()
    finally:
        supervisor.stop("bare-streamlit")
    note = "bench/bare_streamlit.py under the dashboard's own server options: what any Streamlit page costs"
    private = "a private window's profile: no compiled scripts kept (the method before 2026-11-28)"
    return [
        Figure("bare Streamlit page (the floor), first load", first, "ms", note=note),
        *spread_figures("bare Streamlit page (the floor), warm", warm),
        Figure(
            "bare Streamlit page (the floor), first load, profile in memory only", first_in_memory, "ms", note=private
        ),
        *spread_figures("bare Streamlit page (the floor), warm, profile in memory only", in_memory, note=private),
    ]


@contextmanager
def browser_profile(playwright: Any) -> Iterator[Any]:
    """A browser with a new profile on disk, as a person's own (its cache and the scripts it compiled
    are kept for the next tab): every cache cold at the first page, warm after."""
    with tempfile.TemporaryDirectory(prefix="tally-bench-profile-") as profile:
        context = playwright.chromium.launch_persistent_context(profile, viewport=VIEWPORT, **chromium.launch_options())
        try:
            yield context
        finally:
            context.close()


@contextmanager
def running_dashboard(settings: Settings, supervisor: Supervisor) -> Iterator[str]:
    """A dashboard process just started (every server cache cold); yields its address."""
    supervisor.start(services(settings)["dashboard"])
    try:
        yield f"http://127.0.0.1:{settings.dashboard.port}"
    finally:
        supervisor.stop("dashboard")


def private_stack(home: Path, warehouse: str) -> Settings:
    """Settings of a home of its own (broker, users, sessions, logs) on free ports, over ``warehouse``."""
    kafka, controller, dashboard = free_ports(3)
    os.environ |= {
        "TALLY_HOME": str(home),
        "TALLY_WAREHOUSE__PATH": warehouse,
        "TALLY_KAFKA__BOOTSTRAP_SERVERS": "",
        "TALLY_KAFKA__PORT": str(kafka),
        "TALLY_KAFKA__CONTROLLER_PORT": str(controller),
        "TALLY_DASHBOARD__PORT": str(dashboard),
    }
    return load_settings()


@in_temporary_home("browser")
def measure(
    home: Path,
    quick: bool = False,
    *,
    events: int | None = None,
    days: int = 90,
    runs: int | None = None,
    filters: bool = True,
) -> list[Figure]:
    """One run: first and warm loads of each range, then range and filter changes (module docstring)."""
    from playwright.sync_api import sync_playwright

    events = events or (300_000 if quick else 10_000_000)
    runs = runs or (2 if quick else SAMPLES)
    data, last = dataset(events, days)
    if last != dt.datetime.now(dt.UTC).date():
        print(f"the data set ends {last}, not today: the presets' days hold less data", flush=True)
    settings = private_stack(home, data.warehouse_uri)
    supervisor = Supervisor(settings.home_dir)
    admin = ensure_admin(settings)
    assert admin is not None, "a new home has no users: the first-run admin is created"
    figures: list[Figure] = []
    broker.ensure_formatted(settings)
    supervisor.start(services(settings)["broker"])
    try:
        broker.wait_until_ready(settings.kafka.servers)
        broker.ensure_topics(settings)
        with sync_playwright() as p:
            figures += floor(p, settings, supervisor, runs)
            for name, preset in RANGES.items():
                with running_dashboard(settings, supervisor) as base, browser_profile(p) as context:
                    log_in(context, base, admin.password)
                    first, warm = loads(context, page_url(base, preset), runs)
                    figures.append(
                        Figure(f"first load, {name}", first, "ms", goal=GOALS.get(f"first load, {name}", ""))
                    )
                    figures += spread_figures(f"warm, {name}", warm, goal=GOALS.get(f"warm {name}", ""))
                    if preset == "90d":
                        figures += changes(context, base, runs, filters=filters)
    finally:
        supervisor.stop("dashboard")
        supervisor.stop("broker")
    return figures


def loads(context: Any, url: str, runs: int) -> tuple[float, list[float]]:
    """The first load of ``url`` (a new browser profile, a new process), then ``runs`` loads in new tabs.
    Before it, untimed, the profile opens the server's health check: its stores are set up, as in the
    browser of a person, and nothing the page uses is cached."""
    page = context.new_page()
    page.goto(urljoin(url, "/_stcore/health"))
    first = timed_load(page, url)
    page.close()
    warm = []
    for _ in range(runs):
        page = context.new_page()
        warm.append(timed_load(page, url))
        page.close()
    return first, warm


def changes(context: Any, base: str, runs: int, *, filters: bool = True) -> list[Figure]:
    """Range changes on a warm 7-day page (7 → 90 days and back), then country filters on 90 days
    (``filters``: at 10M events a filtered 90-day page fails, its DuckDB out of memory)."""
    page = context.new_page()
    timed_load(page, page_url(base, "7d"))
    ranges = []
    for i in range(runs):
        target = "Last 90 days" if i % 2 == 0 else "Last 7 days"
        ranges.append(timed_change(page, pick(page, "Date range", re.compile(f"^{target}"))))
    if runs % 2 == 0:  # the last change went back to 7 days: to 90 days again, untimed
        timed_change(page, pick(page, "Date range", re.compile("^Last 90 days")))
    if not filters:
        page.close()
        return spread_figures("range change (7 ↔ 90 days)", ranges)
    countries = [c for c in options(page, "Country") if c != "(any)"][:runs]
    filtered = []
    for country in countries:
        filtered.append(timed_change(page, pick(page, "Country", country)))
        timed_change(page, pick(page, "Country", "(any)"))
    page.close()
    return [
        *spread_figures("range change (7 ↔ 90 days)", ranges),
        *spread_figures(
            "filter change (a country, 90 days)",
            filtered,
            goal=GOALS["filter change"],
            note=f"{len(filtered)} samples, each a country not picked before (answered from raw events)",
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard_browser", description=__doc__)
    parser.add_argument("--events", type=int, default=10_000_000, help="events in bench.dashboard's data set")
    parser.add_argument("--days", type=int, default=90, help="days the data set spans")
    parser.add_argument("--runs", type=int, default=SAMPLES, help="warm loads per range, range and filter changes")
    parser.add_argument("--quick", action="store_true", help="300k events and fewer runs (a smoke test)")
    parser.add_argument("--no-filter", action="store_true", help="leave out the filter changes")
    args = parser.parse_args(argv)
    setup_logging()
    events = None if args.quick and args.events == 10_000_000 else args.events
    runs = None if args.quick else args.runs
    print_figures(measure(args.quick, events=events, days=args.days, runs=runs, filters=not args.no_filter))


if __name__ == "__main__":
    main()
