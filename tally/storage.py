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

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from tally.settings import Settings


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
