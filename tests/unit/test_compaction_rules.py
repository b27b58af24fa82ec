"""Kafka's cleaner rules as pure functions: BatchInfo / SegmentInfo values built by hand, no
files, no Spark. Every expectation is worked out here from Kafka's Cleaner, LogCleanerManager,
CleanedTransactionMetadata and ProducerStateManager (see docs/compaction-semantics.md), with the
arithmetic in comments, never by calling the code under test for the answer."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.compaction.rules.decisions import (
    COPY,
    DROP,
    EMPTY,
    INT32_MAX,
    REWRITE,
    BatchPlan,
    Outcome,
    PartitionPlan,
    batch_outcome,
    group_segments,
    plan_partition,
    retain_last_empty_at,
)
from kcompact.compaction.rules.model import BatchInfo, SegmentInfo, infos_at, table_of
from kcompact.compaction.rules.transactions import TransactionSweep, collect_aborted, last_of_active_producers
from kcompact.conf.releases import resolve
from kcompact.readers.indexes import AbortedTxn, OffsetEntry
from kcompact.readers.records import ABORT, COMMIT
from tests.oracles import keep_record
from tests.reference.cleaner import LogFilter
from tests.reference.producers import ProducerState

NOW = 1_720_000_000_000
DAY = 86_400_000
EMPTY_MARKER = "empty"  # a control batch whose record was already removed


def seg(base: int, size: int = 100, *, mtime: int = 0, index: int = 0, timeindex: int = 0,
        aborted: tuple[AbortedTxn, ...] = (), offset_index: tuple[OffsetEntry, ...] = ()) -> SegmentInfo:
    return SegmentInfo(base, size, mtime, index, timeindex, aborted, offset_index)


def batch(segment: int, position: int, base: int, last: int | None = None, *, pid: int = -1, epoch: int = -1,
          txn: bool = False, control=None, horizon: int | None = None, max_ts: int = NOW - 1000,
          count: int | None = None, magic: int = 2, size: int = 100) -> BatchInfo:
    """``control``: None (data), ABORT, COMMIT or EMPTY_MARKER."""
    last = base if last is None else last
    is_control = control is not None
    return BatchInfo(
        segment=segment,
        position=position,
        size=size,
        magic=magic,
        base_offset=base,
        last_offset=last,
        producer_id=pid,
        producer_epoch=epoch,
        is_transactional=txn or is_control,
        is_control=is_control,
        control_type=None if control in (None, EMPTY_MARKER) else control,
        delete_horizon_ms=horizon,
        max_timestamp=max_ts,
        record_count=(0 if control == EMPTY_MARKER else 1)
        if is_control
        else (last - base + 1 if count is None else count),
    )


def bases(groups) -> list[list[int]]:
    return [[s.base_offset for s in g] for g in groups]


# -- group_segments (Kafka's groupSegmentsBySize) ---------------------------------------------------
def test_group_by_log_size_bound_inclusive():
    segs = [seg(0, 40), seg(10, 60), seg(20, 1), seg(30, 50), seg(40, 50), seg(50, 51)]
    # 40 + 60 = 100 <= 100 -> merged; + 1 = 101 > 100 -> new group at 20;
    # 1 + 50 = 51, + 50 = 101 > 100 -> new group at 40; 50 + 51 = 101 -> new group at 50
    assert bases(group_segments(segs, 100, 1 << 20, 60)) == [[0, 10], [20, 30], [40], [50]]


def test_group_by_offset_index_bound():
    segs = [seg(0, 10, index=8, timeindex=0), seg(10, 10, index=8), seg(20, 10, index=8)]
    # offset index sizes: 8 + 8 = 16 <= 16; 16 + 8 = 24 > 16
    assert bases(group_segments(segs, 1000, 16, 30)) == [[0, 10], [20]]


def test_group_by_time_index_bound():
    segs = [seg(0, 10, timeindex=12), seg(10, 10, timeindex=12), seg(20, 10, timeindex=4)]
    # time index sizes: 12 + 12 = 24 > 16 -> split; 12 + 4 = 16 <= 16 -> merged
    assert bases(group_segments(segs, 1000, 16, 30)) == [[0], [10, 20]]


def test_group_by_int32_offset_bound():
    # The candidate's last offset = the next segment's base - 1 (or first uncleanable - 1 for the
    # last one in the list); it must be within INT32_MAX (2^31 - 1) of the group's first base offset.
    fits = [seg(0), seg(100), seg(2**31)]
    # seg 100's last offset = 2^31 - 1 -> 2^31 - 1 - 0 = INT32_MAX: fits; seg 2^31 is the last of the
    # list: last offset = first uncleanable - 1 = 2^31 + 9 -> 2^31 + 9 > INT32_MAX: new group
    assert bases(group_segments(fits, 1 << 30, 1 << 20, 2**31 + 10)) == [[0, 100], [2**31]]
    overflow = [seg(0), seg(100), seg(2**31 + 1)]
    # seg 100's last offset = 2^31 -> 2^31 - 0 = INT32_MAX + 1: does not fit -> split at 100
    assert bases(group_segments(overflow, 1 << 30, 1 << 20, 2**31 + 10)) == [[0], [100, 2**31 + 1]]
    # the bound is relative to the group's FIRST base, not the previous segment's
    chain = [seg(0), seg(2**30), seg(2**31 - 5)]
    # seg 2^30: last = 2^31 - 6 <= INT32_MAX -> merged; seg 2^31 - 5 (last in list): last = 2^31 + 99
    # - 0 > INT32_MAX -> new group, although 2^31 + 99 - 2^30 would fit
    assert bases(group_segments(chain, 1 << 30, 1 << 20, 2**31 + 100)) == [[0, 2**30], [2**31 - 5]]
    assert INT32_MAX == 2**31 - 1


def test_group_last_segment_bounded_by_first_uncleanable():
    segs = [seg(0), seg(10)]
    # seg 10 is the last of the list: its last offset is first uncleanable - 1
    assert bases(group_segments(segs, 1000, 1000, 2**31)) == [[0, 10]]  # 2^31 - 1 - 0 = INT32_MAX
    assert bases(group_segments(segs, 1000, 1000, 2**31 + 1)) == [[0], [10]]  # 2^31 > INT32_MAX


def test_group_empty_segment_skips_offset_check():
    # an empty segment (size 0) joins whatever its offsets ("avoid empty logs left every 2^31 messages")
    segs = [seg(0), seg(100, 0), seg(2**32, 10)]
    # seg 100: empty -> joins; seg 2^32 (last in list): last = 2^32 + 9 - 0 > INT32_MAX -> new group
    assert bases(group_segments(segs, 1000, 1000, 2**32 + 10)) == [[0, 100], [2**32]]


def test_group_single_segment_larger_than_the_bound_stands_alone():
    segs = [seg(0, 500), seg(10, 10), seg(20, 10)]
    assert bases(group_segments(segs, 100, 1000, 30)) == [[0], [10, 20]]
    assert group_segments([], 100, 100, 0) == []


# -- collect_aborted (UnifiedLog.collectAbortedTransactions + TransactionIndex.collectAbortedTxns) ----
def test_collect_aborted_from_the_segment_holding_start_and_complete_stop():
    t1 = AbortedTxn(1, 2, 4, 2)  # in segment 0: before the start segment, never looked at
    t2 = AbortedTxn(2, 11, 14, 11)
    t3 = AbortedTxn(3, 15, 18, 15)
    t4 = AbortedTxn(4, 22, 25, 30)  # lso 30 >= upper bound 30: search complete after it
    t5 = AbortedTxn(5, 26, 27, 26)  # after the complete entry, same segment: not collected
    t6 = AbortedTxn(6, 31, 33, 31)  # in a later segment: not collected
    segs = [seg(0, aborted=(t1,)), seg(10, aborted=(t2, t3)), seg(20, aborted=(t4, t5)), seg(30, aborted=(t6,))]
    # start 12 is held by segment 10; every entry has last >= log start 0 and first < 30
    assert collect_aborted(segs, 12, 0, 30) == [t2, t3, t4]


def test_collect_aborted_filters_by_log_start_and_upper_bound():
    t1 = AbortedTxn(1, 1, 4, 1)  # last 4 < log start 5: dropped (but the search goes on)
    t2 = AbortedTxn(2, 5, 8, 5)  # last 8 >= 5 and first 5 < 20: kept
    t3 = AbortedTxn(3, 20, 22, 19)  # first 20 >= upper 20: dropped; lso 19 < 20: search goes on
    t4 = AbortedTxn(4, 23, 24, 20)  # first 23 >= 20: dropped; lso 20 >= 20: complete
    t5 = AbortedTxn(5, 9, 12, 9)  # never reached
    segs = [seg(0, aborted=(t1, t2)), seg(10), seg(20, aborted=(t3, t4)), seg(30, aborted=(t5,))]
    assert collect_aborted(segs, 0, 5, 20) == [t2]


def test_collect_aborted_incomplete_runs_to_the_last_segment():
    t1, t2 = AbortedTxn(1, 0, 3, 0), AbortedTxn(2, 10, 13, 10)
    segs = [seg(0, aborted=(t1,)), seg(10, aborted=(t2,))]
    # no entry has lso >= 100: every segment from the start one is read
    assert collect_aborted(segs, 0, 0, 100) == [t1, t2]
    assert collect_aborted(segs, 10, 0, 100) == [t2]


# -- TransactionSweep (Kafka's CleanedTransactionMetadata) -------------------------------------------
def test_sweep_aborted_data_batches_and_abort_marker_kept_while_traversed():
    txn = AbortedTxn(7, 10, 15, 10)
    sweep = TransactionSweep()
    sweep.add([txn])
    # pid 7's batch at 5..6 ends before the aborted txn starts (first 10 > 6): a committed txn
    assert sweep.on_data(batch(0, 0, 5, 6, pid=7, txn=True)) is False
    assert sweep.on_control(batch(0, 1, 7, control=COMMIT, pid=7)) is False  # its batches were traversed: kept
    assert sweep.on_data(batch(0, 2, 8, 9)) is False  # not transactional
    assert sweep.on_data(batch(0, 3, 10, 12, pid=7, txn=True)) is True  # 10 <= 12: the aborted txn began
    assert sweep.on_data(batch(0, 4, 13, 13, pid=8, txn=True)) is False  # another producer: committed
    assert sweep.on_data(batch(0, 5, 14, 14, pid=7, txn=True)) is True
    assert sweep.index == []
    # ABORT marker: batches of the txn were traversed -> kept, and listed for the new .txnindex
    assert sweep.on_control(batch(0, 6, 15, control=ABORT, pid=7)) is False
    assert sweep.index == [txn]
    # pid 8's COMMIT: a batch of its txn was traversed -> kept; a second COMMIT with nothing -> may go
    assert sweep.on_control(batch(0, 7, 16, control=COMMIT, pid=8)) is False
    assert sweep.on_control(batch(0, 8, 17, control=COMMIT, pid=8)) is True
    # after its marker, pid 7's transactional data is a new (committed) transaction
    assert sweep.on_data(batch(0, 9, 18, 18, pid=7, txn=True)) is False


def test_sweep_abort_marker_removable_when_no_batch_traversed():
    txn = AbortedTxn(7, 10, 15, 10)
    sweep = TransactionSweep()
    sweep.add([txn])
    sweep.on_data(batch(0, 0, 11, 11))  # non-transactional filler: the txn's own batches are gone
    assert sweep.on_control(batch(0, 1, 15, control=ABORT, pid=7)) is True
    assert sweep.index == []
    # an ABORT for a producer with no known aborted txn may go too
    assert sweep.on_control(batch(0, 2, 16, control=ABORT, pid=9)) is True


def test_sweep_commit_marker_removable_when_no_batch_traversed():
    sweep = TransactionSweep()
    assert sweep.on_control(batch(0, 0, 3, control=COMMIT, pid=4)) is True


def test_sweep_empty_control_batch_and_unknown_type():
    sweep = TransactionSweep()
    assert sweep.on_control(batch(0, 0, 3, control=EMPTY_MARKER, pid=4)) is True  # already cleaned
    assert sweep.on_control(batch(0, 1, 4, control=5, pid=4)) is False  # unknown control type: kept


def test_sweep_aborted_txn_starts_at_first_offset_within_a_batch():
    # a batch whose LAST offset reaches the txn's first offset starts it (consumeAbortedTxnsUpTo(lastOffset))
    sweep = TransactionSweep()
    sweep.add([AbortedTxn(7, 12, 20, 12)])
    assert sweep.on_data(batch(0, 0, 10, 12, pid=7, txn=True)) is True


def test_sweep_txn_index_collects_each_abort_once():
    a, b = AbortedTxn(1, 0, 2, 0), AbortedTxn(2, 1, 3, 0)
    sweep = TransactionSweep()
    sweep.add([b, a])  # any order in: ordered by first offset
    sweep.on_data(batch(0, 0, 0, 0, pid=1, txn=True))
    sweep.on_data(batch(0, 1, 1, 1, pid=2, txn=True))
    assert sweep.on_control(batch(0, 2, 2, control=ABORT, pid=1)) is False
    assert sweep.on_control(batch(0, 3, 3, control=ABORT, pid=2)) is False
    assert sweep.index == [a, b]


# -- last_of_active_producers (ProducerStateManager: expiration, open transactions, epochs) --------------
def last_of_active(batches: list[BatchInfo], exp: int = DAY) -> list[bool]:
    return last_of_active_producers(table_of(batches), NOW, exp).tolist()


def test_active_producers_expiration_boundary():
    exp = 1000
    batches = [
        batch(0, 0, 0, 1, pid=1, epoch=0, max_ts=NOW - exp),  # now - ts = 1000 = expiration: expired
        batch(0, 1, 2, 3, pid=2, epoch=3, max_ts=NOW - exp + 1),  # 999 < 1000, but not pid 2's last batch
        batch(0, 2, 4, 4, pid=3, epoch=0, txn=True, max_ts=NOW - 10 * exp),  # old, but its txn is open: kept
        batch(0, 3, 5, 5, pid=4, epoch=0, txn=True, max_ts=NOW - 10 * exp),
        batch(0, 4, 6, control=COMMIT, pid=4, epoch=0, max_ts=NOW - 10 * exp),  # closed and old: expired
        batch(0, 5, 7, 8, max_ts=NOW),  # no producer id: never a producer
        batch(0, 6, 9, 9, pid=2, epoch=3, max_ts=NOW - 5 * exp),  # pid 2's LAST batch is old: expired
        batch(0, 7, 10, 10, pid=5, epoch=1, max_ts=NOW - 2 * exp),  # pid 5's last data offset: kept
        batch(0, 8, 11, control=COMMIT, pid=5, epoch=1, max_ts=NOW),  # last batch a recent marker: pid 5 active
    ]
    assert last_of_active(batches, exp) == [False, False, True, False, False, False, False, True, False]


def test_non_transactional_data_leaves_a_transaction_open():
    # pid 7's transaction opened at 0 is never ended: a plain batch after it does not close it
    batches = [batch(0, 0, 0, 0, pid=7, epoch=0, txn=True, max_ts=NOW - 10 * DAY),
               batch(0, 1, 1, 1, pid=7, epoch=0, max_ts=NOW - 10 * DAY)]
    assert last_of_active(batches) == [False, True]


def test_active_producer_with_only_markers_keeps_its_marker():
    marker = batch(0, 0, 5, control=ABORT, pid=6, epoch=2, max_ts=NOW)
    assert last_of_active([marker]) == [True]
    # a marker of an earlier epoch is not its last state
    older = batch(0, 0, 4, control=ABORT, pid=6, epoch=1, max_ts=NOW)
    assert last_of_active([older, marker]) == [False, True]


def test_active_producer_marker_with_bumped_epoch_forgets_last_data():
    """The coordinator aborts a timed-out transaction with the producer epoch bumped (epoch 0 -> 1).
    ProducerStateEntry.maybeUpdateProducerEpoch clears the batch metadata on an epoch change, so the
    producer's lastDataOffset is gone (-1): Kafka keeps the marker, not the data batch, as its last."""
    data = batch(0, 0, 10, 12, pid=5, epoch=0, txn=True, max_ts=NOW - 10)
    abort = batch(0, 1, 13, control=ABORT, pid=5, epoch=1, max_ts=NOW - 5)
    assert last_of_active([data, abort]) == [False, True]
    # back to epoch 0 after it: a change again, so only data written since counts
    again = batch(0, 2, 14, 15, pid=5, epoch=0, max_ts=NOW - 1)
    assert last_of_active([data, abort, again]) == [False, False, True]


def test_is_last_of_active_producer_by_last_data_offset():
    b1 = batch(0, 0, 0, 2, pid=1, epoch=0, max_ts=NOW)
    b2 = batch(0, 1, 3, 5, pid=1, epoch=0, max_ts=NOW)
    marker = batch(0, 2, 6, control=COMMIT, pid=1, epoch=0, max_ts=NOW)
    other = batch(0, 3, 7, 8, pid=2, epoch=0, max_ts=NOW - 2 * DAY)  # expired
    assert last_of_active([b1, b2, marker, other]) == [False, True, False, False]


class _Appended:
    """A batch as ``tests.reference.producers.ProducerState.append`` reads one: a marker's
    record timestamp is its batch's max timestamp (one record, as Kafka writes markers)."""

    def __init__(self, b: BatchInfo):
        self.b, self.magic, self.producer_id, self.producer_epoch = b, b.magic, b.producer_id, b.producer_epoch
        self.is_control, self.is_transactional = b.is_control, b.is_transactional
        self.last_offset, self.max_timestamp, self.base_offset_field = b.last_offset, b.max_timestamp, b.base_offset

    def records(self):
        return [SimpleNamespace(timestamp=self.b.max_timestamp)]


@st.composite
def producer_logs(draw) -> tuple[list[BatchInfo], int]:
    """Batches of a few producers in log order: plain, transactional and marker batches, epochs
    that change back and forth, timestamps on both sides of the expiration."""
    exp = draw(st.sampled_from([1, 1000, DAY]))
    out, offset = [], 0
    for i in range(draw(st.integers(0, 30))):
        pid = draw(st.sampled_from([-1, 0, 1, 2, 3]))
        kind = draw(st.sampled_from(["plain", "txn", "commit", "abort"])) if pid >= 0 else "plain"
        count = 1 if kind in ("commit", "abort") else draw(st.integers(1, 3))
        out.append(batch(0, i, offset, offset + count - 1, pid=pid, epoch=draw(st.integers(0, 2)) if pid >= 0 else -1,
                         txn=kind == "txn", control={"commit": COMMIT, "abort": ABORT}.get(kind),
                         max_ts=NOW - draw(st.integers(-2, 2)) * exp + draw(st.sampled_from([-1, 0, 1]))))
        offset += count + draw(st.integers(0, 1))
    return out, exp


@settings(max_examples=400, deadline=None)
@given(producer_logs())
def test_last_of_active_producers_agrees_with_the_reference_model(log):
    """Every batch's answer against the reference model: ProducerState fed the batches as appended,
    and its cleaner's isBatchLastRecordOfProducer."""
    batches, exp = log
    state = ProducerState()
    for b in batches:
        state.append(_Appended(b))
    active = state.last_records_of_active_producers(NOW, exp)
    model = SimpleNamespace(last_records_of_active_producers=active)
    expected = [b.producer_id >= 0 and LogFilter._is_batch_last_record_of_producer(model, _Appended(b))
                for b in batches]
    assert last_of_active(batches, exp) == expected


# -- keep_record (Cleaner.shouldRetainRecord with the batch's discard decision) -----------------------
def plan_of(b: BatchInfo, *, delete=False, discard=False, retain_empty=False, retain_deletes=True,
            marker_empty_txn=False) -> BatchPlan:
    return BatchPlan(b, 0, delete, discard, retain_empty, retain_deletes, marker_empty_txn)


DATA = batch(0, 0, 10, 19)


@pytest.mark.parametrize("args, expected", [
    # (plan flags, offset, has_key, tombstone, mapped) -> kept?
    (({"discard": True}, 25, True, False, None), False),  # aborted data: gone even past the map
    (({}, 21, False, True, None), True),  # past latest offset 20: kept even keyless or a tombstone
    (({}, 20, False, False, None), False),  # keyless within the mapped range: dropped
    (({}, 15, True, False, 16), False),  # superseded: 15 < 16
    (({}, 16, True, False, 16), True),  # the mapped offset itself
    (({}, 17, True, False, 16), True),  # above the map's offset (duplicates below first dirty)
    (({}, 12, True, False, None), True),  # key not in the map (e.g. only below first dirty)
    (({"retain_deletes": True}, 16, True, True, 16), True),  # tombstone that may not go yet
    (({"retain_deletes": False}, 16, True, True, 16), False),  # tombstone past its horizon
    (({"retain_deletes": False}, 16, True, False, 16), True),  # a value is kept whatever the horizon
    (({"retain_deletes": False}, 12, True, True, None), False),  # unmapped tombstone past its horizon
])
def test_keep_record(args, expected):
    flags, offset, has_key, tombstone, mapped = args
    assert keep_record(plan_of(DATA, **flags), 20, offset, has_key, tombstone, mapped) is expected


def test_keep_record_control_batch():
    marker = batch(0, 0, 15, control=COMMIT, pid=1, epoch=0)
    assert keep_record(plan_of(marker), 20, 15, True, False, None) is True  # kept unless discarded
    assert keep_record(plan_of(marker, discard=True), 20, 15, True, False, None) is False


# -- batch_outcome (MemoryRecords.filterTo for one batch) ----------------------------------------------
RET = 600_000


def test_outcome_deleted_batch_is_dropped():
    assert batch_outcome(plan_of(DATA, delete=True, retain_empty=False), 0, False, NOW, RET) == Outcome(DROP)


def test_outcome_unchanged_batch_copied():
    assert batch_outcome(plan_of(DATA), 10, False, NOW, RET) == Outcome(COPY)


def test_outcome_records_removed_rewritten_without_horizon():
    assert batch_outcome(plan_of(DATA), 4, False, NOW, RET) == Outcome(REWRITE, None)


def test_outcome_kept_tombstone_stamps_horizon():
    # all 10 records kept, one a tombstone, no horizon yet: rewritten with now + delete.retention.ms
    assert batch_outcome(plan_of(DATA), 10, True, NOW, RET) == Outcome(REWRITE, NOW + RET)
    assert batch_outcome(plan_of(DATA), 3, True, NOW, RET) == Outcome(REWRITE, NOW + RET)


def test_outcome_tombstone_with_horizon_already_set():
    stamped = batch(0, 0, 10, 19, horizon=NOW + 5)
    assert batch_outcome(plan_of(stamped), 10, True, NOW, RET) == Outcome(COPY)
    # records removed: rewritten, the existing horizon stays (no new one)
    assert batch_outcome(plan_of(stamped), 9, True, NOW, RET) == Outcome(REWRITE, None)


def test_outcome_legacy_tombstone_never_stamped():
    legacy = batch(0, 0, 10, 10, magic=1)
    assert batch_outcome(plan_of(legacy), 1, True, NOW, RET) == Outcome(COPY)


def test_outcome_marker_of_empty_txn_stamped():
    marker = batch(0, 0, 15, control=COMMIT, pid=1, epoch=0)
    assert batch_outcome(plan_of(marker, marker_empty_txn=True), 1, False, NOW, RET) == Outcome(REWRITE, NOW + RET)
    assert batch_outcome(plan_of(marker), 1, False, NOW, RET) == Outcome(COPY)
    stamped = batch(0, 0, 15, control=COMMIT, pid=1, epoch=0, horizon=NOW + 1)
    assert batch_outcome(plan_of(stamped, marker_empty_txn=True), 1, False, NOW, RET) == Outcome(COPY)


def test_outcome_emptied_batch():
    assert batch_outcome(plan_of(DATA, retain_empty=True), 0, False, NOW, RET) == Outcome(EMPTY)
    assert batch_outcome(plan_of(DATA, retain_empty=False), 0, False, NOW, RET) == Outcome(DROP)
    # discarded records but kept as a header (last batch of an active producer)
    aborted = batch(0, 0, 10, 12, pid=3, epoch=0, txn=True)
    assert batch_outcome(plan_of(aborted, discard=True, retain_empty=True), 0, False, NOW, RET) == Outcome(EMPTY)


# -- plan_partition ---------------------------------------------------------------------------------
@dataclass
class Planned:
    """A PartitionPlan read batch by batch: the feeding (segment, position)s and a BatchPlan per
    rewritten batch."""

    plan: PartitionPlan
    table: np.ndarray

    def __getattr__(self, name: str):
        return getattr(self.plan, name)

    @property
    def map_batches(self) -> set[tuple[int, int]]:
        return {(int(r["segment"]), int(r["position"])) for r in self.table[self.plan.feeds]}

    @property
    def batches(self) -> list[BatchPlan]:
        rows = np.flatnonzero(self.plan.group >= 0)
        return [BatchPlan(info, int(self.plan.group[i]), *map(bool, self.plan.flags[i]))
                for i, info in zip(rows.tolist(), infos_at(self.table, rows), strict=True)]


def plan(segments, batches, *, first_dirty, first_uncleanable, log_start=0, now=NOW, ret=RET, seg_bytes=1 << 30,
         index_bytes=10 << 20, expiration=DAY, release="4.3", high_watermark=None, log_end=None) -> Planned:
    """``release``: its rule for the round's last emptied batch (high watermark and log end for 4.4)."""
    table = table_of(batches)
    keep_at = retain_last_empty_at(resolve(release), first_uncleanable, high_watermark, log_end)
    return Planned(plan_partition(segments, table, log_start=log_start, first_dirty=first_dirty,
                                  first_uncleanable=first_uncleanable, now=now, delete_retention_ms=ret,
                                  segment_bytes=seg_bytes, segment_index_bytes=index_bytes,
                                  producer_expiration_ms=expiration, retain_last_empty_at=keep_at), table)


def by_base(p) -> dict[int, BatchPlan]:
    return {bp.batch.base_offset: bp for bp in p.batches}


def test_plan_first_dirty_mid_batch():
    # segment 0: batches 0..4 @0, 5..9 @100, 10..14 @200; segment 15: 15..19; active 20: 20..24
    # offset index of segment 0: offset 9 is in a batch at or after position 100
    s0 = seg(0, 300, offset_index=(OffsetEntry(9, 100),))
    segs = [s0, seg(15), seg(20)]
    batches = [batch(0, 0, 0, 4), batch(0, 100, 5, 9), batch(0, 200, 10, 14), batch(15, 0, 15, 19),
               batch(20, 0, 20, 24)]
    p = plan(segs, batches, first_dirty=12, first_uncleanable=20)
    # index lookup(12) -> entry (9, 100): reading starts at position 100, so batch 0..4 is not read;
    # batch 5..9 is read (its records are below 12: the job's offset >= first_dirty keeps them out of
    # the map) but its last offset 9 < 12 does not count for the latest offset
    assert p.map_batches == {(0, 100), (0, 200), (15, 0)}
    # latest = max(14, fast-forward 15 - 1, 19, fast-forward 20 - 1) = 19 -> checkpoint 20
    assert (p.latest_offset, p.end_offset) == (19, 20)
    assert bases(p.groups) == [[0, 15]]
    assert [bp.batch.base_offset for bp in p.batches] == [0, 5, 10, 15]  # the active segment is not rewritten


def test_plan_first_dirty_mid_batch_counts_that_batch_for_latest():
    # a dirty range that ends mid-segment on its batch: segment 0 holds 0..4, 5..9; active 10 (uncleanable 10)
    segs = [seg(0, 200), seg(10)]
    batches = [batch(0, 0, 0, 4), batch(0, 100, 5, 9), batch(10, 0, 10, 12)]
    p = plan(segs, batches, first_dirty=7, first_uncleanable=10)
    # no offset index entries: reading starts at 0; batch 0..4 (last 4 < 7) does not count; batch 5..9
    # straddles 7: its last offset 9 counts; fast-forward to 10 - 1 = 9
    assert p.latest_offset == 9
    assert p.map_batches == {(0, 0), (0, 100)}


def test_plan_fast_forwards_over_offset_gaps():
    # segment 0 holds 0..2 (older cleaning removed 3..9), segment 10 holds 10..12, active 20
    segs = [seg(0), seg(10), seg(20)]
    batches = [batch(0, 0, 0, 2), batch(10, 0, 10, 12), batch(20, 0, 20, 21)]
    p = plan(segs, batches, first_dirty=0, first_uncleanable=20)
    # latest = max(2, 10 - 1, 12, 20 - 1) = 19: the checkpoint is the uncleanable offset 20
    assert (p.latest_offset, p.end_offset) == (19, 20)
    # the last batch 10..12 ends at 13 != 20: no batch is the round's last (nextOffset == 20)
    assert not any(bp.retain_empty for bp in p.batches)


@pytest.mark.parametrize("release", ["3.9.2", "4.0.0", "4.0.1", "4.1", "4.2", "4.3"])
def test_plan_round_end_batch_kept_empty(release):
    """LogCleanerTest.testCleanSegmentsRetainingLastEmptyBatch (3.9.2, 4.0-4.3; KAFKA-17076)."""
    segs = [seg(0), seg(10), seg(20)]
    batches = [batch(0, 0, 0, 4), batch(0, 100, 5, 9), batch(10, 0, 10, 14), batch(10, 100, 15, 19),
               batch(20, 0, 20, 21)]
    p = plan(segs, batches, first_dirty=0, first_uncleanable=20, release=release)
    # 15..19: next offset 20 == first uncleanable -> retained even if emptied
    assert {b: bp.retain_empty for b, bp in by_base(p).items()} == {0: False, 5: False, 10: False, 15: True}
    assert batch_outcome(by_base(p)[15], 0, False, NOW, RET) == Outcome(EMPTY)
    assert batch_outcome(by_base(p)[10], 0, False, NOW, RET) == Outcome(DROP)


ROUND = ([seg(0), seg(10), seg(20)], [batch(0, 0, 0, 4), batch(0, 100, 5, 9), batch(10, 0, 10, 14),
                                      batch(10, 100, 15, 19), batch(20, 0, 20, 21)])


@pytest.mark.parametrize("release", ["3.9.0", "3.9.1"])
def test_plan_round_end_batch_not_kept_before_kafka_17076(release):
    """3.9.0 and 3.9.1's checkBatchRetention: only the producer-state rule keeps an emptied batch."""
    p = plan(*ROUND, first_dirty=0, first_uncleanable=20, release=release)
    assert not any(bp.retain_empty for bp in p.batches)
    assert batch_outcome(by_base(p)[15], 0, False, NOW, RET) == Outcome(DROP)


@pytest.mark.parametrize(("high_watermark", "log_end", "kept"), [
    (22, 22, set()),  # testCleanSegmentsNotRetainingLastEmptyBatch: the HW beyond the cleaned range
    (20, 22, {15}),  # the cleaned range ends at the HW
    (None, 20, {15}), (None, 22, set()),  # no HW read: the log end offset stands in
])
def test_plan_round_end_batch_kept_at_the_high_watermark_in_4_4(high_watermark, log_end, kept):
    """KAFKA-20452 (4.4): an emptied batch stays when its next offset is the high watermark."""
    p = plan(*ROUND, first_dirty=0, first_uncleanable=20, release="4.4", high_watermark=high_watermark,
             log_end=log_end)
    assert {b for b, bp in by_base(p).items() if bp.retain_empty} == kept


def test_plan_legacy_horizon_from_last_clean_segment_mtime():
    # mtimes: seg 0 = 1000, seg 10 = 5000, seg 20 = 9000; delete.retention.ms = 1000
    segs = [seg(0, mtime=1000), seg(10, mtime=5000), seg(20, mtime=9000), seg(30, mtime=9500)]
    batches = [batch(0, 0, 0, magic=1), batch(0, 50, 1, 9, magic=2), batch(10, 0, 10, magic=1),
               batch(20, 0, 20, magic=1), batch(30, 0, 30, magic=1)]
    # first dirty 20: clean segments = those with base < 20 = [0, 10]; the last is 10 (mtime 5000):
    # legacy horizon = 5000 - 1000 = 4000. seg 0: 1000 <= 4000 -> legacy tombstones may go;
    # seg 10: 5000 > 4000 -> kept; seg 20: 9000 > 4000 -> kept
    p = plan(segs, batches, first_dirty=20, first_uncleanable=30, ret=1000)
    got = by_base(p)
    assert (got[0].retain_deletes, got[10].retain_deletes, got[20].retain_deletes) == (False, True, True)
    assert got[1].retain_deletes is True  # v2: no delete horizon yet -> retained
    # first dirty 15, mid segment 10: segment 10 still counts as clean (base 10 < 15): same horizon
    p = plan(segs, batches, first_dirty=15, first_uncleanable=30, ret=1000)
    assert (by_base(p)[0].retain_deletes, by_base(p)[10].retain_deletes) == (False, True)
    # with retention 4000: horizon = 5000 - 4000 = 1000; seg 0's mtime 1000 <= 1000 -> may go
    p = plan(segs, batches, first_dirty=20, first_uncleanable=30, ret=4000)
    assert by_base(p)[0].retain_deletes is False
    p = plan(segs, batches, first_dirty=20, first_uncleanable=30, ret=4001)  # horizon 999 < 1000: kept
    assert by_base(p)[0].retain_deletes is True
    # no clean segment (first dirty 0): horizon 0, every positive mtime keeps legacy tombstones
    p = plan(segs, batches, first_dirty=0, first_uncleanable=30, ret=1000)
    assert all(bp.retain_deletes for bp in p.batches)


def test_plan_v2_delete_horizon():
    segs = [seg(0), seg(10)]
    batches = [batch(0, 0, 0, 1, horizon=NOW), batch(0, 50, 2, 3, horizon=NOW + 1), batch(0, 100, 4, 9)]
    p = plan(segs, batches, first_dirty=0, first_uncleanable=10)
    # horizon <= now: tombstones may go; horizon in the future or unset: kept
    assert [bp.retain_deletes for bp in p.batches] == [False, True, True]


def test_plan_transactions():
    # pid 7 aborts 2..3 (ABORT at 4); pid 8 commits 5..6 (COMMIT at 7); a COMMIT at 8 for pid 9 whose
    # data is gone (emptied earlier), its horizon passed; a COMMIT at 9 for pid 10 with no horizon yet
    aborted = AbortedTxn(7, 2, 4, 2)
    segs = [seg(0, aborted=(aborted,)), seg(10)]
    batches = [
        batch(0, 0, 0, 1),
        batch(0, 10, 2, 3, pid=7, epoch=0, txn=True, max_ts=NOW - 2 * DAY),
        batch(0, 20, 4, control=ABORT, pid=7, epoch=0, max_ts=NOW - 2 * DAY),
        batch(0, 30, 5, 6, pid=8, epoch=0, txn=True, max_ts=NOW - 2 * DAY),
        batch(0, 40, 7, control=COMMIT, pid=8, epoch=0, max_ts=NOW - 2 * DAY),
        batch(0, 50, 8, control=COMMIT, pid=9, epoch=0, horizon=NOW - 1, max_ts=NOW - 2 * DAY),
        batch(0, 60, 9, control=COMMIT, pid=10, epoch=0, max_ts=NOW - 2 * DAY),
        batch(10, 0, 10, 11),
    ]
    p = plan(segs, batches, first_dirty=0, first_uncleanable=10)
    got = by_base(p)
    # the map reads the aborted batch but it does not feed it, nor do markers
    assert p.map_batches == {(0, 0), (0, 30)}
    assert (got[2].discard_records, got[2].delete) == (True, True)  # aborted data, producer expired
    assert (got[4].discard_records, got[4].marker_for_empty_txn) == (False, False)  # ABORT kept
    assert p.txn_index == {0: [aborted]}
    assert (got[5].discard_records, got[7].discard_records, got[7].marker_for_empty_txn) == (False, False, False)
    # pid 9: marker may go and its horizon passed (NOW - 1 <= NOW): deleted
    assert (got[8].discard_records, got[8].delete) == (True, True)
    # pid 10: marker may go but has no horizon: kept, to be stamped
    assert (got[9].discard_records, got[9].delete, got[9].marker_for_empty_txn) == (False, False, True)
    assert batch_outcome(got[9], 1, False, NOW, RET) == Outcome(REWRITE, NOW + RET)
    # last batch of the round: 9 + 1 = 10 = first uncleanable
    assert got[9].retain_empty is True


def test_plan_abort_marker_removable_once_its_batches_are_gone():
    # second round over the result: the aborted batch is gone, only the ABORT marker (stamped earlier)
    aborted = AbortedTxn(7, 2, 4, 2)
    segs = [seg(0, aborted=(aborted,)), seg(10)]
    marker = batch(0, 10, 4, control=ABORT, pid=7, epoch=0, horizon=NOW + 5, max_ts=NOW - 2 * DAY)
    batches = [batch(0, 0, 0, 1), marker, batch(0, 20, 5, 9), batch(10, 0, 10)]
    got = by_base(plan(segs, batches, first_dirty=0, first_uncleanable=10))
    assert (got[4].discard_records, got[4].marker_for_empty_txn) == (False, True)  # horizon not yet passed
    got = by_base(plan(segs, batches, first_dirty=0, first_uncleanable=10, now=NOW + 5))
    assert (got[4].discard_records, got[4].delete) == (True, True)  # horizon NOW + 5 <= now


def test_plan_active_producer_batch_kept_empty():
    # pid 3's last batch is recent (active); pid 4's is older than producer.id.expiration.ms
    segs = [seg(0), seg(10)]
    batches = [batch(0, 0, 0, 1, pid=3, epoch=0, max_ts=NOW - 10),
               batch(0, 10, 2, 3, pid=3, epoch=0, max_ts=NOW - 5),
               batch(0, 20, 4, 5, pid=4, epoch=0, max_ts=NOW - DAY),
               batch(0, 30, 6, 8), batch(10, 0, 10)]
    got = by_base(plan(segs, batches, first_dirty=0, first_uncleanable=10))
    # 2..3 is pid 3's last (data offset 3); 0..1 is not; pid 4: now - ts = DAY, not < DAY: expired
    assert [got[b].retain_empty for b in (0, 2, 4, 6)] == [False, True, False, False]  # 6..8 ends at 9 != 10


def test_plan_groups_only_segments_below_the_map_end():
    segs = [seg(0, 60), seg(10, 60), seg(20, 30), seg(30, 10), seg(40)]
    batches = [batch(0, 0, 0, 9), batch(10, 0, 10, 19), batch(20, 0, 20, 29), batch(30, 0, 30, 39),
               batch(40, 0, 40)]
    p = plan(segs, batches, first_dirty=10, first_uncleanable=30, seg_bytes=100)
    # map over [10, 30): latest 29 -> rewrite segments with base < 30 = 0, 10, 20;
    # 60 + 60 = 120 > 100 -> [0]; 60 + 30 = 90 -> [10, 20]
    assert p.end_offset == 30
    assert bases(p.groups) == [[0], [10, 20]]
    assert {bp.batch.base_offset: bp.group for bp in p.batches} == {0: 0, 10: 1, 20: 1}


def test_plan_aborted_txn_spanning_segment_groups():
    # pid 7's aborted txn starts in segment 0 (0..1) and ends in segment 2 (2, ABORT at 3), whose
    # .txnindex holds (7, first 0, last 3, lso 0); then pid 7 commits 4..5 (COMMIT at 6). segment.bytes
    # 150 keeps segments 0 and 2 (100 bytes each) in separate groups.
    txn = AbortedTxn(7, 0, 3, 0)
    segs = [seg(0), seg(2, aborted=(txn,)), seg(7)]
    old = NOW - 2 * DAY
    batches = [batch(0, 0, 0, 1, pid=7, epoch=0, txn=True, max_ts=old),
               batch(2, 0, 2, 2, pid=7, epoch=0, txn=True, max_ts=old),
               batch(2, 10, 3, control=ABORT, pid=7, epoch=0, max_ts=old),
               batch(2, 20, 4, 5, pid=7, epoch=0, txn=True, max_ts=old),
               batch(2, 30, 6, control=COMMIT, pid=7, epoch=0, max_ts=old),
               batch(7, 0, 7)]
    p = plan(segs, batches, first_dirty=0, first_uncleanable=7, seg_bytes=150)
    assert bases(p.groups) == [[0], [2]]
    # only the committed 4..5 feeds the map; latest = max(1, 2 - 1, 6, 7 - 1) = 6
    assert (p.map_batches, p.latest_offset) == ({(2, 20)}, 6)
    got = by_base(p)
    # group 0 collects the entry from segment 2's index (first 0 < upper bound 2); group 1 collects it
    # again: the repeat must not forget that batch 0..1 was seen, so the ABORT marker stays and the
    # aborted txn is listed in group 1's new .txnindex (the group holding the marker)
    assert (got[0].delete, got[2].delete) == (True, True)
    assert (got[3].discard_records, got[3].marker_for_empty_txn) == (False, False)
    assert p.txn_index == {1: [txn]}
    # 4..5 is a new, committed transaction of pid 7: kept, and its COMMIT (the round's last batch) too
    assert (got[4].discard_records, got[6].discard_records, got[6].retain_empty) == (False, False, True)
