"""A partition's batch table is its chunks' tables joined in order, field for field, as numpy's
own concatenate of the structured arrays gives them."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.compaction.cleaning.partition_scan import _joined
from kcompact.compaction.rules.model import BATCH_TABLE


def _table(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.empty(n, BATCH_TABLE)
    for name in BATCH_TABLE.names:
        t[name] = rng.integers(-2**31, 2**31, n).astype(BATCH_TABLE[name])
    return t


@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 40)), max_size=8))
def test_joined_tables_equal_numpys_concatenate(chunks):
    tables = [_table(seed, n) for seed, n in chunks]
    joined = _joined(tables)
    assert joined.dtype == BATCH_TABLE
    expected = np.concatenate(tables) if tables else np.empty(0, BATCH_TABLE)
    assert joined.tobytes() == expected.tobytes()
    for name in BATCH_TABLE.names:
        assert (joined[name] == expected[name]).all()
