"""planner.rules: Kafka's LogCleanerManager rules as pure functions, checked against numbers
worked out by hand (the arithmetic is in the comments) and a few hypothesis properties.

Layout used by most tests (``four()``): segments at base offsets 0, 10, 20 of 100 bytes each
and the active segment at 30 (50 bytes) holding offsets 30..34, so the log end offset is 35.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.conf.settings import LONG_MAX
from kcompact.planner.rules import (
    ACTIVE_SEGMENT,
    LAST_STABLE,
    MIN_LAG,
    Candidate,
    SegmentFacts,
    bytes_between,
    decide,
    dirty_non_active,
    first_batches_matter,
    first_dirty_offset,
    first_uncleanable,
    floor_index,
    largest_timestamp,
    max_compaction_delay,
    rank,
    round_to_segment,
)

NOW = 1_720_000_420_000
OLD = NOW - 1_000_000  # a timestamp far older than every lag used below


def seg(base, size=100, mtime=OLD, largest=None, first=None) -> SegmentFacts:
    return SegmentFacts(base, size, mtime, largest_timestamp=largest, first_batch_timestamp=first)


def four(by_base=None) -> list[SegmentFacts]:
    """0, 10, 20 (100 bytes) + active 30 (50 bytes); ``{10: dict(largest=...)}`` patches segment 10."""
    sizes = {0: 100, 10: 100, 20: 100, 30: 50}
    return [seg(b, sizes[b], **(by_base or {}).get(b, {})) for b in sizes]


def decide4(segments=None, *, checkpoint=None, log_start=0, log_end=35, last_stable=35, min_lag_ms=0,
            max_lag_ms=LONG_MAX, ratio=0.5):
    return decide(segments or four(), log_start=log_start, log_end=log_end, checkpoint=checkpoint,
                  last_stable=last_stable, min_lag_ms=min_lag_ms, max_lag_ms=max_lag_ms,
                  min_cleanable_ratio=ratio, now=NOW)


# -- firstDirtyOffset -------------------------------------------------------------------------
def test_checkpoint_missing_starts_at_log_start():
    assert first_dirty_offset(None, 10, 35) == (10, "no checkpoint entry")


def test_checkpoint_below_log_start_is_reset():
    # checkpoint 5 < logStart 10 -> logStart
    assert first_dirty_offset(5, 10, 35) == (10, "checkpoint 5 below log start 10")


def test_checkpoint_above_log_end_is_reset():
    # checkpoint 40 > logEnd 35 -> logStart 0
    assert first_dirty_offset(40, 0, 35) == (0, "checkpoint 40 above log end 35")


def test_checkpoint_in_range_is_kept_including_both_ends():
    assert first_dirty_offset(17, 10, 35) == (17, None)
    assert first_dirty_offset(10, 10, 35) == (10, None)  # == logStart: valid
    assert first_dirty_offset(35, 10, 35) == (35, None)  # == logEnd: valid (nothing dirty)


def test_reset_checkpoint_in_the_full_decision():
    # checkpoint 40 > logEnd 35 -> firstDirty 0; bound = active 30; clean 0, cleanable 0+10+20 = 300
    d = decide4(checkpoint=40)
    assert (d.first_dirty_offset, d.checkpoint_reset) == (0, "checkpoint 40 above log end 35")
    assert (d.clean_bytes, d.cleanable_bytes, d.cleanable_ratio) == (0, 300, 1.0)


# -- firstUncleanableDirtyOffset --------------------------------------------------------------
def test_active_segment_bounds_when_nothing_else_does():
    # min(LSO 35, active base 30) = 30, set by the active segment
    assert first_uncleanable(four(), 0, 35, 0, NOW) == (30, ACTIVE_SEGMENT)
    d = decide4()
    # rounded: 30 is in the active segment -> 30; cleanable = 100+100+100 = 300, clean 0 -> ratio 1.0
    assert (d.first_uncleanable_dirty_offset, d.uncleanable_bound) == (30, ACTIVE_SEGMENT)
    assert (d.clean_bytes, d.cleanable_bytes, d.total_bytes, d.cleanable_ratio, d.cleanable) == (0, 300, 300, 1.0, True)


def test_last_stable_offset_holds_back_and_is_rounded_down():
    # an open transaction starting at 15: min(LSO 15, active 30) = 15, rounded down to its segment 10
    assert first_uncleanable(four(), 0, 15, 0, NOW) == (15, LAST_STABLE)
    d = decide4(last_stable=15)
    # cleanable = segments from the one holding 0 with base < 10 = segment 0 = 100; clean 0
    assert (d.first_uncleanable_dirty_offset, d.uncleanable_bound) == (10, LAST_STABLE)
    assert (d.clean_bytes, d.cleanable_bytes, d.cleanable_ratio) == (0, 100, 1.0)


def test_bound_never_below_first_dirty():
    # checkpoint 25, LSO 12: max(25, min(12, 30)) = 25 -> rounded to segment 20.
    assert first_uncleanable(four(), 25, 12, 0, NOW) == (25, LAST_STABLE)
    d = decide4(checkpoint=25, last_stable=12)
    # clean = bases < 25 = 0, 10, 20 = 300; cleanable = from min(25, 20) = 20 to bases < 20 = nothing
    assert (d.first_uncleanable_dirty_offset, d.clean_bytes, d.cleanable_bytes, d.cleanable_ratio) == (20, 300, 0, 0.0)
    assert not d.cleanable


def test_min_lag_excludes_the_first_recent_segment_and_all_after_it():
    # min lag 100 s: recent = largest timestamp > NOW - 100000. Segment 10 is recent, 20 is old
    # again (out-of-order timestamps): Kafka stops at the FIRST recent one -> bound 10.
    segs = four({0: dict(largest=NOW - 500_000), 10: dict(largest=NOW - 50_000), 20: dict(largest=NOW - 400_000)})
    assert first_uncleanable(segs, 0, 35, 100_000, NOW) == (10, MIN_LAG)
    d = decide4(segs, min_lag_ms=100_000)
    # cleanable = segment 0 = 100, clean 0
    assert (d.first_uncleanable_dirty_offset, d.uncleanable_bound, d.cleanable_bytes) == (10, MIN_LAG, 100)


def test_min_lag_boundary_is_strictly_greater():
    # largest == NOW - lag is not "> NOW - lag": old enough to clean -> the active segment bounds
    segs = four({10: dict(largest=NOW - 100_000)})
    assert first_uncleanable(segs, 0, 35, 100_000, NOW) == (30, ACTIVE_SEGMENT)
    segs = four({10: dict(largest=NOW - 99_999)})
    assert first_uncleanable(segs, 0, 35, 100_000, NOW) == (10, MIN_LAG)


def test_min_lag_only_looks_at_dirty_non_active_segments():
    # segment 0 is recent but clean (firstDirty 10); the active segment is recent too: neither counts
    segs = four({0: dict(largest=NOW), 30: dict(largest=NOW)})
    assert first_uncleanable(segs, 10, 35, 100_000, NOW) == (30, ACTIVE_SEGMENT)
    # segment holding firstDirty (10, firstDirty 15 in its middle) does count
    segs = four({10: dict(largest=NOW)})
    assert first_uncleanable(segs, 15, 35, 100_000, NOW) == (15, MIN_LAG)  # max(15, 10)


def test_min_lag_zero_ignores_timestamps():
    segs = four({0: dict(largest=NOW), 10: dict(largest=NOW)})
    assert first_uncleanable(segs, 0, 35, 0, NOW) == (30, ACTIVE_SEGMENT)


def test_min_lag_falls_back_to_mtime_without_time_index_timestamp():
    # no time-index timestamp (None or -1): the .log mtime is the largest timestamp
    assert largest_timestamp(seg(0, mtime=123, largest=None)) == 123
    assert largest_timestamp(seg(0, mtime=123, largest=-1)) == 123
    assert largest_timestamp(seg(0, mtime=123, largest=456)) == 456
    # segment 20: no time index entry, modified 10 s ago (> NOW - 100 s) -> recent -> bound 20
    segs = four({0: dict(largest=OLD), 10: dict(largest=OLD), 20: dict(largest=None, mtime=NOW - 10_000)})
    assert first_uncleanable(segs, 0, 35, 100_000, NOW) == (20, MIN_LAG)
    # the same segment modified long ago: nothing recent -> the active segment bounds
    segs = four({0: dict(largest=OLD), 10: dict(largest=OLD), 20: dict(largest=None, mtime=OLD)})
    assert first_uncleanable(segs, 0, 35, 100_000, NOW) == (30, ACTIVE_SEGMENT)


def test_smallest_bound_wins():
    # LSO 25, active 30, min lag -> 10: min is 10 (min lag)
    segs = four({10: dict(largest=NOW)})
    assert first_uncleanable(segs, 0, 25, 1, NOW) == (10, MIN_LAG)
    # LSO 5 is below the min-lag bound 10
    assert first_uncleanable(segs, 0, 5, 1, NOW) == (5, LAST_STABLE)


# -- rounding and byte counts -------------------------------------------------------------------
def test_round_to_segment():
    segs = four()
    assert round_to_segment(segs, 0) == 0
    assert round_to_segment(segs, 19) == 10
    assert round_to_segment(segs, 20) == 20
    assert round_to_segment(segs, 25) == 20
    assert round_to_segment(segs, 30) == 30  # the active segment
    assert round_to_segment(segs, 99) == 30  # past the log end: still the active segment


def test_floor_index_and_dirty_non_active():
    segs = four()
    assert [floor_index(segs, o) for o in (-1, 0, 9, 10, 34, 100)] == [-1, 0, 0, 1, 3, 3]
    assert [s.base_offset for s in dirty_non_active(segs, 15)] == [10, 20]
    assert [s.base_offset for s in dirty_non_active(segs, 30)] == []


def test_bytes_between():
    segs = four()
    assert bytes_between(segs, -1, 15) == 200  # bases 0, 10 < 15
    assert bytes_between(segs, 15, 30) == 200  # segment holding 15 (10) and 20
    assert bytes_between(segs, 10, 10) == 0
    assert bytes_between(segs, 0, 99) == 350  # everything, active included


def test_first_dirty_mid_segment_counts_in_both_sums():
    # checkpoint 15 (inside segment 10): clean = bases < 15 = 0 + 10 = 200;
    # cleanable = from the segment holding 15 (10) to bases < 30 = 10 + 20 = 200.
    # The 100 bytes of segment 10 are in both: total 400 > the 300 non-active bytes, as in Kafka.
    d = decide4(checkpoint=15, ratio=0.49)
    assert (d.first_dirty_offset, d.first_uncleanable_dirty_offset) == (15, 30)
    assert (d.clean_bytes, d.cleanable_bytes, d.total_bytes) == (200, 200, 400)
    assert d.cleanable_ratio == 0.5 and d.cleanable


def test_ratio_exactly_at_min_is_not_cleanable():
    # same numbers: 200 / 400 = 0.5, and 0.5 > 0.5 is false
    d = decide4(checkpoint=15, ratio=0.5)
    assert d.cleanable_ratio == 0.5
    assert not d.cleanable


def test_ratio_with_clean_prefix():
    # checkpoint 10: clean = 100 (segment 0), cleanable = 10 + 20 = 200 -> 200/300
    d = decide4(checkpoint=10)
    assert (d.clean_bytes, d.cleanable_bytes) == (100, 200)
    assert d.cleanable_ratio == pytest.approx(2 / 3) and d.cleanable


def test_nothing_dirty():
    # checkpoint 35 = logEnd: firstDirty 35, bound max(35, 30) = 35 -> rounded to active 30;
    # clean = bases < 35 = all 350 bytes; cleanable from min(35, 30) = 30 to bases < 30 = 0
    d = decide4(checkpoint=35)
    assert (d.first_uncleanable_dirty_offset, d.clean_bytes, d.cleanable_bytes, d.cleanable_ratio) == (30, 350, 0, 0.0)
    assert not d.cleanable


# -- max.compaction.lag.ms --------------------------------------------------------------------
def test_max_lag_forces_a_partition_under_the_ratio():
    # checkpoint 20: clean 200, cleanable 100 (segment 20) -> ratio 1/3 <= 0.5.
    # Dirty non-active = [20]; first batch at NOW - 5000; max lag 3000 -> clean-until NOW - 3000;
    # delay = (NOW - 3000) - (NOW - 5000) = 2000 > 0 -> needCompactionNow, and 100 cleanable bytes.
    segs = four({0: dict(first=OLD), 10: dict(first=OLD), 20: dict(first=NOW - 5000), 30: dict(first=OLD)})
    d = decide4(segs, checkpoint=20, max_lag_ms=3000)
    assert d.cleanable_ratio == pytest.approx(1 / 3)
    assert (d.max_compaction_delay_ms, d.need_compaction_now, d.cleanable) == (2000, True, True)


def test_max_lag_not_yet_reached():
    # same, max lag 6000: clean-until NOW - 6000 < NOW - 5000 -> delay 0, ratio 1/3 <= 0.5
    segs = four({20: dict(first=NOW - 5000)})
    d = decide4(segs, checkpoint=20, max_lag_ms=6000)
    assert (d.max_compaction_delay_ms, d.need_compaction_now, d.cleanable) == (0, False, False)


def test_max_lag_with_zero_cleanable_bytes_is_not_cleanable():
    # open transaction at 20 (LSO 20), checkpoint 20: bound max(20, min(20, 30)) = 20 -> 0 cleanable
    # bytes, although segment 20's first batch (NOW - 5000) is 2000 ms past the max lag
    segs = four({20: dict(first=NOW - 5000)})
    d = decide4(segs, checkpoint=20, last_stable=20, max_lag_ms=3000)
    assert (d.need_compaction_now, d.max_compaction_delay_ms, d.cleanable_bytes) == (True, 2000, 0)
    assert not d.cleanable


def test_max_lag_earliest_of_the_dirty_non_active_first_batches():
    # firstDirty 10: dirty non-active = 10, 20. Segment 0 (clean) and the active one are ignored.
    segs = four({0: dict(first=NOW - 90_000), 10: dict(first=NOW - 7000), 20: dict(first=NOW - 8000),
                   30: dict(first=NOW - 80_000)})
    # earliest = NOW - 8000; clean-until NOW - 1000 -> delay 7000
    assert max_compaction_delay(segs, 10, 1000, NOW) == 7000


def test_first_batch_timestamp_not_positive_is_ignored():
    # 0 and -1 (no timestamp) are not candidates; None = not read
    segs = four({0: dict(first=0), 10: dict(first=-1), 20: dict(first=None)})
    assert max_compaction_delay(segs, 0, 1000, NOW) == 0
    segs = four({0: dict(first=-1), 10: dict(first=NOW - 3000)})
    # earliest positive = NOW - 3000; clean-until NOW - 1000 -> delay 2000
    assert max_compaction_delay(segs, 0, 1000, NOW) == 2000


@given(st.lists(st.one_of(st.none(), st.integers(-1, NOW + 10_000)), min_size=1, max_size=4),
       st.sampled_from([0, 1, 1000, NOW - 2, NOW - 1, NOW, NOW + 5, LONG_MAX]), st.integers(0, NOW + 10_000))
def test_first_batches_read_only_when_they_can_matter(firsts, max_lag, now):
    """The planner skips the reads when first_batches_matter says no: the delay is then 0 whatever they hold."""
    segs = [seg(10 * i, first=f) for i, f in enumerate(firsts)] + [seg(10 * len(firsts))]
    if not first_batches_matter(max_lag, now):
        assert max_compaction_delay(segs, 0, max_lag, now) == 0


def test_first_batches_matter_at_the_edge():
    assert not first_batches_matter(LONG_MAX, NOW)
    assert not first_batches_matter(NOW - 1, NOW)  # clean-until 1: no positive timestamp is below it
    assert first_batches_matter(NOW - 2, NOW)
    segs = four({0: dict(first=1)})
    assert max_compaction_delay(segs, 0, NOW - 2, NOW) == 1


def test_default_max_lag_never_forces():
    # LONG_MAX: clean-until = NOW - 2^63 + 1 < every positive timestamp
    segs = four({0: dict(first=1)})
    assert max_compaction_delay(segs, 0, LONG_MAX, NOW) == 0


# -- ranking and budgets -----------------------------------------------------------------------
def cand(key, ratio, size, topic=None, partition=0):
    return Candidate(key, ratio, size, topic or key, partition)


def test_rank_highest_ratio_first_with_ties_broken():
    got = rank([
        cand("low", 0.6, 500),
        cand("high", 0.9, 10),
        cand("tie-small", 0.7, 100),
        cand("tie-big", 0.7, 300),  # same ratio: more cleanable bytes first
        cand("b", 0.65, 50, topic="t", partition=2),
        cand("a", 0.65, 50, topic="t", partition=1),  # same ratio and bytes: topic, then partition
    ])
    order = sorted(got, key=lambda k: got[k][0])
    assert order == ["high", "tie-big", "tie-small", "a", "b", "low"]
    assert all(reason is None for _, reason in got.values())


TOP = "over budget: --top {} (as many partitions ranked higher are selected)"
BYTES = "over budget: --max-bytes {} (its {} cleanable bytes do not fit in the {} left)"


def test_rank_top_n():
    got = rank([cand("a", 0.9, 10), cand("b", 0.8, 10), cand("c", 0.7, 10)], top=2)
    assert got == {"a": (1, None), "b": (2, None), "c": (3, TOP.format(2))}


def test_rank_max_bytes_fills_greedily_in_rank_order():
    # a (100) fits 250; b (200) does not fit the 150 left: passed over; c (50) fits what is left (Kafka
    # cleans the filthiest log it can: one partition larger than the budget must not block the rest)
    got = rank([cand("a", 0.9, 100), cand("b", 0.8, 200), cand("c", 0.7, 50)], max_bytes=250)
    assert got == {"a": (1, None), "b": (2, BYTES.format(250, 200, 150)), "c": (3, None)}


def test_rank_a_top_partition_larger_than_the_budget_does_not_starve_the_rest():
    # the case: plan --top 1 --max-bytes 200000, the top partition 300 kB, the next 194 kB
    got = rank([cand("big", 0.9, 300_000), cand("fits", 0.8, 194_000), cand("c", 0.7, 1_000)], top=1,
               max_bytes=200_000)
    assert got == {"big": (1, BYTES.format(200_000, 300_000, 200_000)), "fits": (2, None), "c": (3, TOP.format(1))}


def test_rank_max_bytes_exact_fit_and_both_budgets():
    # 100 + 200 = 300 <= 300: both fit
    got = rank([cand("a", 0.9, 100), cand("b", 0.8, 200)], max_bytes=300)
    assert got == {"a": (1, None), "b": (2, None)}
    # top 2 and 150 bytes: a fits (100), b over bytes (200 > 50 left), c (1) fits: the second selected
    got = rank([cand("a", 0.9, 100), cand("b", 0.8, 200), cand("c", 0.7, 1), cand("d", 0.6, 1)], top=2,
               max_bytes=150)
    assert got == {"a": (1, None), "b": (2, BYTES.format(150, 200, 50)), "c": (3, None), "d": (4, TOP.format(2))}


def test_rank_nothing():
    assert rank([]) == {}
    assert rank([cand("a", 0.9, 100)], top=0) == {"a": (1, TOP.format(0))}


# -- properties ---------------------------------------------------------------------------------
@st.composite
def partitions(draw):
    n = draw(st.integers(1, 6))
    gaps = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    first = draw(st.integers(0, 100))
    bases, at = [], first
    for g in gaps:
        bases.append(at)
        at += g
    stamps = st.one_of(st.none(), st.integers(-1, NOW + 10_000))
    segs = [SegmentFacts(b, draw(st.integers(0, 1000)), draw(st.integers(0, NOW + 10_000)),
                         largest_timestamp=draw(stamps), first_batch_timestamp=draw(stamps)) for b in bases]
    log_end = bases[-1] + draw(st.integers(0, 50))
    log_start = draw(st.integers(bases[0], log_end))
    last_stable = draw(st.integers(bases[0], log_end))
    checkpoint = draw(st.one_of(st.none(), st.integers(-5, log_end + 20)))
    return dict(segments=segs, log_start=log_start, log_end=log_end, checkpoint=checkpoint, last_stable=last_stable,
                min_lag_ms=draw(st.sampled_from([0, 1, 60_000, LONG_MAX])),
                max_lag_ms=draw(st.sampled_from([1, 60_000, LONG_MAX])),
                min_cleanable_ratio=draw(st.floats(0, 1)), now=NOW)


@settings(max_examples=300, deadline=None)
@given(partitions())
def test_decision_invariants(p):
    d = decide(**p)
    segs = p["segments"]
    total = sum(s.size for s in segs)
    bases = [s.base_offset for s in segs]
    # the dirty range starts inside the log
    assert p["log_start"] <= d.first_dirty_offset <= p["log_end"]
    # the uncleanable offset is a segment's base offset, never past the active segment
    assert d.first_uncleanable_dirty_offset in bases
    assert d.first_uncleanable_dirty_offset <= segs[-1].base_offset
    # nothing is cleaned before the dirty range starts
    assert d.first_dirty_offset <= d.first_uncleanable_dirty_offset or d.cleanable_bytes == 0
    # each sum is at most the log; together at most the log plus the one segment they may share
    assert d.clean_bytes <= total and d.cleanable_bytes <= total - segs[-1].size
    shared = segs[max(floor_index(segs, d.first_dirty_offset), 0)].size
    assert d.clean_bytes + d.cleanable_bytes <= total + shared
    assert 0.0 <= d.cleanable_ratio <= 1.0
    assert d.max_compaction_delay_ms >= 0 and d.need_compaction_now == (d.max_compaction_delay_ms > 0)
    assert d.cleanable == ((d.need_compaction_now and d.cleanable_bytes > 0)
                           or d.cleanable_ratio > p["min_cleanable_ratio"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 1000)), max_size=12),
       st.one_of(st.none(), st.integers(0, 12)), st.one_of(st.none(), st.integers(0, 5000)))
def test_rank_invariants(items, top, max_bytes):
    cands = [Candidate(f"k{i}", r, b, "t", i) for i, (r, b) in enumerate(items)]
    got = rank(cands, top, max_bytes)
    by_rank = sorted(cands, key=lambda c: got[c.key][0])
    assert sorted(r for r, _ in got.values()) == list(range(1, len(cands) + 1))
    assert all(a.cleanable_ratio >= b.cleanable_ratio for a, b in zip(by_rank, by_rank[1:]))
    selected = [c for c in by_rank if got[c.key][1] is None]
    # within both budgets, and greedy: every one passed over had no room left when its turn came
    assert top is None or len(selected) <= top
    assert max_bytes is None or sum(c.cleanable_bytes for c in selected) <= max_bytes
    for c in by_rank:
        if got[c.key][1] is not None:
            before = [s for s in selected if got[s.key][0] < got[c.key][0]]
            assert (top is not None and len(before) >= top) or (
                max_bytes is not None and sum(s.cleanable_bytes for s in before) + c.cleanable_bytes > max_bytes)
