"""Kafka's cleaning of one partition (Cleaner.doClean), reduced to batch-level decisions.

``plan_partition`` walks the batch headers twice, as Kafka's cleaner does: once over
the dirty range to learn which batches feed the offset map (not aborted, not control)
and where the map ends, once over every segment to be rewritten to decide, batch by
batch, what may be dropped, what must stay even if emptied, and whether tombstones
may still go. What is left per record (Kafka's shouldRetainRecord, decided for a chunk's
records at once by ``compaction.cleaning.rewrite.fate_codes``) needs only the offset map;
``batch_outcome`` turns a batch's kept records into copy / rewrite / empty header / drop
(``compaction.cleaning.rewrite`` runs it on legacy entries, and its vectorised form on v2 batches).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kcompact.compaction.rules.model import BatchInfo, SegmentInfo, infos_at
from kcompact.compaction.rules.transactions import TransactionSweep, collect_aborted, last_of_active_producers
from kcompact.conf.releases import Release
from kcompact.readers.indexes import AbortedTxn
from kcompact.writers.cleaned import COPY, DROP, EMPTY, REWRITE, Outcome

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
    """Everything decided at batch level for one partition's cleaning round, per batch of its
    batch table (``compaction.rules.model.BATCH_TABLE``, file order)."""

    first_dirty: int
    first_uncleanable: int
    latest_offset: int  # the offset map's latest offset; records past it are kept
    groups: list[list[SegmentInfo]]
    feeds: np.ndarray  # bool: the batch's keys feed the offset map
    group: np.ndarray  # int32: the output segment group that rewrites the batch, -1 for none
    flags: np.ndarray  # bool (batches, len(PLAN_FLAGS)): the BatchPlan flags, for batches in a group
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


def _map_pass(segments: Sequence[SegmentInfo], t: np.ndarray, log_start: int, first_dirty: int,
              first_uncleanable: int) -> tuple[np.ndarray, int]:
    """Kafka's buildOffsetMap over [first_dirty, first_uncleanable), batch level: which batches
    feed the map, and the map's latest offset. Only transactional and control batches change the
    transaction state, so only they are walked one by one."""
    dirty = [s for i, s in enumerate(segments)
             if s.base_offset < first_uncleanable
             and (i + 1 == len(segments) or segments[i + 1].base_offset > first_dirty)]
    read = np.zeros(len(t), bool)
    latest = -1
    for n, seg in enumerate(dirty):
        read |= (t["segment"] == seg.base_offset) & (t["position"] >= _lookup_position(seg, first_dirty))
        next_start = dirty[n + 1].base_offset if n + 1 < len(dirty) else first_uncleanable
        latest = max(latest, next_start - 1)  # fast-forward over offset gaps
    counted = t["last_offset"][read & (t["last_offset"] >= first_dirty)]
    if len(counted):
        latest = max(latest, int(counted.max()))
    sweep = TransactionSweep()
    sweep.add(collect_aborted(segments, first_dirty, log_start, first_uncleanable))
    aborted = np.zeros(len(t), bool)
    walked = np.flatnonzero(read & (t["transactional"] | t["control"]))
    for i, b in zip(walked.tolist(), infos_at(t, walked), strict=True):
        if b.is_control:
            sweep.on_control(b)
        else:
            aborted[i] = sweep.on_data(b)
    return read & ~t["control"] & ~aborted, latest


def plan_partition(
    segments: Sequence[SegmentInfo],
    t: np.ndarray,
    *,
    log_start: int,
    first_dirty: int,
    first_uncleanable: int,
    now: int,
    delete_retention_ms: int,
    segment_bytes: int,
    segment_index_bytes: int,
    producer_expiration_ms: int,
    retain_last_empty_at: int | None,
) -> PartitionPlan:
    """All batch-level decisions of one cleaning round. ``segments`` and the batch table ``t``
    cover the whole log (the active segment too: producer state is taken at the log end).
    ``retain_last_empty_at``: the next offset at which an emptied batch stays as an empty header
    (``retain_last_empty_at``'s, by release; None: none does)."""
    feeds, latest = _map_pass(segments, t, log_start, first_dirty, first_uncleanable)
    end_offset = latest + 1
    to_clean = [s for s in segments if s.base_offset < end_offset]
    groups = group_segments(to_clean, segment_bytes, segment_index_bytes, first_uncleanable)
    group = np.full(len(t), -1, np.int32)
    flags = np.zeros((len(t), len(PLAN_FLAGS)), bool)
    plan = PartitionPlan(first_dirty, first_uncleanable, latest, groups, feeds, group, flags)
    clean = [s for s in segments if s.base_offset < first_dirty]
    legacy_horizon = clean[-1].mtime_ms - delete_retention_ms if clean else 0
    rows_of = {base: np.flatnonzero(t["segment"] == base) for base in np.unique(t["segment"]).tolist()}
    for g, members in enumerate(groups):
        for seg in members:
            rows = rows_of.get(seg.base_offset, np.empty(0, np.int64))
            group[rows] = g
            legacy = t["magic"][rows] < 2
            flags[rows, RETAIN_DELETES] = np.where(
                legacy, seg.mtime_ms > legacy_horizon, ~t["has_horizon"][rows] | (now < t["horizon"][rows]))
    rewritten = group >= 0
    last_of_round = (t["last_offset"] + 1 == retain_last_empty_at) if retain_last_empty_at is not None else False
    flags[:, RETAIN_EMPTY] = rewritten & (last_of_round | last_of_active_producers(t, now, producer_expiration_ms))
    sweep = TransactionSweep()
    for g, members in enumerate(groups):
        for k, seg in enumerate(members):
            rows = rows_of.get(seg.base_offset, np.empty(0, np.int64))
            upper = members[k + 1].base_offset if k + 1 < len(members) else (
                int(t["last_offset"][rows[-1]]) + 1 if len(rows) else seg.base_offset)
            sweep.add(collect_aborted(segments, seg.base_offset, log_start, upper))
            walked = rows[t["transactional"][rows] | t["control"][rows]]
            for i, b in zip(walked.tolist(), infos_at(t, walked), strict=True):
                _transaction_flags(b, sweep, now, flags[i])
            if sweep.index:
                plan.txn_index.setdefault(g, []).extend(sweep.index)
                sweep.index.clear()
    return plan


def retain_last_empty_at(release: Release, first_uncleanable: int, high_watermark: int | None,
                         log_end: int) -> int | None:
    """checkBatchRetention's rule for the round's last batch, by release: 3.9.0 and 3.9.1 never keep
    it empty; 3.9.2 to 4.3 keep it when its next offset is the first uncleanable offset
    (KAFKA-17076); 4.4 when it is the high watermark (KAFKA-20452). A log dir at rest keeps the
    high watermark in replication-offset-checkpoint; without it the log end offset stands in:
    the rule exists so that the log end offset survives the cleaning (the high watermark is at
    most the log end offset), and keeping the batch that ends at the log end keeps it."""
    if release.keep_last_empty is None:
        return None
    if release.keep_last_empty == "first_uncleanable":
        return first_uncleanable
    return high_watermark if high_watermark is not None else log_end


PLAN_FLAGS = ("delete", "discard_records", "retain_empty", "retain_deletes", "marker_for_empty_txn")
DELETE, DISCARD, RETAIN_EMPTY, RETAIN_DELETES, MARKER_FOR_EMPTY_TXN = range(len(PLAN_FLAGS))


def _transaction_flags(b: BatchInfo, sweep: TransactionSweep, now: int, flags: np.ndarray) -> None:
    """Kafka's checkBatchRetention for a transactional or control batch, into its ``flags``
    (RETAIN_EMPTY already set); a plain batch keeps all-false discard flags."""
    can_discard = sweep.on_control(b) if b.is_control else sweep.on_data(b)
    if b.is_control:
        discard = can_discard and b.delete_horizon_ms is not None and b.delete_horizon_ms <= now
    else:
        discard = can_discard
    flags[DISCARD] = discard
    flags[DELETE] = discard and not flags[RETAIN_EMPTY]
    flags[MARKER_FOR_EMPTY_TXN] = can_discard and b.is_control


def batch_outcome(plan: BatchPlan, kept: int, kept_tombstone: bool, now: int, delete_retention_ms: int,
                  inner_magic_differs: bool = False, legacy_to_v2: bool = False) -> Outcome:
    """MemoryRecords.filterTo for one batch, given how many records stay. A legacy wrapper
    holding an inner message of another magic (``inner_magic_differs``, KAFKA-4298) is never
    written back as stored (filterBatch's writeOriginalBatch is false): it is rebuilt. With
    ``legacy_to_v2`` (Kafka 4.0 on, KIP-724) no legacy entry is: each is rewritten as v2, and one
    that keeps a tombstone gets a delete horizon like a v2 batch."""
    b = plan.batch
    if plan.delete:
        return Outcome(DROP)
    if kept:
        converted = b.magic < 2 and legacy_to_v2
        needs_horizon = (b.magic >= 2 or converted) and (kept_tombstone or plan.marker_for_empty_txn) \
            and b.delete_horizon_ms is None
        if kept == b.record_count and not needs_horizon and not inner_magic_differs and not converted:
            return Outcome(COPY)
        return Outcome(REWRITE, now + delete_retention_ms if needs_horizon else None)
    return Outcome(EMPTY) if plan.retain_empty else Outcome(DROP)
