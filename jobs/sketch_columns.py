"""Spark column functions over Tally's sketches: t-digests built in an Arrow UDF, merged in a pandas UDF.

HLL sketches need no UDF: Spark's built-in ``hll_sketch_agg``/``hll_union_agg`` write the
Apache DataSketches format that ``tally.sketches`` (and the dashboard) read back.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf, pandas_udf
from pyspark.sql.types import BinaryType

from tally.digest_columns import digests_from_lists
from tally.sketches import HLL_LG_K, merge_digests


def _values_to_digests(values: pa.Array) -> pa.Array:
    # The list column arrives as Arrow buffers; the whole batch is sorted at once in numpy
    # (a pandas UDF would first turn every list into a Python object, then build one by one).
    lists = values.cast(pa.list_(pa.float64())).fill_null([])
    packed = digests_from_lists(lists.flatten().to_numpy(zero_copy_only=False), lists.offsets.to_numpy())
    validity = pa.array(packed.valid).buffers()[1]
    buffers = [validity, pa.py_buffer(packed.offsets), pa.py_buffer(packed.data)]
    return pa.Array.from_buffers(pa.binary(), len(packed.valid), buffers, null_count=int((~packed.valid).sum()))


def _digests_to_digest(digests: pd.Series) -> pd.Series:
    return digests.map(lambda d: merge_digests(list(d)) if d is not None and len(d) else None)


# Scalar UDFs over Arrow batches: one digest per row, built or merged in numpy.
_digest_of_values = arrow_udf(_values_to_digests, BinaryType())  # type: ignore[call-overload]
_digest_of_digests = pandas_udf(_digests_to_digest, BinaryType())  # type: ignore[call-overload]


def digest_of_values(values: Column) -> Column:
    """A t-digest of an array of numbers (null for an empty array)."""
    return _digest_of_values(values)  # type: ignore[no-any-return]


def merged_digest(digests: Column) -> Column:
    """One t-digest merged from an array of t-digests; the order of the array does not matter."""
    return _digest_of_digests(digests)  # type: ignore[no-any-return]


def visitors_sketch(visitor_id: Column) -> Column:
    """Aggregate: an HLL sketch of distinct visitors (DataSketches format, lg_k from tally.sketches)."""
    return F.hll_sketch_agg(visitor_id, HLL_LG_K)


def merged_visitors_sketch(sketches: Column) -> Column:
    """Aggregate: the union of HLL sketches; never add distinct counts.

    Sketches written before a change of ``HLL_LG_K`` may meet new ones (an hour rolled up across the
    restart): the union then takes the smaller lg_k, as ``tally.sketches.union_estimate`` does, instead
    of failing the batch.
    """
    return F.hll_union_agg(sketches, allowDifferentLgConfigK=True)
