"""What the cleaner's rules see of a partition: batch headers and segment facts, as values.

The rules never touch bytes or storage; the Spark pipeline (and tests) build these
from the files and hand them over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kcompact.readers.batch import ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TRANSACTIONAL, Batch
from kcompact.readers.indexes import AbortedTxn, OffsetEntry


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

    @classmethod
    def of(cls, batch: Batch, segment: int) -> BatchInfo:
        return cls._of_v2(batch, segment) if batch.magic == 2 else cls._of_properties(batch, segment)

    @classmethod
    def _of_properties(cls, batch: Batch, segment: int) -> BatchInfo:
        """``of`` through the batch's properties, which read any magic (legacy entries take this way)."""
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
        the cleaner builds one per batch, twice. The same values as ``_of_properties`` (a property
        test holds them together, as it holds ``compaction.cleaning.partition_scan``'s batch table to ``of``)."""
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


# A partition's batch headers as columns (one row per batch, file order), for rules that run over
# tens of thousands of batches: ``BatchInfo`` field by field; no control type is -1, no delete
# horizon has ``has_horizon`` False.
BATCH_TABLE = np.dtype([
    ("segment", "<i8"), ("position", "<i8"), ("size", "<i8"), ("magic", "<i1"), ("base_offset", "<i8"),
    ("last_offset", "<i8"), ("producer_id", "<i8"), ("producer_epoch", "<i2"), ("transactional", "?"),
    ("control", "?"), ("control_type", "<i1"), ("horizon", "<i8"), ("has_horizon", "?"), ("max_timestamp", "<i8"),
    ("record_count", "<i4"),
])


def table_of(infos: Sequence[BatchInfo]) -> np.ndarray:
    return np.array([(b.segment, b.position, b.size, b.magic, b.base_offset, b.last_offset, b.producer_id,
                      b.producer_epoch, b.is_transactional, b.is_control,
                      -1 if b.control_type is None else b.control_type,
                      -1 if b.delete_horizon_ms is None else b.delete_horizon_ms, b.delete_horizon_ms is not None,
                      b.max_timestamp, b.record_count) for b in infos], dtype=BATCH_TABLE)


def infos_at(table: np.ndarray, rows) -> list[BatchInfo]:
    """Rows of a batch table as ``BatchInfo``s: one conversion of them all to Python values,
    not one per field (a partition's transactional batches are read this way)."""
    return [BatchInfo(segment, position, size, magic, base, last, pid, epoch, transactional, control,
                      None if control_type < 0 else control_type, horizon if has_horizon else None, max_ts, count)
            for (segment, position, size, magic, base, last, pid, epoch, transactional, control, control_type,
                 horizon, has_horizon, max_ts, count) in table[rows].tolist()]
