"""Exports: a panel's table as CSV, safe to open in a spreadsheet; and from the sidebar, the shown
range of the site as Plausible's CSV export ZIP or its raw events as Parquet (``tally export``'s two
files, made by the same query-layer code, docs/IMPORT-EXPORT.md). Offered to whoever may see the
site on a page of their own login, not on a read-only share link."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import streamlit as st

from query import export, raw_export
from query.sources import Sources
from tally.plausible_export import TABLES
from tally.storage import arrow_dataset, find_table
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.tables import RAW_PAGEVIEWS

EXPORT_OPEN = "export_open"  # the sidebar's export menu (its state key)

# A cell starting with one of these is a formula to Excel, LibreOffice and Google Sheets.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(cell: object) -> object:
    """Prefix text that a spreadsheet would run as a formula with an apostrophe (OWASP's advice)."""
    if isinstance(cell, str) and cell.startswith(_FORMULA_STARTS):
        return "'" + cell
    return cell


def safe_csv(frame: pd.DataFrame) -> bytes:
    """The table as UTF-8 CSV, with formula-like text cells neutralised (numbers are left alone)."""
    cleaned = frame.copy()
    cleaned.columns = [str(neutralise(str(c))) for c in cleaned.columns]
    for column in cleaned.columns:
        if cleaned[column].dtype == object or pd.api.types.is_string_dtype(cleaned[column]):
            cleaned[column] = cleaned[column].map(neutralise)
    text: str = cleaned.to_csv(index=False)
    return text.encode("utf-8")


def sidebar_exports(sources: Sources, site_id: str, start: dt.date, end: dt.date, timezone: str) -> None:
    """The sidebar's "Export" menu: each file is made when its button is clicked (Streamlit calls
    the function on a thread of its own), so an open menu costs nothing until then."""
    menu = st.sidebar.popover("Export", key=EXPORT_OPEN, on_change="rerun", width="stretch")
    if not menu.open:
        return
    menu.caption(f"This site's {start} – {end} ({timezone}), the range shown. The same files as `tally export`.")
    stem = f"{site_id.replace('.', '_')}_{start:%Y%m%d}_{end:%Y%m%d}"
    menu.download_button(
        "Plausible CSV export (ZIP)",
        lambda: plausible_zip(sources, site_id, start, end, timezone),
        file_name=f"{stem}.zip",
        mime="application/zip",
        key="export_plausible",
        on_click="ignore",
        help="Ten CSV files, as Plausible's Imports & Exports writes them: Plausible and `tally import` read it.",
    )
    menu.download_button(
        "Raw events (Parquet, a file per day, in a ZIP)",
        lambda: raw_zip(sources, site_id, start, end, timezone),
        file_name=f"{stem}_raw.zip",
        mime="application/zip",
        key="export_raw",
        on_click="ignore",
        help="The events as stored, without the fields Tally keeps for itself; no IP address is stored.",
    )


def plausible_zip(sources: Sources, site_id: str, start: dt.date, end: dt.date, timezone: str) -> bytes:
    """Plausible's export of the range (:mod:`query.export`); before any event, its ten files without rows."""
    exact = sources.exact(site_id, prepared=True)
    out = io.BytesIO()
    no_rows: Iterator[tuple[str, list[dict[str, Any]]]] = ((name, []) for name in TABLES)
    rows = export.export_rows(exact, site_id, start, end, timezone) if exact is not None else no_rows
    export.write_zip(out, rows, start, end)
    return out.getvalue()


def raw_zip(sources: Sources, site_id: str, start: dt.date, end: dt.date, timezone: str) -> bytes:
    """The range's raw events, a Parquet file per local day (:mod:`query.raw_export`)."""
    table = find_table(sources.settings, RAW_PAGEVIEWS)
    raw = arrow_dataset(table) if table is not None else ds.dataset(RAW_PAGEVIEWS_SCHEMA.empty_table())
    out = io.BytesIO()
    raw_export.write_zip(out, raw, site_id, start, end, timezone)
    return out.getvalue()
