"""CSV export of a panel's table, safe to open in a spreadsheet."""

from __future__ import annotations

import pandas as pd

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
