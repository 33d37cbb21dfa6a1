"""Tally dashboard (Streamlit), run by `tally up`: access first, then the report page.

Nothing renders before ``require_viewer`` settles who is looking: an anonymous browser gets
the login form and no data. ``dashboard/server.py`` serves this page with the login routes.
"""

from __future__ import annotations

import streamlit as st

from dashboard.auth import effective_query, visible_sites
from dashboard.login import check_site, logout_button, require_viewer, share_view_button, still_allowed
from dashboard.page import compact_view, show
from dashboard.sites import with_current_sites
from dashboard.view import to_query
from tally.settings import load_settings

st.set_page_config(page_title="Tally", layout="wide")
settings = with_current_sites(load_settings())  # conf/'s sites and those added at runtime (tally site)
viewer = require_viewer(settings)
if viewer.read_only and st.context.is_embedded:  # a share link framed by its site's page (?embed=true)
    compact_view()
logout_button(viewer, settings)
sites = visible_sites(viewer, settings)
if not sites:
    st.info("No site is configured or granted to you: add one with `tally site add`, or ask an admin.")
    st.stop()
params = effective_query(viewer, st.query_params.to_dict())
check_site(viewer, params.get("site", sites[0]))
view = show(
    settings,
    sites,
    params,
    read_only=viewer.read_only,
    every_site=viewer.sees_every_site,
    allowed=lambda: still_allowed(settings, viewer),
)
share_view_button(viewer, settings, to_query(view))
