"""A group's batch plans pickled as one buffer (GroupPlans.__reduce__) come back as they went: the
same values, dtypes and shapes, writable, whatever the strides of the columns they were cut from."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.compaction.cleaning.rewrite import GroupPlans
from kcompact.compaction.rules.decisions import PLAN_FLAGS

WIDTH = len(PLAN_FLAGS)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**62), st.booleans())
def test_plans_come_back_as_they_went(n, seed, strided):
    rng = np.random.default_rng(seed)
    ints = rng.integers(-(2**62), 2**62, (n, 3), dtype=np.int64)  # columns of a table: strided views
    segment, position, size = (ints[:, k] if strided else ints[:, k].copy() for k in range(3))
    flags = rng.random((n, WIDTH)) < 0.5
    feeds = rng.random(n) < 0.5
    back = pickle.loads(pickle.dumps(GroupPlans(segment, position, size, flags, feeds), pickle.HIGHEST_PROTOCOL))
    for got, want in zip((back.segment, back.position, back.size, back.flags, back.feeds),
                         (segment, position, size, flags, feeds), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want)
        assert got.flags.writeable


def test_one_buffer_is_smaller_than_five_arrays():
    n = 12
    plans = GroupPlans(np.arange(n), np.arange(n) * 100, np.full(n, 61), np.zeros((n, WIDTH), bool), np.ones(n, bool))
    apiece = pickle.dumps(tuple(getattr(plans, f) for f in ("segment", "position", "size", "flags", "feeds")))
    assert len(pickle.dumps(plans)) < len(apiece)
