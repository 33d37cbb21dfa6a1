"""Spark column functions over Tally's sketches: t-digests built and merged in pandas UDFs.

HLL sketches need no UDF: Spark's built-in ``hll_sketch_agg``/``hll_union_agg`` write the
Apache DataSketches format that ``tally.sketches`` (and the dashboard) read back.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import pandas_udf
from pyspark.sql.types import BinaryType

from tally.sketches import HLL_LG_K, digest_from_values, merge_digests


def _values_to_digests(values: pd.Series) -> pd.Series:
    return values.map(lambda v: digest_from_values(v) if v is not None and len(v) else None)


def _digests_to_digest(digests: pd.Series) -> pd.Series:
    return digests.map(lambda d: merge_digests(list(d)) if d is not None and len(d) else None)


# Scalar pandas UDFs (Arrow batches): one digest per row, built or merged in numpy.
_digest_of_values = pandas_udf(_values_to_digests, BinaryType())  # type: ignore[call-overload]
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
    """Aggregate: the union of HLL sketches; never add distinct counts."""
    return F.hll_union_agg(sketches)
