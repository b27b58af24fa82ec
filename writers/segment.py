"""Build one segment: the ``.log`` bytes plus its three index files, by the broker's rules.

Two rules, by Kafka release (``conf.releases``: ``index_per_batch``):
- ``append`` is LogSegment.append of 3.9.0 and 4.0.0: when more than ``index.interval.bytes``
  were appended since the last index entry, an offset-index entry (largest offset of the chunk,
  position where the chunk starts) and, if the max timestamp grew, a time-index entry are added
  before the chunk: at most one per append;
- ``append_batches`` is LogSegment.append from KAFKA-806 (3.9.1, 4.0.1, 4.1 on): the same test
  per batch of the append, the entry naming that batch's last offset and start position, the
  byte count carried across appends, so how batches are grouped into appends no longer matters.
``close`` adds the closing time-index entry that carries the segment's largest timestamp.
Both refuse a batch that does not start after the offsets already written (a ``FormatError``
naming the file, byte and offsets): a segment's offsets only ever increase, whatever its input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
from numba import njit

from kcompact.errors import FormatError
from kcompact.readers.batch import NO_TIMESTAMP
from kcompact.readers.indexes import (
    AbortedTxn,
    OffsetEntry,
    TimeEntry,
)
from kcompact.readers.layout import (
    BASE_TIMESTAMP_AT,
    LAST_OFFSET_DELTA_AT,
    LEGACY_TIMESTAMP_AT,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
)
from kcompact.writers.indexes import OFFSET_DTYPE, TIME_DTYPE, encode_entries, encode_txn_index

DEFAULT_INDEX_INTERVAL_BYTES = 4096

# _batch_entries' state: the next batch's position, bytes since the last entry, the max timestamp
# so far and its offset (-1: none), the last time entry's timestamp, the entry counts
POSITION, SINCE, MAX_TS, MAX_TS_OFFSET, LAST_TIME, N_OFFSET, N_TIME = range(7)
# _batch_entries' outcome: every entry made, or the batch at which Kafka's index refuses one, or
# the batch that does not start after the last offset before it
DONE, OFFSET_FULL, OFFSET_NOT_LARGER, TIME_FULL, OFFSETS_BACK = range(5)


@njit(cache=True, nogil=True, inline="always")
def _int(data, at, width):
    value = 0
    for k in range(width):
        value = (value << 8) | data[at + k]
    if value >= 1 << (8 * width - 1):
        value -= 1 << (8 * width)
    return value


@njit(cache=True, nogil=True)
def _batch_entries(data, at, size, state, interval, base_offset, offset_cap, time_cap, last_relative, offsets, times,
                   written):
    """KAFKA-806's LogSegment.append over the batches at ``at``/``size`` of ``data``, as written: each
    batch's last offset and max timestamp read from its header (v2: base offset + last offset delta,
    maxTimestamp; v0/v1: the entry's offset, a v1 entry's timestamp, none for v0). Fills ``offsets``
    (relative offset, position) and ``times`` (timestamp, relative offset) from the counts in
    ``state``; returns (outcome, the batch it concerns). ``written``: the last offset already in
    the segment (base offset - 1: none), which each batch must start after (a v0/v1 entry: end)."""
    for i in range(at.shape[0]):
        p = at[i]
        if data[p + MAGIC_AT] >= 2:
            first = _int(data, p, 8)
            last = first + _int(data, p + LAST_OFFSET_DELTA_AT, 4)
            ts = _int(data, p + MAX_TIMESTAMP_AT, 8)
        else:
            last = first = _int(data, p, 8)
            ts = _int(data, p + LEGACY_TIMESTAMP_AT, 8) if data[p + MAGIC_AT] == 1 else NO_TIMESTAMP
        if first <= written:
            return OFFSETS_BACK, i
        written = last
        if ts > state[MAX_TS]:
            state[MAX_TS], state[MAX_TS_OFFSET] = ts, last
        if state[SINCE] > interval:
            if offset_cap >= 0 and state[N_OFFSET] >= offset_cap:
                return OFFSET_FULL, i
            relative = last - base_offset
            if relative <= last_relative:
                return OFFSET_NOT_LARGER, i
            offsets[state[N_OFFSET], 0], offsets[state[N_OFFSET], 1] = relative, state[POSITION]
            state[N_OFFSET] += 1
            last_relative = relative
            if time_cap >= 0 and state[N_TIME] >= time_cap:
                return TIME_FULL, i
            if state[MAX_TS_OFFSET] >= 0 and state[MAX_TS] > state[LAST_TIME]:
                times[state[N_TIME], 0], times[state[N_TIME], 1] = state[MAX_TS], state[MAX_TS_OFFSET] - base_offset
                state[N_TIME] += 1
                state[LAST_TIME] = state[MAX_TS]
            state[SINCE] = 0
        state[POSITION] += size[i]
        state[SINCE] += size[i]
    return DONE, -1


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


class _Entries:
    """An index's entries in memory, as (n, 2) int64 rows that grow: a segment written by
    KAFKA-806's rule holds one per ``index.interval.bytes``, too many for an object each."""

    __slots__ = ("rows", "n")

    def __init__(self) -> None:
        self.rows, self.n = np.empty((64, 2), np.int64), 0

    def reserve(self, more: int) -> np.ndarray:
        if self.n + more > len(self.rows):
            grown = np.empty((max(2 * len(self.rows), self.n + more), 2), np.int64)
            grown[:self.n] = self.rows[:self.n]
            self.rows = grown
        return self.rows

    def add(self, a: int, b: int) -> None:
        self.reserve(1)[self.n] = a, b
        self.n += 1

    def last(self, column: int) -> int | None:
        return int(self.rows[self.n - 1, column]) if self.n else None

    def encode(self, dtype: np.dtype) -> bytes:
        return encode_entries(self.rows[:self.n], dtype)


@dataclass(slots=True)
class SegmentWriter:
    """Appends batches to ``log`` (any binary file object) and keeps index entries in memory."""

    log: BinaryIO
    base_offset: int
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    max_index_bytes: int | None = None  # segment.index.bytes: the indexes' capacity (None: unbounded)
    path: str = ""  # the file ``log`` writes, for messages
    size: int = 0
    next_offset: int | None = None
    _bytes_since_entry: int = 0
    _max_ts: int = NO_TIMESTAMP
    _offset_of_max_ts: int | None = None
    _offsets: _Entries = field(default_factory=_Entries)  # (relative offset, position)
    _times: _Entries = field(default_factory=_Entries)  # (timestamp, relative offset)
    _aborted: list[AbortedTxn] = field(default_factory=list)

    def append(
        self, chunk: bytes | memoryview, largest_offset: int, max_timestamp: int, offset_of_max_timestamp: int
    ) -> None:
        """Append one or more whole batches as a single chunk, as the broker does."""
        if largest_offset - self.base_offset > 0x7FFFFFFF or largest_offset < self.base_offset:
            raise ValueError(f"offset {largest_offset} does not fit segment {self.base_offset}")
        if self.next_offset is not None and largest_offset < self.next_offset:
            raise self._back(self.size, largest_offset, self.next_offset - 1)
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

    def append_batches(self, data: np.ndarray, at: np.ndarray, size: np.ndarray) -> None:
        """Append the v0/v1/v2 batches at ``at`` (``size`` bytes each, one after another) of ``data``
        (uint8) as one append by KAFKA-806's rule: an index entry per batch that finds more than
        ``index.interval.bytes`` appended since the last entry."""
        n = len(at)
        if not n:
            return
        start, end = int(at[0]), int(at[-1] + size[-1])
        p = int(at[-1])
        last = int.from_bytes(data[p:p + 8].tobytes(), "big", signed=True)
        if data[p + MAGIC_AT] >= 2:
            last += int.from_bytes(data[p + LAST_OFFSET_DELTA_AT:p + BASE_TIMESTAMP_AT].tobytes(), "big", signed=True)
        if last - self.base_offset > 0x7FFFFFFF or last < self.base_offset:
            raise ValueError(f"offset {last} does not fit segment {self.base_offset}")
        last_time = self._times.last(0)
        state = np.array([self.size, self._bytes_since_entry, self._max_ts,
                          -1 if self._offset_of_max_ts is None else self._offset_of_max_ts,
                          NO_TIMESTAMP if last_time is None else last_time, self._offsets.n, self._times.n], np.int64)
        cap = self.max_index_bytes
        offset_cap = -1 if cap is None else cap // 8
        time_cap = -1 if cap is None else max(0, cap // 12 - 1)
        last_relative = self._offsets.last(0)
        outcome, bad = _batch_entries(data, at, size, state, self.index_interval_bytes, self.base_offset, offset_cap,
                                      time_cap, -1 if last_relative is None else last_relative,
                                      self._offsets.reserve(n), self._times.reserve(n),
                                      self.base_offset - 1 if self.next_offset is None else self.next_offset - 1)
        self._offsets.n, self._times.n = int(state[N_OFFSET]), int(state[N_TIME])
        if outcome == OFFSETS_BACK:
            p = int(at[bad])
            prev = self.next_offset - 1 if bad == 0 and self.next_offset is not None else None
            if bad > 0:
                q = int(at[bad - 1])
                prev = int.from_bytes(data[q:q + 8].tobytes(), "big", signed=True)
                if data[q + MAGIC_AT] >= 2:
                    prev += int.from_bytes(data[q + LAST_OFFSET_DELTA_AT:q + BASE_TIMESTAMP_AT].tobytes(), "big",
                                           signed=True)
            raise self._back(self.size + p - start, int.from_bytes(data[p:p + 8].tobytes(), "big", signed=True), prev)
        if outcome != DONE:
            where = f"segment {self.base_offset}: the batch at byte {self.size + int(at[bad]) - start}"
            raise ValueError(f"{where}: " + ("attempt to append to a full offset index" if outcome == OFFSET_FULL else
                                             "attempt to append to a full time index" if outcome == TIME_FULL else
                                             "its offset is not larger than the last offset indexed")
                             + (f" (segment.index.bytes {cap})" if outcome != OFFSET_NOT_LARGER else ""))
        self.log.write(memoryview(data)[start:end])
        self.size = int(state[POSITION])
        self._bytes_since_entry = int(state[SINCE])
        if state[MAX_TS_OFFSET] >= 0:
            self._max_ts, self._offset_of_max_ts = int(state[MAX_TS]), int(state[MAX_TS_OFFSET])
        self.next_offset = last + 1

    def _back(self, position: int, offset: int, prev: int | None) -> FormatError:
        """The refusal of a batch at ``offset`` to go at byte ``position``, after a batch ending at
        ``prev`` (None: first in the segment)."""
        after = f"below the segment's base offset {self.base_offset}" if prev is None else f"after offset {prev}"
        return FormatError(self.path or f"segment {self.base_offset}", position,
                           f"refused a batch at offset {offset} {after}: a segment's offsets must increase")

    def index_full(self, max_index_size: int) -> bool:
        """LogSegment.shouldRoll's index checks with segment.index.bytes = ``max_index_size``: the
        offset index is full at max_index_size // 8 entries, the time index one entry earlier
        than max_index_size // 12 (TimeIndex keeps its last slot for the closing entry)."""
        return self._offsets.n >= max_index_size // 8 or self._times.n >= max_index_size // 12 - 1

    @property
    def offset_entries(self) -> list[OffsetEntry]:
        return [OffsetEntry(*row) for row in self._offsets.rows[:self._offsets.n].tolist()]

    @property
    def time_entries(self) -> list[TimeEntry]:
        return [TimeEntry(*row) for row in self._times.rows[:self._times.n].tolist()]

    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        self._aborted.append(txn)

    def _offset_entry(self, largest_offset: int) -> None:
        """OffsetIndex.append, which refuses a full index and an offset not above the last one."""
        entries = self._offsets
        if self.max_index_bytes is not None and entries.n >= self.max_index_bytes // 8:
            raise ValueError(f"segment {self.base_offset}: attempt to append to a full offset index "
                             f"(size = {entries.n}, segment.index.bytes {self.max_index_bytes})")
        relative = largest_offset - self.base_offset
        if entries.n and relative <= entries.last(0):
            raise ValueError(f"segment {self.base_offset}: offset {largest_offset} is not larger than the last "
                             "offset indexed")
        entries.add(relative, self.size)

    def _maybe_time_entry(self, check_full: bool = False) -> None:
        """TimeIndex.maybeAppend: full one entry before its capacity (the last slot is the closing
        entry's), an entry only when the timestamp grows, never one that goes back."""
        entries = self._times
        if check_full and self.max_index_bytes is not None and entries.n >= self.max_index_bytes // 12 - 1:
            raise ValueError(f"segment {self.base_offset}: attempt to append to a full time index "
                             f"(size = {entries.n}, segment.index.bytes {self.max_index_bytes})")
        if self._offset_of_max_ts is None:
            return
        relative = self._offset_of_max_ts - self.base_offset
        if entries.n and (relative < entries.last(1) or self._max_ts < entries.last(0)):
            raise ValueError(f"segment {self.base_offset}: time index entry ({self._max_ts}, {self._offset_of_max_ts}) "
                             "goes back")
        last = entries.last(0) if entries.n else NO_TIMESTAMP
        if self._max_ts > last:
            entries.add(self._max_ts, relative)

    def close(self) -> SegmentFiles:
        self._maybe_time_entry()
        return SegmentFiles(
            base_offset=self.base_offset,
            log_size=self.size,
            next_offset=self.next_offset if self.next_offset is not None else self.base_offset,
            max_timestamp=self._max_ts,
            offset_index=self._offsets.encode(OFFSET_DTYPE),
            time_index=self._times.encode(TIME_DTYPE),
            txn_index=encode_txn_index(self._aborted),
        )
