"""What the cleaner's rules see of a partition: batch headers and segment facts, as values.

The rules never touch bytes or storage; the Spark pipeline (and tests) build these
from the files and hand them over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from readers.batch import ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TRANSACTIONAL, Batch
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
        if batch.magic == 2:
            return cls._of_v2(batch, segment)
        return cls(
            segment=segment, position=batch.position, size=batch.size, magic=batch.magic,
            base_offset=batch.base_offset, last_offset=batch.last_offset, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, is_transactional=batch.is_transactional,
            is_control=batch.is_control,
            control_type=batch.control_type() if batch.is_control and batch.records_count else None,
            delete_horizon_ms=batch.delete_horizon_ms if batch.has_delete_horizon else None,
            max_timestamp=batch.max_timestamp, record_count=batch.count,
        )

    @classmethod
    def _of_v2(cls, batch: Batch, segment: int) -> BatchInfo:
        """``of`` for a v2 batch, from the header fields directly (the properties' v2 branches):
        the cleaner builds one per batch, twice."""
        attributes = batch.attributes
        control = bool(attributes & ATTR_CONTROL)
        return cls(
            segment, batch.position, batch.end - batch.start, 2, batch.base_offset_field,
            batch.base_offset_field + batch.last_offset_delta, batch.producer_id, batch.producer_epoch,
            bool(attributes & ATTR_TRANSACTIONAL), control,
            batch.control_type() if control and batch.records_count else None,
            batch.base_timestamp if attributes & ATTR_DELETE_HORIZON else None, batch.max_timestamp,
            batch.records_count,
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
