"""The page's fragments tell their rerun alone from the page run that drew them by what session state
remembers across reruns (``dashboard/fragments.py``), not by a flag of their own.

A fragment's rerun alone (a tab picked, the live figures' timer) is asked as a browser asks it
(:mod:`tests.unit.fragment_reruns`).
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.unit.fragment_reruns import rerun_fragments_alone

TABS_PAGE = """
import streamlit as st
from dashboard.fragments import in_fragment, new_page_run

log = st.session_state.setdefault("log", [])

def allowed() -> bool:
    log.append("gate")
    return st.session_state.get("may_look", True)

def tabs() -> None:
    log.append("tabs")
    if st.session_state.get("stop"):
        st.stop()  # as the page does when a filtered range does not fit in memory

log.append("page")
in_fragment("tabs", new_page_run(), allowed, tabs)
"""


def page(tmp_path: Path) -> AppTest:
    script = tmp_path / "page.py"
    script.write_text(TABS_PAGE)
    return AppTest.from_file(str(script), default_timeout=30)


def test_a_fragment_drawn_by_the_page_run_skips_the_gate_and_asks_it_when_it_reruns_alone(tmp_path: Path) -> None:
    app = page(tmp_path).run()
    assert not app.exception
    assert app.session_state["log"] == ["page", "tabs"], "the page run has just passed the gate"
    rerun_fragments_alone(app)
    rerun_fragments_alone(app)
    assert app.session_state["log"] == ["page", "tabs", "gate", "tabs", "gate", "tabs"]
    app.run()
    assert app.session_state["log"][-2:] == ["page", "tabs"], "a new page run: no gate in the fragment"


def test_a_viewer_no_longer_allowed_when_a_fragment_reruns_alone_gets_the_whole_page_again(tmp_path: Path) -> None:
    app = page(tmp_path).run()
    app.session_state["may_look"] = False  # logged out in another tab since
    rerun_fragments_alone(app)
    assert app.session_state["log"][2:] == ["gate", "page", "tabs"], "the whole page reran: its gate decides"


def test_a_page_run_stopped_while_drawing_a_fragment_leaves_its_reruns_alone_behind_the_gate(tmp_path: Path) -> None:
    app = page(tmp_path)
    app.session_state["stop"] = True
    app.run()
    assert not app.exception and app.session_state["log"] == ["page", "tabs"]
    app.session_state["stop"] = False
    rerun_fragments_alone(app)
    assert app.session_state["log"][2:] == ["gate", "tabs"]
