"""Building a whole column of t-digests at once gives each list's own digest, byte for byte."""

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.sketch_columns import _values_to_digests
from tally.digest_columns import digests_from_lists
from tally.sketches import COMPRESSION, digest_from_values

# Integers like page-load milliseconds, with few or many distinct values per list.
_LIST = st.one_of(
    st.lists(st.integers(0, 5), max_size=40),
    st.lists(st.integers(0, 100_000), max_size=300),
    st.lists(st.floats(-1e9, 1e9, allow_nan=False), max_size=30),
)


def one_by_one(lists: list[list[float]]) -> list[bytes | None]:
    return [digest_from_values(values) if values else None for values in lists]


def flattened(lists: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in lists])])
    values = np.concatenate([np.asarray(v, np.float64) for v in lists]) if lists else np.empty(0)
    return values, offsets


@given(st.lists(_LIST, max_size=40))
def test_a_column_of_digests_equals_each_list_digested_on_its_own(lists: list[list[float]]) -> None:
    assert digests_from_lists(*flattened(lists)).to_list() == one_by_one(lists)


def test_negative_zero_is_zero_whichever_comes_first() -> None:
    # Found by hypothesis: -0.0 == 0.0, so which of them a sort left first decided the bytes.
    lists = [[1.0, 1.0, 1.0, 1.0, -0.0, 0.0], [-0.0], [0.0, -0.0]]
    assert digests_from_lists(*flattened(lists)).to_list() == one_by_one(lists)
    assert one_by_one([[-0.0, 0.0]]) == one_by_one([[0.0, 0.0]])


def test_lists_with_more_distinct_values_than_the_exact_limit_are_compressed_like_one_list() -> None:
    rng = np.random.default_rng(3)
    many = rng.lognormal(7, 1, 5_000).round().tolist()
    lists = [[1.0, 2.0], many, [], many[: int(COMPRESSION)]]
    packed = digests_from_lists(*flattened(lists))
    assert packed.to_list() == one_by_one(lists)
    assert list(packed.valid) == [True, True, False, True]


def test_nan_is_skipped_and_infinity_refused_as_for_one_list() -> None:
    lists = [[1.0, math.nan, 2.0], [math.nan], [3.0]]
    assert digests_from_lists(*flattened(lists)).to_list() == [
        digest_from_values([1.0, 2.0]),
        digest_from_values([math.nan]),
        digest_from_values([3.0]),
    ]
    with pytest.raises(ValueError, match="infinite"):
        digests_from_lists(*flattened([[1.0], [math.inf]]))


def test_the_spark_udf_reads_sliced_arrow_batches_and_null_lists() -> None:
    lists = [[5, 1, 5], None, [], [7], [2, 2, 9]]
    column = pa.array(lists, type=pa.list_(pa.int32()))
    for batch in (column, column.slice(1, 4)):
        got = _values_to_digests(batch).to_pylist()
        assert got == one_by_one([v or [] for v in batch.to_pylist()])
