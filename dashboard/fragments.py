"""Parts of the page that rerun alone (Streamlit fragments), and how each tells its rerun from the page run.

A fragment's body runs first inside the page run, then again alone: when a widget in it is used (a
tab picked) or on its timer (the live figures). The two differ: the page run has just passed the
access gate and asked every figure, while a rerun alone must ask again whether the viewer may still
look, and read the tables' new versions. Streamlit calls a rerun alone with the page run's own
arguments, so what tells them apart is remembered across reruns in session state: under
``tally_drawn_for:<fragment>``, the page run a fragment was last drawn for (:func:`rerun_alone`).

That is written by the fragment as it starts, not by the page run after it: a page run stopped
while drawing (``st.stop``, past which session state can no longer be written) leaves nothing
behind that would let a later rerun alone pass for the page run.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import streamlit as st

DRAWN_FOR = "tally_drawn_for"  # session-state key prefix: a fragment's name, then the page run it was drawn for


def new_page_run() -> str:
    """A page run's id, new on every run of the whole page."""
    return uuid.uuid4().hex


def rerun_alone(fragment: str, page_run: str) -> bool:
    """Whether this run of ``fragment``, drawn by the page run ``page_run``, reruns it alone: it has been
    drawn for that page run already. Its first run for a page run is that page run drawing it."""
    key = f"{DRAWN_FOR}:{fragment}"
    again = st.session_state.get(key) == page_run
    st.session_state[key] = page_run
    return again


def leave_unless_allowed(allowed: Callable[[], bool] | None) -> None:
    """Rerun the whole page unless the viewer may still look (``allowed``: the gate's verdict now);
    the page's gate then shows the login form or the refusal."""
    if allowed is not None and not allowed():
        st.rerun(scope="app")


def in_fragment(fragment: str, page_run: str, allowed: Callable[[], bool] | None, draw: Callable[[], None]) -> None:
    """Run ``draw`` as the fragment named ``fragment``: a widget in it (a tab picked) reruns it alone.
    Each such rerun first asks ``allowed``, as the live figures do (the page run itself has just
    passed the gate)."""
    st.fragment(guarded_part)(fragment, page_run, allowed, draw)


def guarded_part(fragment: str, page_run: str, allowed: Callable[[], bool] | None, draw: Callable[[], None]) -> None:
    """The body of :func:`in_fragment`: the gate's question on a rerun alone, then ``draw``."""
    if rerun_alone(fragment, page_run):
        leave_unless_allowed(allowed)
    draw()
