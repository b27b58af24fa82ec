"""A partition's batch plans by segment, as the map pass reads them (``Batches.planned``): each
segment's batches in file order, whatever order the segments' rows come in."""

from __future__ import annotations

import numpy as np

from kcompact.compaction.pipeline.job import Batches
from kcompact.compaction.rules.decisions import DISCARD, PLAN_FLAGS


def _batches(segment: np.ndarray, partitions_before: int = 3) -> Batches:
    """One partition of ``segment``'s batches after ``partitions_before`` of two batches each."""
    pad = np.full(2 * partitions_before, 7, np.int64)
    seg = np.concatenate((pad, segment))
    n = len(seg)
    rng = np.random.default_rng(5)
    flags = rng.random((n, len(PLAN_FLAGS))) < 0.5
    return Batches(starts=np.array([*range(0, 2 * partitions_before + 1, 2), n]), sizes=np.full(n, 100),
                   records=np.arange(n) % 9 + 1, first_dirty=np.zeros(partitions_before + 1, np.int64),
                   latest_offset=np.full(partitions_before + 1, 10_000, np.int64), segment=seg,
                   position=np.arange(n) * 100, gid=(np.arange(n) // 3).astype(np.int32),
                   feeds_map=rng.random(n) < 0.7, flags=flags, pid_of_gid=np.zeros(n, np.int64))


def _expected(b: Batches, pid: int) -> dict[int, list[tuple]]:
    """Each segment's rows, one by one in file order: (position, feeds, discard, tag, records)."""
    out: dict[int, list[tuple]] = {}
    for i in range(b.starts[pid], b.starts[pid + 1]):
        out.setdefault(int(b.segment[i]), []).append(
            (int(b.position[i]), bool(b.feeds_map[i]), bool(b.flags[i, DISCARD]), int(b.gid[i]), int(b.records[i])))
    return out


def _seen(b: Batches, pid: int) -> dict[int, list[tuple]]:
    return {base: [(int(a), bool(f), bool(d), int(t), int(r))
                   for a, f, d, t, r in zip(p.position, p.feeds, p.discard, p.tag, p.records, strict=True)]
            for base, p in b.planned(pid).items()}


def test_segments_in_file_order():
    b = _batches(np.repeat(np.array([0, 400, 900], np.int64), [5, 1, 4]))
    assert _seen(b, 3) == _expected(b, 3)
    assert list(b.planned(3)) == [0, 400, 900]


def test_segments_in_any_order_keep_each_ones_batches_in_file_order():
    segment = np.random.default_rng(11).choice(np.array([0, 400, 900, 1200], np.int64), 60)
    b = _batches(segment)
    assert _seen(b, 3) == _expected(b, 3)


def test_a_partition_of_one_batch_and_one_of_none():
    b = _batches(np.array([300], np.int64))
    assert _seen(b, 3) == _expected(b, 3) == {300: [(600, bool(b.feeds_map[6]), bool(b.flags[6, DISCARD]), 2, 7)]}
    empty = _batches(np.array([], np.int64))
    assert empty.planned(3) == {}


def test_a_groups_plans_are_its_rows_and_no_copy_of_the_column():
    """``group_plans`` slices the group's rows out of the sorted ``gid`` column. The driver asks it
    once per group: a copy of the whole column each time (numpy converting the int32 column to
    compare with a Python int) was a driver cost of groups times batches, hours at 100,000
    partitions. Its allocations are traced: a slice allocates a few views, a copy the column."""
    import tracemalloc

    n = 1_000_000
    b = _batches(np.arange(n) // 50)  # 3 batches a group (gid = row // 3)
    lo, hi = 3 * 12_345, 3 * 12_346
    tracemalloc.start()
    try:
        plans = b.group_plans(12_345)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n  # the column as int64 would be 8 bytes a row
    assert plans.segment.tolist() == b.segment[lo:hi].tolist()
    assert plans.position.tolist() == b.position[lo:hi].tolist()
    assert plans.size.tolist() == b.sizes[lo:hi].tolist()
