"""The floor of ``bench.dashboard_browser``: a Streamlit page that does nothing but say it is drawn.

Served by the same ``streamlit run`` options as the dashboard (:func:`bench.dashboard_browser.bare_service`
takes them from ``ops.stack``'s dashboard service) and timed by the same predicate, so its load time
is what any Streamlit page costs on this machine and browser before a line of Tally's code runs: the
page and its scripts, the WebSocket, a session and a script run, the first paint.
"""

from __future__ import annotations

import datetime as dt

import streamlit as st

st.set_page_config(page_title="Tally (bare)", layout="wide")
st.title("A bare Streamlit page")
st.caption(f"Figures as of {dt.datetime.now(dt.UTC):%H:%M:%S} (UTC).")
