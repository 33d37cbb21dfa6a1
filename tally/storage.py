"""Where the Delta tables live, for readers outside Spark (delta-rs): one place for the table
location and the object-store options, so that every reader works on a local folder and on
``s3a://`` alike."""

from __future__ import annotations

from deltalake import DeltaTable

from tally.settings import Settings


def storage_options(settings: Settings) -> dict[str, str]:
    """delta-rs storage options for the warehouse (empty for a local folder)."""
    del settings  # a local warehouse needs none; object-store credentials come with scale-out
    return {}


def open_table(settings: Settings, name: str) -> DeltaTable:
    """Open a Delta table such as ``agg.traffic_1d`` with delta-rs.

    Raises ``deltalake.exceptions.TableNotFoundError`` when the table has not been written yet.
    """
    return DeltaTable(settings.table_uri(name), storage_options=storage_options(settings) or None)
