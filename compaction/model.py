"""What the cleaner's rules see of a partition: batch headers and segment facts, as values.

The rules never touch bytes or storage; the Spark pipeline (and tests) build these
from the files and hand them over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from readers.batch import Batch
from readers.indexes import AbortedTxn, OffsetEntry


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch's header (and control type), where it lives, and nothing of its records."""

    segment: int  # base offset of the segment file holding it
    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    control_type: int | None  # ABORT 0 / COMMIT 1 for a control batch holding a record
    delete_horizon_ms: int | None
    max_timestamp: int
    record_count: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @classmethod
    def of(cls, batch: Batch, segment: int) -> BatchInfo:
        return cls(
            segment=segment, position=batch.position, size=batch.size, magic=batch.magic,
            base_offset=batch.base_offset, last_offset=batch.last_offset, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, is_transactional=batch.is_transactional,
            is_control=batch.is_control,
            control_type=batch.control_type() if batch.is_control and batch.records_count else None,
            delete_horizon_ms=batch.delete_horizon_ms if batch.has_delete_horizon else None,
            max_timestamp=batch.max_timestamp, record_count=batch.count,
        )


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A segment's facts: sizes of its files, modification time, aborted-transaction
    entries (.txnindex) and, where the rules need it, its offset index."""

    base_offset: int
    size: int
    mtime_ms: int
    index_size: int = 0
    timeindex_size: int = 0
    aborted: tuple[AbortedTxn, ...] = ()
    offset_index: tuple[OffsetEntry, ...] = field(default=(), compare=False)
