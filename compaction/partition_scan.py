"""Read what the batch-level decisions need of one partition, and make them.

Runs on an executor, one partition per call: lists the partition dir, reads every
batch header (records are not decoded, control batches aside), the .txnindex files
and the offset index of the first dirty segment, then applies
``compaction.decisions.plan_partition``. Bad bytes end it with a ``FormatError``
(file and position) that the job turns into an uncleanable partition.
"""

from __future__ import annotations

import storage
from compaction.decisions import PartitionPlan, plan_partition
from compaction.model import BatchInfo, SegmentInfo
from readers.indexes import parse_offset_index, parse_txn_index
from readers.logdir import Partition, scan_partition
from readers.segment import iter_batches, iter_to_torn_tail


def read_partition(path: str, topic: str, number: int, first_dirty: int) -> tuple[Partition, list[SegmentInfo], list[BatchInfo]]:
    part = scan_partition(path, topic, number)
    segments, batches = [], []
    for i, seg in enumerate(part.segments):
        holds_first_dirty = seg.base_offset <= first_dirty and (
            i + 1 == len(part.segments) or part.segments[i + 1].base_offset > first_dirty)
        segments.append(SegmentInfo(
            base_offset=seg.base_offset, size=seg.size, mtime_ms=seg.log.mtime_ms,
            index_size=seg.index.size if seg.index else 0,
            timeindex_size=seg.timeindex.size if seg.timeindex else 0,
            aborted=tuple(parse_txn_index(seg.txnindex.path, storage.read_bytes(seg.txnindex.path)))
            if seg.txnindex else (),
            offset_index=tuple(parse_offset_index(seg.index.path, storage.read_bytes(seg.index.path)))
            if seg.index and holds_first_dirty else (),
        ))
        with storage.open_read(seg.log.path) as f:  # the active segment ends at a torn tail, as the log does
            read = iter_to_torn_tail(f, seg.log.path) if i + 1 == len(part.segments) else iter_batches(f, seg.log.path)
            batches.extend(BatchInfo.of(b, seg.base_offset) for b in read)
    return part, segments, batches


def plan(path: str, topic: str, number: int, *, log_start: int, first_dirty: int, first_uncleanable: int,
         now: int, config: dict[str, int]) -> tuple[Partition, list[BatchInfo], PartitionPlan]:
    part, segments, batches = read_partition(path, topic, number, first_dirty)
    decided = plan_partition(
        segments, batches, log_start=log_start, first_dirty=first_dirty, first_uncleanable=first_uncleanable,
        now=now, delete_retention_ms=config["delete.retention.ms"], segment_bytes=config["segment.bytes"],
        segment_index_bytes=config["segment.index.bytes"],
        producer_expiration_ms=config["producer.id.expiration.ms"],
    )
    return part, batches, decided
