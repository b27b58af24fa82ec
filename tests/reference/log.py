"""A partition as the broker holds it while cleaning: its segments (LogSegment, LogSegments,
UnifiedLog's offset helpers) and the segment the cleaner writes (LogSegment.append and its
indexes).

Files are read whole into memory: the model is for small test log dirs, and slow is fine.
"""

from __future__ import annotations

import io
import os
import re
import struct
from dataclasses import dataclass, field

from kcompact.readers.batch import Batch
from kcompact.readers.indexes import (
    AbortedTxn,
    OffsetEntry,
    TimeEntry,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
)
from kcompact.readers.segment import iter_batches
from tests.reference.producers import ProducerState

INT_MAX = 2**31 - 1
NO_TIMESTAMP = -1
OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY = struct.Struct(">ii"), struct.Struct(">qi"), struct.Struct(">hqqqq")
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
KINDS = ("log", "index", "timeindex", "txnindex")


def file_name(base_offset: int, kind: str) -> str:
    return f"{base_offset:020d}.{kind}"


def mtime_ms(path: str) -> int:
    return os.stat(path).st_mtime_ns // 1_000_000


class CleaningFailed(Exception):
    """An exception Kafka's cleaner throws inside a round (the partition becomes uncleanable)."""


@dataclass
class LogSegment:
    """A segment loaded from disk."""

    dir: str
    base_offset: int
    data: bytes
    offset_index: list[OffsetEntry]
    offset_index_bytes: int  # AbstractIndex.sizeInBytes: entries (file length / 8) * 8
    time_index: list[TimeEntry]
    time_index_bytes: int
    txn_index: list[AbortedTxn]
    last_modified: int  # ms, of the .log file
    _batches: list[Batch] | None = None

    @classmethod
    def load(cls, dir: str, base_offset: int) -> LogSegment:
        def read(kind: str) -> bytes:
            path = os.path.join(dir, file_name(base_offset, kind))
            if not os.path.exists(path):
                return b""
            with open(path, "rb") as f:
                return f.read()

        index, timeindex = read("index"), read("timeindex")
        path = os.path.join(dir, file_name(base_offset, "log"))
        return cls(
            dir, base_offset, read("log"),
            parse_offset_index(path, index), len(index) // 8 * 8,
            parse_time_index(path, timeindex), len(timeindex) // 12 * 12,
            parse_txn_index(path, read("txnindex")), mtime_ms(path),
        )

    @property
    def path(self) -> str:
        return os.path.join(self.dir, file_name(self.base_offset, "log"))

    @property
    def size(self) -> int:
        return len(self.data)

    def batches(self) -> list[Batch]:
        if self._batches is None:
            self._batches = list(iter_batches(io.BytesIO(self.data), self.path))
        return self._batches

    def lookup(self, target: int) -> int:
        """OffsetIndex.lookup(target).position: the last entry at or below ``target``, else position 0."""
        position = 0
        for e in self.offset_index:
            if self.base_offset + e.relative_offset <= target:
                position = e.position
            else:
                break
        return position

    def largest_timestamp(self) -> int:
        """LogSegment.largestTimestamp: the max timestamp so far (the time index's last entry),
        else the file's last-modified time."""
        ts = self.time_index[-1].timestamp if self.time_index else NO_TIMESTAMP
        return ts if ts >= 0 else self.last_modified

    def first_batch_timestamp(self) -> int:
        """LogSegment.getFirstBatchTimestamp: the first batch's max timestamp, Long.MAX_VALUE if none."""
        found = self.batches()
        return found[0].max_timestamp if found else 2**63 - 1

    def read_next_offset(self) -> int:
        found = self.batches()
        return found[-1].next_offset if found else self.base_offset

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """TransactionIndex.collectAbortedTxns: entries ending at or after ``fetch_offset`` and
        starting before ``upper_bound``; complete once an entry's last stable offset reaches the bound."""
        found = []
        for txn in self.txn_index:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False


@dataclass
class CleanedSegment:
    """The ``.cleaned`` segment of one group: LogSegment.append per append call, the offset and
    time index rules (capacity from segment.index.bytes), the transaction index.
    ``index_per_batch``: LogSegment.append after KAFKA-806 (3.9.1, 4.0.1, 4.1 on)."""

    base_offset: int
    index_interval_bytes: int
    max_index_size: int
    index_per_batch: bool = False
    data: bytearray = field(default_factory=bytearray)
    offset_index: list[tuple[int, int]] = field(default_factory=list)  # (offset, position)
    time_index: list[tuple[int, int]] = field(default_factory=list)  # (timestamp, offset)
    txn_index: list[AbortedTxn] = field(default_factory=list)
    max_timestamp_so_far: int = NO_TIMESTAMP
    offset_of_max_timestamp_so_far: int = -1
    bytes_since_last_index_entry: int = 0

    def __post_init__(self) -> None:
        # readMaxTimestampAndOffsetSoFar on a new segment: the empty time index's last entry (-1, base)
        self.offset_of_max_timestamp_so_far = self.base_offset

    def append(self, largest_offset: int, largest_timestamp: int, shallow_offset_of_max_timestamp: int,
               records: bytes) -> None:
        """LogSegment.append (Kafka 3.9.0, 4.0.0): one index check per call, before the bytes count."""
        if not records:
            return
        physical_position = len(self.data)
        if not 0 <= largest_offset - self.base_offset <= INT_MAX:  # ensureOffsetInRange
            raise CleaningFailed(f"offset {largest_offset} overflows segment {self.base_offset}")
        if self.index_per_batch:
            self._append_per_batch(physical_position, records)
            return
        self.data += records
        if largest_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = largest_timestamp
            self.offset_of_max_timestamp_so_far = shallow_offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._offset_index_append(largest_offset, physical_position)
            self._time_index_maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, False)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += len(records)

    def _append_per_batch(self, physical_position: int, records: bytes) -> None:
        """LogSegment.append from KAFKA-806: for each batch appended, the max timestamp so far
        (this batch's, at its last offset, when larger), then the index check, the entry naming
        this batch's last offset and where it starts; then its bytes count."""
        self.data += records
        for batch in iter_batches(io.BytesIO(records), "append"):
            if batch.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = batch.max_timestamp
                self.offset_of_max_timestamp_so_far = batch.last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self._offset_index_append(batch.last_offset, physical_position)
                self._time_index_maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, False)
                self.bytes_since_last_index_entry = 0
            physical_position += batch.size
            self.bytes_since_last_index_entry += batch.size

    def _offset_index_append(self, offset: int, position: int) -> None:
        """OffsetIndex.append: refuses a full index and an offset not above the last one."""
        if len(self.offset_index) >= self.max_index_size // OFFSET_ENTRY.size:
            raise CleaningFailed(f"attempt to append to a full offset index (size = {len(self.offset_index)})")
        if self.offset_index and offset <= self.offset_index[-1][0]:
            raise CleaningFailed(f"offset {offset} is not larger than the last offset indexed")
        self.offset_index.append((offset, position))

    def _time_index_maybe_append(self, timestamp: int, offset: int, skip_full_check: bool) -> None:
        """TimeIndex.maybeAppend: full one entry early (the last slot is kept for the closing entry);
        an entry only when the timestamp grows past the last one (or past -1 when empty)."""
        if not skip_full_check and len(self.time_index) >= self.max_index_size // TIME_ENTRY.size - 1:
            raise CleaningFailed(f"attempt to append to a full time index (size = {len(self.time_index)})")
        last_ts, last_offset = self.time_index[-1] if self.time_index else (NO_TIMESTAMP, self.base_offset)
        if self.time_index and (offset < last_offset or timestamp < last_ts):
            raise CleaningFailed(f"time index entry ({timestamp}, {offset}) goes back")
        if timestamp > last_ts:
            self.time_index.append((timestamp, offset))

    def append_aborted(self, txn: AbortedTxn) -> None:
        """TransactionIndex.append: last offsets must increase."""
        if self.txn_index and self.txn_index[-1].last_offset >= txn.last_offset:
            raise CleaningFailed(f"aborted transaction ending at {txn.last_offset} is not after the last one")
        self.txn_index.append(txn)

    def on_become_inactive(self) -> None:
        """LogSegment.onBecomeInactiveSegment: the closing time-index entry (no full check)."""
        self._time_index_maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, True)

    def files(self) -> dict[str, bytes]:
        out = {
            "log": bytes(self.data),
            "index": b"".join(OFFSET_ENTRY.pack(o - self.base_offset, p) for o, p in self.offset_index),
            "timeindex": b"".join(TIME_ENTRY.pack(t, o - self.base_offset) for t, o in self.time_index),
        }
        if self.txn_index:  # TransactionIndex creates its file on the first append only
            out["txnindex"] = b"".join(TXN_ENTRY.pack(t.version, t.producer_id, t.first_offset, t.last_offset,
                                                      t.last_stable_offset) for t in self.txn_index)
        return out


@dataclass
class Log:
    """UnifiedLog of one partition: its segments in offset order, its log start offset, its
    producer state."""

    topic: str
    partition: int
    dir: str
    segments: list[LogSegment]
    log_start_offset: int
    producers: ProducerState = field(default_factory=ProducerState)

    @classmethod
    def load(cls, dir: str, topic: str, partition: int, log_start_checkpoint: int | None) -> Log:
        bases = sorted({int(m[1]) for name in os.listdir(dir) if (m := SEGMENT_FILE.match(name)) and m[2] == "log"})
        segments = [LogSegment.load(dir, base) for base in bases]
        first = segments[0].base_offset
        start = max(log_start_checkpoint, first) if log_start_checkpoint is not None else first
        return cls(topic, partition, dir, segments, start)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def log_end_offset(self) -> int:
        return self.active_segment.read_next_offset()

    def log_segments(self, start: int, end: int) -> list[LogSegment]:
        """LogSegments.values(from, to): the segments overlapping [from, to): from the one whose
        base is the floor of ``from`` (or the first) to bases below ``to``; empty when from == to."""
        if start == end:
            return []
        if end < start:
            raise ValueError(f"invalid log segment range: requested segments in {self.name} from {start} to {end}")
        floor = [s for s in self.segments if s.base_offset <= start]
        first = floor[-1].base_offset if floor else None
        return [s for s in self.segments if (first is None or s.base_offset >= first) and s.base_offset < end]

    def non_active_log_segments_from(self, start: int) -> list[LogSegment]:
        active = self.active_segment.base_offset
        return [] if start > active else self.log_segments(start, active)

    def last_stable_offset(self) -> int:
        """UnifiedLog.lastStableOffset: the first unstable offset when below the high watermark,
        else the high watermark. The model takes the high watermark to be the log end offset (a
        cleanly stopped broker whose replicas caught up)."""
        high_watermark = self.log_end_offset()
        unstable = self.producers.first_unstable_offset()
        return unstable if unstable is not None and unstable < high_watermark else high_watermark

    def collect_aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """UnifiedLog.collectAbortedTransactions: from the segment holding ``start`` onwards, the
        entries ending at or after the log start offset, until a segment's search is complete."""
        floor = [i for i, s in enumerate(self.segments) if s.base_offset <= start]
        if not floor:
            return []
        found: list[AbortedTxn] = []
        for segment in self.segments[floor[-1]:]:
            txns, complete = segment.collect_aborted_txns(self.log_start_offset, upper_bound)
            found += txns
            if complete:
                break
        return found

    def replace_segments(self, cleaned: CleanedSegment, old: list[LogSegment], last_modified: int) -> None:
        """The swap's end state (UnifiedLog.replaceSegments, then the async delete): the old
        segments' files gone, the cleaned one under the group's base offset, its .log, .index and
        .timeindex stamped with the group's last modification time (LogSegment.setLastModified)."""
        for seg in old:
            for kind in KINDS:
                path = os.path.join(self.dir, file_name(seg.base_offset, kind))
                if os.path.exists(path):
                    os.remove(path)
        for kind, data in cleaned.files().items():
            path = os.path.join(self.dir, file_name(cleaned.base_offset, kind))
            with open(path, "wb") as f:
                f.write(data)
            if kind != "txnindex":
                os.utime(path, ns=(last_modified * 1_000_000,) * 2)
        gone = {s.base_offset for s in old}
        self.segments = sorted([s for s in self.segments if s.base_offset not in gone]
                               + [LogSegment.load(self.dir, cleaned.base_offset)], key=lambda s: s.base_offset)
