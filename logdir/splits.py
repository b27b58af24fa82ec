"""Byte ranges of a partition's segments for tasks: each starts at a batch boundary, so a task
reads whole batches, and is at most ``max_bytes`` long unless one batch is longer.

A segment larger than ``max_bytes``, or one an offset range starts or ends inside, is cut at the
positions of its offset index: an index entry (O, P) says the batches before P hold offsets below
O and those after that chunk offsets above it. A missing or inconsistent index only costs
parallelism (the segment is one range), never rows. Used by the ``kafka-log`` data source and by
the compaction job's shared path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kcompact import storage
from kcompact.errors import FormatError
from kcompact.logdir.listing import Partition, Segment
from kcompact.readers.indexes import OffsetEntry, parse_offset_index

DEFAULT_MAX_SPLIT_BYTES = 128 << 20


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end); None is unbounded."""

    start: int | None = None
    end: int | None = None

    def meets(self, first: int, end: int | None) -> bool:
        """Whether offsets [first, end) can hold one in this range."""
        return (self.end is None or first < self.end) and (end is None or self.start is None or end > self.start)

    def narrowed(self, start: int | None, end: int | None) -> OffsetRange:
        return OffsetRange(_bound(max, self.start, start), _bound(min, self.end, end))

    def mask(self, low: np.ndarray, high: np.ndarray) -> np.ndarray | None:
        """Rows whose offsets [low, high] meet the range; None when all do."""
        keep = np.ones(len(low), np.bool_)
        if self.start is not None:
            keep &= high >= self.start
        if self.end is not None:
            keep &= low < self.end
        return None if keep.all() else keep


def _bound(pick: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


@dataclass(frozen=True)
class ByteRange:
    """The entries that start in bytes [start, end) of one segment file."""

    path: str
    topic: str
    partition: int
    segment_base: int
    start: int
    end: int
    offsets: OffsetRange
    file_size: int | None = None  # the segment file's, as listed (an object store is not asked)


def partition_ranges(
    part: Partition, offsets: OffsetRange, max_bytes: int = DEFAULT_MAX_SPLIT_BYTES
) -> list[ByteRange]:
    """Byte ranges of the segments that can hold offsets in range (a segment's offsets lie below the next base)."""
    bases = [seg.base_offset for seg in part.segments]
    ranges = []
    for seg, next_base in zip(part.segments, bases[1:] + [None]):
        if seg.size == 0 or not offsets.meets(seg.base_offset, next_base):
            continue
        for start, end in _ranges(_positions(seg, next_base, offsets, max_bytes), max_bytes):
            ranges.append(ByteRange(seg.log.path, part.topic, part.partition, seg.base_offset, start, end, offsets,
                                    seg.size))
    return ranges


class Cut(NamedTuple):
    """A batch-start position; offsets of the batches before it are < ``below``, from it on >= ``above``."""

    position: int
    below: int
    above: int


def _positions(seg: Segment, next_base: int | None, offsets: OffsetRange, max_bytes: int) -> list[int]:
    """Batch-start positions to cut the segment at, from the first byte the range needs to the last.

    Index entry (O, P) marks a chunk appended at P whose largest offset is O: batches before P
    hold offsets < O, and batches after that chunk offsets > O."""
    cuts_inside = offsets.start is not None and offsets.start > seg.base_offset
    cuts_inside |= offsets.end is not None and (next_base is None or offsets.end < next_base)
    entries = _index(seg, next_base) if seg.size > max_bytes or cuts_inside else []
    cuts, above = [Cut(0, seg.base_offset, seg.base_offset)], seg.base_offset
    for entry in entries:
        offset = seg.base_offset + entry.relative_offset
        cuts.append(Cut(entry.position, offset, above))
        above = offset + 1
    first = max((i for i, c in enumerate(cuts) if offsets.start is not None and c.below <= offsets.start), default=0)
    last = min((i for i, c in enumerate(cuts) if i > first and offsets.end is not None and c.above >= offsets.end),
               default=len(cuts))
    end = seg.size if last == len(cuts) else cuts[last].position
    return [c.position for c in cuts[first:last]] + [end]


def _index(seg: Segment, next_base: int | None) -> list[OffsetEntry]:
    """The segment's offset index, or nothing when absent or inconsistent (then the segment is one
    split: a bad index only costs parallelism, never rows)."""
    if seg.index is None or seg.index.size < 8:
        return []
    try:
        entries = parse_offset_index(seg.index.path, storage.read_bytes(seg.index.path))
    except FormatError:
        return []
    positions = [0] + [e.position for e in entries] + [seg.size]
    offsets = [-1] + [e.relative_offset for e in entries]
    ordered = all(a < b for a, b in zip(positions, positions[1:])) and all(a < b for a, b in zip(offsets, offsets[1:]))
    fits = next_base is None or not entries or seg.base_offset + entries[-1].relative_offset < next_base
    return entries if ordered and fits else []


def _ranges(positions: list[int], max_bytes: int) -> list[tuple[int, int]]:
    """Consecutive ranges over the cut positions, each at most ``max_bytes`` unless one gap is larger."""
    out, start, prev = [], positions[0], positions[0]
    for pos in positions[1:]:
        if pos - start > max_bytes and prev > start:
            out.append((start, prev))
            start = prev
        prev = pos
    out.append((start, prev))
    return out
