"""What planning a read may need of one partition beyond its segment list, each read only when
asked: the log start and end, the last stable offset, the aborted transactions of an offset
range (.txnindex) and the offset of a timestamp (Kafka's ListOffsets by time)."""

from __future__ import annotations

from functools import cached_property

from kcompact import errors, storage
from kcompact.datasource.bounds import EARLIEST, LATEST
from kcompact.errors import FormatError
from kcompact.logdir.listing import Partition, Segment
from kcompact.planner.scan import gather
from kcompact.readers.columns import batch_columns
from kcompact.readers.indexes import AbortedTxn, parse_offset_index, parse_time_index, parse_txn_index
from kcompact.readers.segment import DEFAULT_CHUNK, iter_batches


class Positions:
    """One partition's offsets, read lazily (a plain offset range needs none of them)."""

    def __init__(self, part: Partition):
        self.part = part

    @property
    def log_start(self) -> int:
        return self.part.segments[0].base_offset if self.part.segments else 0

    @cached_property
    def _ends(self) -> tuple[int, int]:
        """The log end and the last stable offset, from the batch headers after the latest
        producer snapshot (``planner.scan``, as the compaction planner finds them)."""
        if not self.part.segments:
            return 0, 0
        facts = gather(self.part.path, self.part.topic, self.part.partition, checkpoint=None,
                       log_start_checkpoint=None, min_lag_ms=0, first_batches=False)
        fault = facts.fault()
        if fault is not None:  # the headers' replay stopped there: its ends would be too short, silently
            raise errors.BadInput(f"{self.part.name}: its log end and last stable offset cannot be read: {fault[0]}")
        return facts.log_end, facts.last_stable

    @property
    def log_end(self) -> int:
        return self._ends[0]

    @property
    def last_stable(self) -> int:
        return self._ends[1]

    def resolve(self, value: int, starting: bool) -> int | None:
        """EARLIEST or LATEST as an offset (None: unbounded on that side)."""
        if value == EARLIEST:
            return None if starting else self.log_start
        if value == LATEST:
            return self.log_end if starting else None
        raise errors.UsageError(f"{self.part.name}: offset {value} is neither a position nor -2 (earliest) "
                                "or -1 (latest)")

    def aborted(self, start: int | None, end: int | None) -> tuple[AbortedTxn, ...]:
        """The aborted transactions that meet offsets [start, end), from the .txnindex files of the
        segments that can hold them (a transaction's entry sits in the segment of its marker)."""
        found = []
        for seg in self.part.segments:
            if seg.txnindex is None or seg.txnindex.size == 0:
                continue
            path = seg.txnindex.path
            for txn in parse_txn_index(path, storage.read_bytes(path)):
                if (start is None or txn.last_offset >= start) and (end is None or txn.first_offset < end):
                    found.append(txn)
        return tuple(found)

    def offset_of_time(self, target: int) -> int | None:
        """The first offset whose timestamp is at or after ``target`` ms, as Kafka's ListOffsets
        finds it: the first segment whose largest timestamp reaches it, from the batch its time
        index points to; None when no record is that late. Reads only the segments it needs."""
        segments = self.part.segments
        for i, seg in enumerate(segments):
            active = i == len(segments) - 1
            entries = _time_entries(seg)
            if not active and entries and entries[-1].timestamp < target:
                continue
            below = [e for e in entries if e.timestamp <= target]
            start = _position(seg, seg.base_offset + below[-1].relative_offset) if below else 0
            found = _first_at_or_after(seg, start, target)
            if found is not None:
                return found
        return None


def _time_entries(seg: Segment) -> list:
    if seg.timeindex is None or seg.timeindex.size == 0:
        return []
    return parse_time_index(seg.timeindex.path, storage.read_bytes(seg.timeindex.path))


def _position(seg: Segment, offset: int) -> int:
    """The position of the last offset-index entry at or below ``offset`` (0 without one)."""
    if seg.index is None or seg.index.size == 0:
        return 0
    try:
        entries = parse_offset_index(seg.index.path, storage.read_bytes(seg.index.path))
    except FormatError:
        return 0
    below = [e.position for e in entries if seg.base_offset + e.relative_offset <= offset]
    return below[-1] if below else 0


def _first_at_or_after(seg: Segment, position: int, target: int) -> int | None:
    with storage.open_read(seg.log.path, seg.size) as f:
        for batch in iter_batches(f, seg.log.path, position, chunk_size=min(DEFAULT_CHUNK, max(seg.size, 1))):
            if batch.max_timestamp < target:
                continue
            rows = batch_columns([batch])
            stamps, offsets = rows.column("timestamp").to_pylist(), rows.column("offset").to_pylist()
            for stamp, offset in zip(stamps, offsets):
                if stamp >= target:
                    return offset
    return None
