"""Build one segment: the ``.log`` bytes plus its three index files, by the broker's rules.

``append`` mirrors LogSegment.append: when more than ``index.interval.bytes``
were appended since the last index entry, an offset-index entry (largest
offset of the chunk, position where the chunk starts) and, if the max timestamp
grew, a time-index entry are added before the chunk. ``close`` adds the closing
time-index entry that carries the segment's largest timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO

from kcompact.readers.batch import NO_TIMESTAMP
from kcompact.readers.indexes import (
    AbortedTxn,
    OffsetEntry,
    TimeEntry,
)
from kcompact.writers.indexes import encode_offset_index, encode_time_index, encode_txn_index

DEFAULT_INDEX_INTERVAL_BYTES = 4096


@dataclass(slots=True)
class SegmentFiles:
    """Everything a closed segment consists of besides its ``.log`` stream."""

    base_offset: int
    log_size: int
    next_offset: int
    max_timestamp: int
    offset_index: bytes
    time_index: bytes
    txn_index: bytes


@dataclass(slots=True)
class SegmentWriter:
    """Appends batches to ``log`` (any binary file object) and keeps index entries in memory."""

    log: BinaryIO
    base_offset: int
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    max_index_bytes: int | None = None  # segment.index.bytes: the indexes' capacity (None: unbounded)
    size: int = 0
    next_offset: int | None = None
    _bytes_since_entry: int = 0
    _max_ts: int = NO_TIMESTAMP
    _offset_of_max_ts: int | None = None
    _offset_entries: list[OffsetEntry] = field(default_factory=list)
    _time_entries: list[TimeEntry] = field(default_factory=list)
    _aborted: list[AbortedTxn] = field(default_factory=list)

    def append(self, chunk: bytes | memoryview, largest_offset: int, max_timestamp: int, offset_of_max_timestamp: int) -> None:
        """Append one or more whole batches as a single chunk, as the broker does."""
        if largest_offset - self.base_offset > 0x7FFFFFFF or largest_offset < self.base_offset:
            raise ValueError(f"offset {largest_offset} does not fit segment {self.base_offset}")
        if max_timestamp > self._max_ts:
            self._max_ts, self._offset_of_max_ts = max_timestamp, offset_of_max_timestamp
        if self._bytes_since_entry > self.index_interval_bytes:
            self._offset_entry(largest_offset)
            self._maybe_time_entry(check_full=True)
            self._bytes_since_entry = 0
        self.log.write(chunk)
        self.size += len(chunk)
        self._bytes_since_entry += len(chunk)
        self.next_offset = largest_offset + 1

    def index_full(self, max_index_size: int) -> bool:
        """LogSegment.shouldRoll's index checks with segment.index.bytes = ``max_index_size``: the
        offset index is full at max_index_size // 8 entries, the time index one entry earlier
        than max_index_size // 12 (TimeIndex keeps its last slot for the closing entry)."""
        return (len(self._offset_entries) >= max_index_size // 8
                or len(self._time_entries) >= max_index_size // 12 - 1)

    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        self._aborted.append(txn)

    def _offset_entry(self, largest_offset: int) -> None:
        """OffsetIndex.append, which refuses a full index and an offset not above the last one."""
        entries = self._offset_entries
        if self.max_index_bytes is not None and len(entries) >= self.max_index_bytes // 8:
            raise ValueError(f"segment {self.base_offset}: attempt to append to a full offset index "
                             f"(size = {len(entries)}, segment.index.bytes {self.max_index_bytes})")
        relative = largest_offset - self.base_offset
        if entries and relative <= entries[-1].relative_offset:
            raise ValueError(f"segment {self.base_offset}: offset {largest_offset} is not larger than the last "
                             "offset indexed")
        entries.append(OffsetEntry(relative, self.size))

    def _maybe_time_entry(self, check_full: bool = False) -> None:
        """TimeIndex.maybeAppend: full one entry before its capacity (the last slot is the closing
        entry's), an entry only when the timestamp grows, never one that goes back."""
        entries = self._time_entries
        if check_full and self.max_index_bytes is not None and len(entries) >= self.max_index_bytes // 12 - 1:
            raise ValueError(f"segment {self.base_offset}: attempt to append to a full time index "
                             f"(size = {len(entries)}, segment.index.bytes {self.max_index_bytes})")
        if self._offset_of_max_ts is None:
            return
        relative = self._offset_of_max_ts - self.base_offset
        if entries and (relative < entries[-1].relative_offset or self._max_ts < entries[-1].timestamp):
            raise ValueError(f"segment {self.base_offset}: time index entry ({self._max_ts}, {self._offset_of_max_ts}) "
                             "goes back")
        last = entries[-1].timestamp if entries else NO_TIMESTAMP
        if self._max_ts > last:
            entries.append(TimeEntry(self._max_ts, relative))

    def close(self) -> SegmentFiles:
        self._maybe_time_entry()
        return SegmentFiles(
            base_offset=self.base_offset,
            log_size=self.size,
            next_offset=self.next_offset if self.next_offset is not None else self.base_offset,
            max_timestamp=self._max_ts,
            offset_index=encode_offset_index(self._offset_entries),
            time_index=encode_time_index(self._time_entries),
            txn_index=encode_txn_index(self._aborted),
        )
