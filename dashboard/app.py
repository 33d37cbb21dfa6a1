"""Tally dashboard (Streamlit). Run by `tally up`; reads agg.* tables only."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from dashboard.queries import pageviews_per_minute
from quality.quarantine import quarantined
from tally.settings import load_settings

st.set_page_config(page_title="Tally", layout="wide")
settings = load_settings()

st.title("Tally")
held = quarantined(settings)
if held:
    listed = ", ".join(f"{q.table} {q.partition_date} ({q.checker})" for q in held[:8])
    st.warning(
        f"Data-quality checks failed for {len(held)} partition(s): {listed}. Figures from those dates may be wrong; "
        "see `tally check` / `tally audit`, then `tally backfill` the dates."
    )
sites = [s.site_id for s in settings.sites]
site_id = st.selectbox("Site", sites) if sites else None
if site_id is None:
    st.info("No sites are configured yet: add one under `sites:` in conf/tally.yaml.")
    st.stop()
minutes = st.select_slider(
    "Period",
    options=[15, 60, 180, 720, 1440],
    value=60,
    format_func=lambda m: f"last {m // 60} h" if m >= 60 else f"last {m} min",
)
since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes)
rows = pageviews_per_minute(settings, site_id, since)

if rows.empty:
    st.info(
        "No page views in this period yet. Start traffic with `tally traffic`, or embed the snippet "
        "shown by `tally up` in a page of a configured site. Views update every few seconds."
    )
    st.stop()

total = int(rows["pageviews"].sum())
st.metric("Page views (exact)", f"{total:,}")
st.caption("Bots excluded. Counts are exact; event time, 1-minute windows.")

series = rows.groupby("window_start", as_index=True)["pageviews"].sum().rename("page views")
st.subheader("Page views per minute")
st.bar_chart(series)

st.subheader("Top pages")
top = rows.groupby("page", as_index=False)["pageviews"].sum().sort_values("pageviews", ascending=False)
st.dataframe(top.rename(columns={"page": "Page", "pageviews": "Page views"}), hide_index=True, width="stretch")
st.caption(f"Updated {dt.datetime.now(dt.UTC):%H:%M:%S} UTC. Reload the page to refresh.")
