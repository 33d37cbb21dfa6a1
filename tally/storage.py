"""Where the Delta tables live, for readers and writers outside Spark (delta-rs): one place for the
table location and the object-store options, so that every reader works on a local folder and on
``s3a://`` alike.

Spark names S3 ``s3a://`` (Hadoop's S3A filesystem); delta-rs (the Rust ``object_store`` crate)
names it ``s3://``. Settings keep the ``s3a://`` form, and :func:`delta_uri` converts it here.

How delta-rs commits on S3 (``warehouse.delta_rs_commit``): a Delta commit must create
``_delta_log/<version>.json`` only if no other writer created it first. ``conditional_put`` (the
default) asks S3 to do exactly that with ``If-None-Match: *`` (AWS S3 since 2024, MinIO, R2 and the
local test server support it), so concurrent delta-rs writers (the archiver's compaction by
``tally maintain`` next to the archiver, two ``tally check`` runs) stay safe without a lock
service. ``unsafe_rename`` is for S3-compatible stores without conditional writes: correct only
while each table has a single delta-rs writer at a time, as the archiver is for ``raw.*``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from pyarrow import fs as pafs

from tally.settings import Settings
from tally.tables import RAW_PAGEVIEWS, RAW_REJECTED, archiver_app_id

T = TypeVar("T")


def delta_uri(settings: Settings, name: str) -> str:
    """The table's location as delta-rs names it (``s3://`` for an ``s3a://`` warehouse)."""
    uri = settings.table_uri(name)
    return "s3://" + uri.removeprefix("s3a://") if uri.startswith("s3a://") else uri


def storage_options(settings: Settings) -> dict[str, str]:
    """delta-rs storage options for the warehouse (empty for a local folder).

    Credentials left empty fall through to the AWS default chain, which delta-rs reads itself
    (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, profiles, instance roles).
    """
    w = settings.warehouse
    if not w.on_object_store:
        return {}
    options = {
        "AWS_REGION": w.region or "us-east-1",
        # Same addressing as Spark's s3a (fs.s3a.path.style.access), so both find the same bucket.
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if w.path_style_access else "true",
    }
    if w.endpoint:
        options["AWS_ENDPOINT_URL"] = w.endpoint
    if w.allow_http:
        options["AWS_ALLOW_HTTP"] = "true"
    if w.access_key_id:
        options["AWS_ACCESS_KEY_ID"] = w.access_key_id
        options["AWS_SECRET_ACCESS_KEY"] = w.secret_access_key
    if w.delta_rs_commit == "conditional_put":
        options["AWS_CONDITIONAL_PUT"] = "etag"
    else:
        options["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    return options


def open_table(settings: Settings, name: str) -> DeltaTable:
    """Open a Delta table such as ``agg.traffic_1d`` with delta-rs.

    Raises ``deltalake.exceptions.TableNotFoundError`` when the table has not been written yet.
    """
    return DeltaTable(delta_uri(settings, name), storage_options=storage_options(settings) or None)


def arrow_dataset(table: DeltaTable) -> ds.Dataset:
    """A table version's rows as an Arrow dataset; a local table's over the local file system, which
    says where its files are (delta-rs's own does not), so that DuckDB can read them itself
    (``query/raw_events.py``)."""
    uri = table.table_uri  # file:///home/a%20b/... for a local table: its path, percent-encoded
    if "://" not in uri:
        root = uri
    elif uri.startswith("file://"):
        root = unquote(urlsplit(uri).path)
    else:  # an object store: delta-rs's file system reads it
        return table.to_pyarrow_dataset()
    return table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, pafs.LocalFileSystem()))


def find_table(settings: Settings, name: str) -> DeltaTable | None:
    """The table opened with delta-rs, or None if nothing has written it yet."""
    try:
        return open_table(settings, name)
    except TableNotFoundError:
        return None


def append_rows(settings: Settings, name: str, data: pa.Table, **options: Any) -> None:
    """Append Arrow rows to a table with delta-rs, creating the table on first use."""
    write_deltalake(
        delta_uri(settings, name), data, mode="append", storage_options=storage_options(settings) or None, **options
    )


def read_frame(settings: Settings, name: str, schema: pa.Schema) -> pd.DataFrame:
    """A whole (small) table as pandas; a table nothing has written yet reads as no rows with ``schema``'s columns."""
    table = find_table(settings, name)
    return schema.empty_table().to_pandas() if table is None else table.to_pandas()


def recorded_offset(settings: Settings, name: str, topic: str, partition: int) -> int | None:
    """The first offset of (topic, partition) that raw table ``name`` does not hold; None if it holds none."""
    table = find_table(settings, name)
    return None if table is None else table.transaction_version(archiver_app_id(topic, partition))


def archived_offset(settings: Settings, topic: str, partition: int) -> int:
    """The offset below which every message of (topic, partition) is archived, in either raw table.

    A poison message on pageviews goes to raw.rejected, so raw.pageviews alone would stay behind it.
    """
    return max(recorded_offset(settings, name, topic, partition) or 0 for name in (RAW_PAGEVIEWS, RAW_REJECTED))


def retry_on_conflict(action: Callable[[], T], *, attempts: int = 5) -> T:
    """Run a delta-rs commit, retrying when a concurrent writer (another check run) got there first."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except CommitFailedError:
            if attempt == attempts:
                raise
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


def text_is(column: str, value: str) -> ds.Expression:
    """The filter ``column == value`` on a text column of a Delta table read as an Arrow dataset.

    The files delta-rs rewrites (a DELETE of ``tally forget`` or ``tally import remove``, a MERGE, the
    archiver's compaction) store text as ``string_view``, which pyarrow cannot compare with a
    string ("no kernel matching input types (string, string_view)"); cast, both compare. (Filters
    that only pick fragments, by partition values and statistics, need no cast.)"""
    return ds.field(column).cast(pa.string()) == value
