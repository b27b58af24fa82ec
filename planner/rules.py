"""Kafka's rules for what to clean (LogCleanerManager), as pure functions of a partition's facts.

Nothing here reads a file: the scan gathers the facts (segment sizes, last
time-index entries, first-batch timestamps, checkpoints, the last stable
offset) and these functions turn them into the decision Kafka would make.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from kcompact.conf.settings import LONG_MAX

LAST_STABLE, ACTIVE_SEGMENT, MIN_LAG = "last stable offset", "active segment", "min.compaction.lag.ms"


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    base_offset: int
    size: int
    mtime_ms: int
    largest_timestamp: int | None = None  # last .timeindex entry's timestamp (None: not read)
    first_batch_timestamp: int | None = None  # max timestamp of the first batch (None: not read)


@dataclass(frozen=True, slots=True)
class Decision:
    first_dirty_offset: int
    checkpoint_reset: str | None
    first_uncleanable_dirty_offset: int
    uncleanable_bound: str
    clean_bytes: int
    cleanable_bytes: int
    cleanable_ratio: float
    max_compaction_delay_ms: int
    need_compaction_now: bool
    cleanable: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes


def ratio_text(ratio: float, threshold: float | None = None) -> str:
    """A cleanable ratio to 3 decimals, with more where 3 would make it read as its threshold
    (min.cleanable.dirty.ratio) when it is not: Kafka cleans when ratio > threshold, so 0.4996
    must not read 0.500 beside "skipped"."""
    for places in range(3, 10):
        text = f"{ratio:.{places}f}"
        if threshold is None or float(text) != threshold or ratio == threshold:
            return text
    return repr(ratio)


def first_dirty_offset(checkpoint: int | None, log_start: int, log_end: int) -> tuple[int, str | None]:
    """The cleaner checkpoint, or the log start when it is missing or out of range (and why)."""
    if checkpoint is None:
        return log_start, "no checkpoint entry"
    if checkpoint < log_start:
        return log_start, f"checkpoint {checkpoint} below log start {log_start}"
    if checkpoint > log_end:
        return log_start, f"checkpoint {checkpoint} above log end {log_end}"
    return checkpoint, None


def floor_index(segments: Sequence[SegmentFacts], offset: int) -> int:
    """Index of the segment holding ``offset`` (the last one whose base <= offset), -1 if none."""
    return bisect.bisect_right([s.base_offset for s in segments], offset) - 1


def dirty_non_active(segments: Sequence[SegmentFacts], first_dirty: int) -> Sequence[SegmentFacts]:
    """Segments from the one holding ``first_dirty`` up to, not including, the active one."""
    return segments[max(floor_index(segments, first_dirty), 0) : len(segments) - 1]


def largest_timestamp(segment: SegmentFacts) -> int:
    """LogSegment.largestTimestamp: the time index's max, else the file's modification time."""
    ts = segment.largest_timestamp
    return ts if ts is not None and ts >= 0 else segment.mtime_ms


def first_uncleanable(
    segments: Sequence[SegmentFacts], first_dirty: int, last_stable: int, min_lag_ms: int, now: int
) -> tuple[int, str]:
    """The bound of the cleanable range (before rounding to a segment) and which rule set it."""
    candidates = [(last_stable, LAST_STABLE), (segments[-1].base_offset, ACTIVE_SEGMENT)]
    if min_lag_ms > 0:
        for seg in dirty_non_active(segments, first_dirty):
            if largest_timestamp(seg) > now - min_lag_ms:
                candidates.append((seg.base_offset, MIN_LAG))
                break
    offset, why = min(candidates, key=lambda c: c[0])
    return max(first_dirty, offset), why


def round_to_segment(segments: Sequence[SegmentFacts], offset: int) -> int:
    """Base offset of the non-active segment holding ``offset``, else the active segment's."""
    i = floor_index(segments, offset)
    return segments[i].base_offset if 0 <= i < len(segments) - 1 else segments[-1].base_offset


def bytes_between(segments: Sequence[SegmentFacts], start: int, end: int) -> int:
    """Sizes of the segments overlapping [start, end): from the one holding ``start`` to bases < end."""
    if start >= end:
        return 0
    first = max(floor_index(segments, start), 0)
    return sum(s.size for s in segments[first:] if s.base_offset < end)


def first_batches_matter(max_lag_ms: int, now: int) -> bool:
    """Whether a dirty segment's first batch can make a partition due (``max_compaction_delay``,
    LogCleanerManager.maxCompactionDelay): only a timestamp before ``now - max.compaction.lag.ms``
    does, and the timestamps it counts are positive. With the default lag (Long.MAX_VALUE) none
    can, and the planner reads no first batch for it."""
    return now - max(max_lag_ms, 0) > 1


def max_compaction_delay(segments: Sequence[SegmentFacts], first_dirty: int, max_lag_ms: int, now: int) -> int:
    """How far past max.compaction.lag.ms the oldest dirty first batch is (0: not yet)."""
    stamps = [s.first_batch_timestamp for s in dirty_non_active(segments, first_dirty)
              if s.first_batch_timestamp is not None and s.first_batch_timestamp > 0]
    earliest = min(stamps, default=LONG_MAX)
    clean_until = now - max(max_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def decide(
    segments: Sequence[SegmentFacts],
    *,
    log_start: int,
    log_end: int,
    checkpoint: int | None,
    last_stable: int,
    min_lag_ms: int,
    max_lag_ms: int,
    min_cleanable_ratio: float,
    now: int,
) -> Decision:
    """Kafka's full decision for one partition with at least one segment."""
    first_dirty, reset = first_dirty_offset(checkpoint, log_start, log_end)
    bound, why = first_uncleanable(segments, first_dirty, last_stable, min_lag_ms, now)
    uncleanable = round_to_segment(segments, bound)
    clean = bytes_between(segments, -1, first_dirty)
    cleanable = bytes_between(segments, min(first_dirty, uncleanable), uncleanable)
    total = clean + cleanable
    ratio = cleanable / total if total else 0.0
    delay = max_compaction_delay(segments, first_dirty, max_lag_ms, now)
    need_now = delay > 0
    return Decision(
        first_dirty_offset=first_dirty,
        checkpoint_reset=reset,
        first_uncleanable_dirty_offset=uncleanable,
        uncleanable_bound=why,
        clean_bytes=clean,
        cleanable_bytes=cleanable,
        cleanable_ratio=ratio,
        max_compaction_delay_ms=delay,
        need_compaction_now=need_now,
        cleanable=(need_now and cleanable > 0) or ratio > min_cleanable_ratio,
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """What ranking needs of a partition that passed every other rule."""

    key: str
    cleanable_ratio: float
    cleanable_bytes: int
    topic: str
    partition: int


def rank(
    candidates: Sequence[Candidate], top: int | None = None, max_bytes: int | None = None
) -> dict[str, tuple[int, str | None]]:
    """Rank by cleanable ratio, highest first (Kafka cleans the filthiest log first), then fill the
    run's budgets greedily in rank order, as Kafka cleans the filthiest log it can: a partition is
    selected while fewer than ``top`` are and its cleanable bytes fit in what ``max_bytes`` leaves;
    one too large is passed over, and the partitions after it still get their turn, so one huge
    partition cannot starve the others night after night. Returns key -> (rank, why it was left
    out, or None)."""
    ordered = sorted(candidates, key=lambda c: (-c.cleanable_ratio, -c.cleanable_bytes, c.topic, c.partition))
    out, used, chosen = {}, 0, 0
    for i, c in enumerate(ordered, start=1):
        reason = None
        if top is not None and chosen >= top:
            reason = f"over budget: --top {top} (as many partitions ranked higher are selected)"
        elif max_bytes is not None and used + c.cleanable_bytes > max_bytes:
            reason = (f"over budget: --max-bytes {max_bytes} (its {c.cleanable_bytes} cleanable bytes do not fit "
                      f"in the {max_bytes - used} left)")
        else:
            used += c.cleanable_bytes
            chosen += 1
        out[c.key] = (i, reason)
    return out
