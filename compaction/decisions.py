"""Kafka's cleaning of one partition (Cleaner.doClean), reduced to batch-level decisions.

``plan_partition`` walks the batch headers twice, as Kafka's cleaner does: once over
the dirty range to learn which batches feed the offset map (not aborted, not control)
and where the map ends, once over every segment to be rewritten to decide, batch by
batch, what may be dropped, what must stay even if emptied, and whether tombstones
may still go. What is left per record (``keep_record``) needs only the offset map,
which the Spark pipeline builds with a shuffle; ``batch_outcome`` turns a batch's
kept records into copy / rewrite / empty header / drop.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from compaction.model import BatchInfo, SegmentInfo
from compaction.transactions import (
    TransactionSweep,
    active_producers,
    collect_aborted,
    is_last_of_active_producer,
)
from readers.indexes import AbortedTxn
from writers.cleaned import COPY, DROP, EMPTY, REWRITE, Outcome

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What the cleaner decided for one batch before looking at its records."""

    batch: BatchInfo
    group: int  # index of the output segment group
    delete: bool  # dropped whole, records unread (Kafka's BatchRetention.DELETE)
    discard_records: bool  # every record goes (aborted data, or a marker past its horizon)
    retain_empty: bool  # kept as an empty header if nothing else stays
    retain_deletes: bool  # tombstones in it may not be removed yet
    marker_for_empty_txn: bool  # a kept marker whose transaction left nothing: stamp a horizon


@dataclass(slots=True)
class PartitionPlan:
    """Everything decided at batch level for one partition's cleaning round."""

    first_dirty: int
    first_uncleanable: int
    latest_offset: int  # the offset map's latest offset; records past it are kept
    map_batches: set[tuple[int, int]]  # (segment, position) of batches whose keys feed the map
    groups: list[list[SegmentInfo]]
    batches: list[BatchPlan] = field(default_factory=list)
    txn_index: dict[int, list[AbortedTxn]] = field(default_factory=dict)  # group -> entries

    @property
    def end_offset(self) -> int:
        """The new cleaner checkpoint: one past the mapped range."""
        return self.latest_offset + 1


def group_segments(segments: Sequence[SegmentInfo], max_size: int, max_index_size: int,
                   first_uncleanable: int) -> list[list[SegmentInfo]]:
    """Kafka's groupSegmentsBySize: consecutive segments merge while the .log sizes fit
    segment.bytes, each index kind fits segment.index.bytes, and offsets stay within an
    int32 of the group's first base offset (an empty segment skips that check)."""
    groups: list[list[SegmentInfo]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size, index_size, time_size = segments[i].size, segments[i].index_size, segments[i].timeindex_size
        i += 1
        while i < len(segments):
            seg = segments[i]
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            if not (log_size + seg.size <= max_size and index_size + seg.index_size <= max_index_size
                    and time_size + seg.timeindex_size <= max_index_size
                    and (seg.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.index_size
            time_size += seg.timeindex_size
            i += 1
        groups.append(group)
    return groups


def _lookup_position(seg: SegmentInfo, offset: int) -> int:
    """OffsetIndex.lookup: position of the last entry at or below ``offset`` (0 if none)."""
    rel = [seg.base_offset + e.relative_offset for e in seg.offset_index]
    i = bisect.bisect_right(rel, offset) - 1
    return seg.offset_index[i].position if i >= 0 else 0


def _map_pass(segments: Sequence[SegmentInfo], by_segment: dict[int, list[BatchInfo]], log_start: int,
              first_dirty: int, first_uncleanable: int) -> tuple[set[tuple[int, int]], int]:
    """Kafka's buildOffsetMap over [first_dirty, first_uncleanable), batch level: which
    batches feed the map, and the map's latest offset."""
    dirty = [s for i, s in enumerate(segments)
             if s.base_offset < first_uncleanable
             and (i + 1 == len(segments) or segments[i + 1].base_offset > first_dirty)]
    sweep = TransactionSweep()
    sweep.add(collect_aborted(segments, first_dirty, log_start, first_uncleanable))
    feeding: set[tuple[int, int]] = set()
    latest = -1
    for n, seg in enumerate(dirty):
        start = _lookup_position(seg, first_dirty)
        for b in by_segment.get(seg.base_offset, ()):
            if b.position < start:
                continue
            if b.is_control:
                sweep.on_control(b)
            elif not sweep.on_data(b):
                feeding.add((b.segment, b.position))
            if b.last_offset >= first_dirty:
                latest = max(latest, b.last_offset)
        next_start = dirty[n + 1].base_offset if n + 1 < len(dirty) else first_uncleanable
        latest = max(latest, next_start - 1)  # fast-forward over offset gaps
    return feeding, latest


def plan_partition(
    segments: Sequence[SegmentInfo],
    batches: Sequence[BatchInfo],
    *,
    log_start: int,
    first_dirty: int,
    first_uncleanable: int,
    now: int,
    delete_retention_ms: int,
    segment_bytes: int,
    segment_index_bytes: int,
    producer_expiration_ms: int,
) -> PartitionPlan:
    """All batch-level decisions of one cleaning round. ``segments`` and ``batches`` cover
    the whole log (the active segment too: producer state is taken at the log end)."""
    by_segment: dict[int, list[BatchInfo]] = {}
    for b in batches:
        by_segment.setdefault(b.segment, []).append(b)
    feeding, latest = _map_pass(segments, by_segment, log_start, first_dirty, first_uncleanable)
    end_offset = latest + 1
    to_clean = [s for s in segments if s.base_offset < end_offset]
    groups = group_segments(to_clean, segment_bytes, segment_index_bytes, first_uncleanable)
    plan = PartitionPlan(first_dirty, first_uncleanable, latest, feeding, groups)
    active = active_producers(batches, now, producer_expiration_ms)
    clean = [s for s in segments if s.base_offset < first_dirty]
    legacy_horizon = clean[-1].mtime_ms - delete_retention_ms if clean else 0
    sweep = TransactionSweep()
    for g, group in enumerate(groups):
        for k, seg in enumerate(group):
            seg_batches = by_segment.get(seg.base_offset, [])
            upper = group[k + 1].base_offset if k + 1 < len(group) else (
                seg_batches[-1].next_offset if seg_batches else seg.base_offset)
            sweep.add(collect_aborted(segments, seg.base_offset, log_start, upper))
            retain_legacy = seg.mtime_ms > legacy_horizon
            for b in seg_batches:
                plan.batches.append(_batch_plan(b, g, sweep, active, first_uncleanable, now, retain_legacy))
            if sweep.index:
                plan.txn_index.setdefault(g, []).extend(sweep.index)
                sweep.index.clear()
    return plan


def _batch_plan(b: BatchInfo, group: int, sweep: TransactionSweep, active, round_end: int, now: int,
                retain_legacy: bool) -> BatchPlan:
    """Kafka's checkBatchRetention for one batch."""
    can_discard = sweep.on_control(b) if b.is_control else sweep.on_data(b)
    if b.is_control:
        discard = can_discard and b.delete_horizon_ms is not None and b.delete_horizon_ms <= now
    else:
        discard = can_discard
    keep_empty = (b.producer_id >= 0 and is_last_of_active_producer(b, active)) or b.next_offset == round_end
    if b.magic >= 2:
        retain_deletes = b.delete_horizon_ms is None or now < b.delete_horizon_ms
    else:
        retain_deletes = retain_legacy
    return BatchPlan(
        batch=b, group=group, delete=discard and not keep_empty, discard_records=discard,
        retain_empty=keep_empty, retain_deletes=retain_deletes, marker_for_empty_txn=can_discard and b.is_control,
    )


def keep_record(plan: BatchPlan, latest_offset: int, offset: int, has_key: bool, tombstone: bool,
                mapped_offset: int | None) -> bool:
    """Kafka's shouldRetainRecord (with the batch's discard decision first)."""
    if plan.discard_records:
        return False
    if plan.batch.is_control or offset > latest_offset:
        return True
    if not has_key:
        return False
    latest_for_key = offset >= (mapped_offset if mapped_offset is not None else -1)
    return latest_for_key and (not tombstone or plan.retain_deletes)


def batch_outcome(plan: BatchPlan, kept: int, kept_tombstone: bool, now: int, delete_retention_ms: int,
                  inner_magic_differs: bool = False) -> Outcome:
    """MemoryRecords.filterTo for one batch, given how many records stay. A legacy wrapper
    holding an inner message of another magic (``inner_magic_differs``, KAFKA-4298) is never
    written back as stored (filterBatch's writeOriginalBatch is false): it is rebuilt."""
    b = plan.batch
    if plan.delete:
        return Outcome(DROP)
    if kept:
        needs_horizon = b.magic >= 2 and (kept_tombstone or plan.marker_for_empty_txn) and b.delete_horizon_ms is None
        if kept == b.record_count and not needs_horizon and not inner_magic_differs:
            return Outcome(COPY)
        return Outcome(REWRITE, now + delete_retention_ms if needs_horizon else None)
    return Outcome(EMPTY) if plan.retain_empty else Outcome(DROP)
