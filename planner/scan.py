"""Gather one partition's facts for the rules, reading no more than the rules need.

Per partition: one listing; the last stable offset and log end offset from the
batch headers after the latest producer snapshot (the whole log when there is
none: Kafka replays the same way); the first batch of each dirty non-active
segment (max.compaction.lag.ms); the last time-index entry of dirty non-active
segments when min.compaction.lag.ms is set, and of every non-active segment when
retention.ms applies. Anything malformed, and any file that cannot be read
(``UNREADABLE``), becomes a problem on the partition's row, never an exception. Problems that make the
segment list or the log start
unreliable also stop retention (``retention_blockers``); an unreadable batch does
not (retention reads none). What a broker's load repairs or ignores (``logdir.broker_load``:
a missing index, an orphan index) is a note, planned as the broker would have it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from kcompact import storage
from kcompact.errors import FormatError
from kcompact.errors.failure import Failure, problem_kind
from kcompact.logdir import broker_load
from kcompact.logdir.broker_load import missing_indexes, rebuilds_time_index
from kcompact.logdir.listing import Partition, Segment, scan_partition, segment_name
from kcompact.planner.rules import SegmentFacts, dirty_non_active, first_dirty_offset
from kcompact.readers import snapshot, walk
from kcompact.readers.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL
from kcompact.readers.indexes import TIME_ENTRY, parse_time_index
from kcompact.readers.segment import DEFAULT_CHUNK, iter_batches, to_torn_tail
from kcompact.storage import FileInfo

_SNAPSHOT = re.compile(r"^(\d{20})\.snapshot$")
# a problem the planner met reading a file rather than in its bytes (its mode, an object store's
# refusal, an I/O error): the job fails the partition for it, but does not mark it uncleanable
# (``compaction.pipeline.job``): once the operator lets the job read the file, the next run cleans it
UNREADABLE = "unreadable (retried next run): "
_SMALL_CHUNK = 64 << 10  # first batches are small; do not fetch 8 MiB of an object to read one


@dataclass(slots=True)
class PartitionFacts:
    """Everything the rules need about one partition, plus what went wrong reading it."""

    partition: Partition
    segments: list[SegmentFacts] = field(default_factory=list)
    log_start: int = 0
    log_end: int = 0
    last_stable: int = 0
    problems: list[str] = field(default_factory=list)
    problem_kinds: list[Failure] = field(default_factory=list)  # each problem's kind, in the same order
    retention_blockers: list[str] = field(default_factory=list)  # the problems that also stop retention
    notes: list[str] = field(default_factory=list)  # what is worth saying but stops nothing (a torn tail)

    def add(self, problem: str, kind: Failure, retention: bool = False) -> None:
        """A problem of ``kind``; ``retention``: it also stops retention."""
        self.problems.append(problem)
        self.problem_kinds.append(kind)
        if retention:
            self.retention_blockers.append(problem)

    def fault(self) -> tuple[str, Failure] | None:
        """The first problem that fails this run's cleaning (a corrupt .log, a file it may not
        read) rather than only keeping the partition from it."""
        return next(((p, k) for p, k in zip(self.problems, self.problem_kinds)
                     if k in (Failure.CORRUPT, Failure.UNREADABLE)), None)


def gather(path: str, topic: str, number: int, *, checkpoint: int | None, log_start_checkpoint: int | None,
           min_lag_ms: int, replay: bool = True, retention_timestamps: bool = False, first_batches: bool = True,
           files: tuple[FileInfo, ...] | None = None, generations: tuple[int, int] | None = None) -> PartitionFacts:
    """``replay=False`` reads no batch (topics that are not compacted need none), except the active
    segment's when the log start checkpoint lies in it (is it beyond the log end?).
    ``retention_timestamps``: read the last time-index entry of every non-active segment (retention.ms).
    ``first_batches``: read the first batch of each dirty non-active segment (max.compaction.lag.ms;
    ``rules.first_batches_matter``). ``files``, ``generations``: the partition dir as the driver listed it
    (object stores), when it did."""
    try:
        if files is None:
            files, _ = storage.list_dir(path)
            part = scan_partition(path, topic, number, files)
        else:
            before, after = ({(topic, number): g} for g in generations)
            part = scan_partition(path, topic, number, list(files), before, after)
    except OSError as exc:  # the partition dir itself cannot be listed: nothing is known of it
        facts = PartitionFacts(Partition(topic, number, path))
        facts.add(unreadable_reason(exc, path), Failure.UNREADABLE, retention=True)
        return facts
    facts = PartitionFacts(part)
    for p in part.problems:
        facts.add(str(p), problem_kind(p.path, p.position), retention=True)
    facts.notes += [str(p) for p in part.notes]  # what a broker's load deletes or passes over (broker_load)
    for info in part.leftovers:
        facts.add(
            f"{info.path}: leftover of an interrupted swap (run kcompact recover)", Failure.BAD_INPUT, retention=True
        )
    facts.notes += _missing_indexes(part)
    if not part.segments:
        return facts
    first = part.segments[0].base_offset
    facts.log_start = max(log_start_checkpoint, first) if log_start_checkpoint is not None else first
    facts.segments = _bare(part.segments)
    first_stamps: dict[int, int] = {}
    dirty: set[int] = set()
    log_end_known = False
    if replay:
        snapshots = sorted(
            (int(m[1]), info.path) for info in files if (m := _SNAPSHOT.match(posixpath.basename(info.path)))
        )
        try:
            first_stamps = _replay(facts, snapshots)
            log_end_known = True
            first_dirty, _ = first_dirty_offset(checkpoint, facts.log_start, facts.log_end)
            dirty = {s.base_offset for s in dirty_non_active(facts.segments, first_dirty)}
        except (FormatError, OSError) as exc:  # unreadable batches stop compaction, not retention (it reads none)
            # unless the log end was needed
            facts.add(*_said(exc, path), retention=facts.log_start > part.segments[-1].base_offset)
    elif log_start_checkpoint is not None and log_start_checkpoint > part.segments[-1].base_offset:
        try:
            facts.log_end, log_end_known = _log_end_from(part.segments[-1], facts.log_start, facts.notes), True
        except (FormatError, OSError) as exc:  # the log start could not be checked against the log end
            facts.add(*_said(exc, path), retention=True)
    if log_end_known and facts.log_start > facts.log_end:
        # Kafka's LogLoader would delete every segment; we report and leave the partition alone
        beyond = (f"{path}: log start offset {facts.log_start} (log-start-offset-checkpoint) is beyond "
                  f"the log end offset {facts.log_end}")
        facts.add(beyond, Failure.BAD_INPUT, retention=True)
    wanted = {s.base_offset for s in part.segments[:-1]} if retention_timestamps else set()
    wanted |= dirty if min_lag_ms > 0 else set()
    largest: dict[int, int | None] = {}
    try:
        largest = {seg.base_offset: _largest_timestamp(seg) for seg in part.segments if seg.base_offset in wanted}
    except (FormatError, OSError) as exc:
        facts.add(*_said(exc, path), retention=True)
    firsts: dict[int, int | None] = {}
    try:
        firsts = {seg.base_offset: _first_batch_timestamp(seg, first_stamps) for seg in part.segments
                  if seg.base_offset in dirty and (first_batches or seg.base_offset in first_stamps)}
    except (FormatError, OSError) as exc:
        facts.add(*_said(exc, path))
    facts.segments = [
        SegmentFacts(seg.base_offset, seg.size, seg.log.mtime_ms, largest_timestamp=largest.get(seg.base_offset),
                     first_batch_timestamp=firsts.get(seg.base_offset))
        for seg in part.segments
    ]
    return facts


def unreadable_reason(exc: OSError, path: str) -> str:
    """A read error as a problem: ``UNREADABLE``, the file (its URL on an object store; ``path``
    when the error names none) and why."""
    return f"{UNREADABLE}{storage.describe_error(exc, path)}"


def _said(exc: FormatError | OSError, path: str) -> tuple[str, Failure]:
    if isinstance(exc, OSError):
        return unreadable_reason(exc, path), Failure.UNREADABLE
    return str(exc), problem_kind(exc.path, exc.position)


def _bare(segments: Iterable[Segment]) -> list[SegmentFacts]:
    return [SegmentFacts(s.base_offset, s.size, s.log.mtime_ms) for s in segments]


def _missing_indexes(part: Partition) -> list[str]:
    """What a broker does on load about a closed segment's missing index files (``broker_load``):
    it makes them up, so the partition is planned as a broker would have it, and cleaned (the
    cleaner writes new ones)."""
    return [f"{storage.join(part.path, segment_name(seg.base_offset, kind))}: {why}"
            for seg in part.segments[:-1]
            for kind, why in missing_indexes(seg.index is not None, seg.timeindex is not None).items()]


def _replay(facts: PartitionFacts, snapshots: list[tuple[int, str]]) -> dict[int, int]:
    """Replay batch headers after the latest snapshot: open transactions and the log end.
    Returns the max timestamp of each replayed segment's first batch (saves a re-read)."""
    segments = facts.partition.segments
    start_offset, open_txns = _from_snapshot(snapshots, segments[-1].base_offset)
    first_stamps: dict[int, int] = {}
    facts.log_end = segments[-1].base_offset
    before: tuple[int, int, str, int] | bool | None = None  # the last batch read: (first, last offset, file, byte)
    for i, seg in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start_offset:
            continue
        with storage.open_read(seg.log.path, seg.size) as f:
            for chunk in _chunks(f, seg, seg is segments[-1], facts.notes):
                e = chunk.entries
                first_stamps.setdefault(seg.base_offset, int(e[0, walk.MAX_TIMESTAMP]))
                last = e[:, walk.BASE_OFFSET] + e[:, walk.LAST_OFFSET_DELTA]
                before = _going_back(facts, seg.log.path, chunk, last, before)
                live = np.flatnonzero(last >= start_offset)
                if not len(live):
                    continue
                txn = live[(e[live, walk.MAGIC] == 2) & ((e[live, walk.ATTRIBUTES] & ATTR_TRANSACTIONAL) != 0)]
                for k in txn.tolist():  # a data batch opens (or continues) its producer's transaction; a marker ends it
                    pid = int(e[k, walk.PRODUCER_ID])
                    if e[k, walk.ATTRIBUTES] & ATTR_CONTROL:
                        open_txns.pop(pid, None)
                    else:
                        open_txns.setdefault(pid, int(e[k, walk.BASE_OFFSET]))
                facts.log_end = int(last[live[-1]]) + 1
    # LogSegment.readNextOffset: an empty active segment ends the log at its base offset, even when
    # the segment before it ends lower (its last batches removed by an older broker's cleaning)
    facts.log_end = max(facts.log_end, segments[-1].base_offset)
    facts.last_stable = min(open_txns.values(), default=facts.log_end)
    return first_stamps


def _going_back(facts: PartitionFacts, path: str, chunk: walk.Chunk, last: np.ndarray,
                before: tuple[int, int, str, int] | bool | None) -> tuple[int, int, str, int] | bool:
    """Offsets that go back (``broker_load.first_going_back``) in a chunk read by the replay, after
    the batch ``before`` it (None: the first chunk): a problem, said once (False is returned
    then, and stops the checks); else the chunk's last batch, for the next."""
    if before is False:
        return False
    e = chunk.entries
    k = broker_load.first_going_back(e[:, walk.BASE_OFFSET], last, -1 if before is None else before[1])
    if k is not None:
        at = f"{path}: byte {chunk.file_position + int(e[k, walk.POSITION])}"
        prev = before if k == 0 else (int(e[k - 1, walk.BASE_OFFSET]), int(last[k - 1]), path,
                                      chunk.file_position + int(e[k - 1, walk.POSITION]))
        said = broker_load.going_back(at, (int(e[k, walk.BASE_OFFSET]), int(last[k])), f"byte {prev[3]} of {prev[2]}",
                                      prev[:2])
        facts.add(said, Failure.BAD_INPUT, retention=True)
        return False
    return int(e[-1, walk.BASE_OFFSET]), int(last[-1]), path, chunk.file_position + int(e[-1, walk.POSITION])


def _chunks(f, seg: Segment, active: bool, notes: list[str]):
    """A segment's batch headers, a chunk at a time (``readers.walk``, CRCs checked); the active
    one's up to a torn tail (what a broker crash leaves: the log ends before it, and ``kcompact
    recover`` truncates it as the broker does on load), noted."""
    chunks = walk.read_chunks(f, seg.log.path, chunk_size=_chunk(seg.size))
    return to_torn_tail(chunks, f, seg.log.path, lambda tail: notes.append(_torn_note(tail))) if active else chunks


def _torn_note(tail: FormatError) -> str:
    return (f"{tail}: a torn tail of the active segment, what a broker crash leaves (the log ends before it; "
            "'kcompact recover' truncates it as a restarting broker would)")


def _log_end_from(active: Segment, at_least: int, notes: list[str]) -> int:
    """The log end offset as far as needed: the active segment's batches are read until one ends
    at or beyond ``at_least`` (then the log end is not below it), else to the end of the segment."""
    log_end = active.base_offset
    with storage.open_read(active.log.path, active.size) as f:
        batches = iter_batches(f, active.log.path, chunk_size=_chunk(active.size))
        for batch in to_torn_tail(batches, f, active.log.path, lambda tail: notes.append(_torn_note(tail))):
            log_end = batch.next_offset
            if log_end >= at_least:
                break
    return log_end


def _chunk(size: int) -> int:
    """Reads no larger than the segment (as listed): each read allocates its full size, and 8 MiB
    for a segment of a few KiB costs more than reading it."""
    return min(DEFAULT_CHUNK, max(size + 1, _SMALL_CHUNK))


def _from_snapshot(snapshots: list[tuple[int, str]], active_base: int) -> tuple[int, dict[int, int]]:
    """Where replay starts and the transactions open there (from the latest usable snapshot)."""
    for offset, path in reversed(snapshots):
        if offset > active_base:
            continue  # a snapshot inside the active segment: replay from the segment start anyway
        entries = snapshot.parse(path, storage.read_bytes(path))
        return offset, {e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0}
    return -1, {}


def _first_batch_timestamp(seg: Segment, known: dict[int, int]) -> int | None:
    if seg.base_offset in known:
        return known[seg.base_offset]
    with storage.open_read(seg.log.path, seg.size) as f:
        for batch in iter_batches(f, seg.log.path, end=1, chunk_size=_SMALL_CHUNK):
            return batch.max_timestamp
    return None


def _largest_timestamp(seg: Segment) -> int | None:
    """The last time-index entry; a zero-filled tail (preallocation) means reading the whole file.
    A segment whose time index a broker rebuilds on load (``broker_load``): its batches' largest."""
    if rebuilds_time_index(seg.index is not None):
        with storage.open_read(seg.log.path, seg.size) as f:
            return max((b.max_timestamp for b in iter_batches(f, seg.log.path, chunk_size=_chunk(seg.size))),
                       default=None)
    info = seg.timeindex
    if info is None or info.size < TIME_ENTRY.size:
        return None
    tail = storage.read_range(info.path, info.size - TIME_ENTRY.size, info.size)
    if any(tail):
        return TIME_ENTRY.unpack(tail)[0]
    entries = parse_time_index(info.path, storage.read_bytes(info.path))
    return entries[-1].timestamp if entries else None
