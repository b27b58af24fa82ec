"""``kcompact verify``: check a log dir against every invariant a broker relies on.

Nothing is repaired and nothing stops at the first fault: each finding is listed
with its file and, wherever one exists, the byte position, so a bad segment can
be found with a hex editor. Framing errors end the reading of one ``.log`` (its
entries cannot be located past them); CRC and codec errors do not, since the
framing around them is intact.

A finding is a ``Problem`` when a Kafka 3.x broker would refuse it, truncate it or
lose data on it (a bad CRC, a torn batch outside the active tail, an index entry
outside its segment, a malformed checkpoint); it is a ``Note`` when a broker
accepts the state and repairs it on its own: its cleaner resets a checkpoint entry
outside the log (LogCleanerManager.cleanableOffsets), its load completes or deletes
swap leftovers and orphaned index files and rebuilds a missing offset index
(LogLoader), its recovery after a crash truncates the torn tail of the active
segment (LogSegment.recover). Notes never fail ``verify`` unless ``--strict``. A file that
this process may not read (its mode, an object store's refusal) is a problem too: a broker cannot
load it either.
"""

from __future__ import annotations

import bisect
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TextIO

from kcompact import storage
from kcompact.errors import EXIT_OK, EXIT_PROBLEMS, FormatError, Problem
from kcompact.logdir.broker_load import LEFTOVER_MEANING, missing_indexes, unreadable_checkpoint
from kcompact.logdir.listing import LogDir, Partition, Segment, scan_log_dir, segment_name
from kcompact.readers import checkpoint, codecs
from kcompact.readers.batch import NO_TIMESTAMP, Batch
from kcompact.readers.indexes import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    TXN_ENTRY,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
)
from kcompact.readers.records import Record
from kcompact.readers.segment import iter_batches, problems, torn_tail

MAX_RELATIVE_OFFSET = 0x7FFFFFFF  # index entries store offset - base offset as an int32
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"  # a broker that finds it in a log dir skips recovery (LogLoader.recoverLog)


@dataclass(frozen=True, slots=True)
class Note(Problem):
    """A finding a broker accepts and repairs by itself: listed, but ``verify`` passes
    unless ``--strict``. Printed after the problems, each line starting with ``note: ``."""

    def __str__(self) -> str:
        return f"note: {Problem.__str__(self)}"


def _note(found: Problem, what: str | None = None) -> Note:
    return Note(found.path, found.position, found.what if what is None else what)


def split(found: list[Problem]) -> tuple[list[Problem], list[Note]]:
    """The problems and the notes of ``verify_log_dir``'s findings, each in their order."""
    return [p for p in found if not isinstance(p, Note)], [p for p in found if isinstance(p, Note)]


def unreadable_problem(path: str, exc: PermissionError) -> Problem:
    """A file this process may not read (its mode, an object store's refusal: an archived object,
    a policy), as a problem. Other OSErrors (a path that is not there) are the command's."""
    said = storage.describe_error(exc, path)
    return Problem(path, None, f"cannot be read: {said.removeprefix(f'{path}: ')}")


def run_verify(path: str, strict: bool, out: TextIO, err: TextIO, as_json: bool = False) -> int:
    """``kcompact verify``: the problems, then the notes (``summarized``), then the counts of both;
    1 when there is a problem (or, with ``strict``, a note), else 0. ``as_json``: one JSON
    document holding every finding instead."""
    problems, notes = split(verify_log_dir(path))
    failed = bool(problems or (strict and notes))
    if as_json:
        def said(p: Problem) -> dict:
            return {"path": p.path, "position": p.position, "what": p.what}
        json.dump({"log_dir": path, "ok": not failed, "strict": strict, "problems": [said(p) for p in problems],
                   "notes": [said(n) for n in notes]}, out)
        out.write("\n")
        return EXIT_PROBLEMS if failed else EXIT_OK
    for line in [str(p) for p in problems] + summarized(notes):
        print(line, file=out)
    counts = f"{len(problems)} problem(s), {len(notes)} note(s)"
    if failed:
        print(f"{counts} found in {path}" + ("" if problems else " (--strict: notes count)"), file=err)
        return EXIT_PROBLEMS
    print(f"{path}: OK ({counts}{': what the notes say, Kafka accepts and repairs' if notes else ''})", file=out)
    return EXIT_OK


REPEATED = 3  # more notes than this of one kind in one directory are said in one line


def summarized(notes: list[Note]) -> list[str]:
    """One line per note, except that the notes of one directory that say the same of more than
    ``REPEATED`` files (thousands of ``.cleaned`` leftovers after a kill) are one line, in the
    place of the first: how many, the first and last file, and what they say."""
    groups: dict[tuple[str, str], list[Note]] = {}
    for n in notes:
        if n.position is None:  # a note of a file as a whole
            groups.setdefault((posixpath.dirname(n.path), n.what), []).append(n)
    lines = []
    for n in notes:
        group = groups.get((posixpath.dirname(n.path), n.what), []) if n.position is None else []
        if len(group) <= REPEATED:
            lines.append(str(n))
        elif n is group[0]:
            names = sorted(posixpath.basename(g.path) for g in group)
            lines.append(f"note: {posixpath.dirname(n.path)}: {len(group)} files ({names[0]} ... {names[-1]}): "
                         f"{n.what}")
    return lines


@dataclass(slots=True)
class SegmentSummary:
    """What the index checks need from a ``.log``: where batches start and which offsets they end at."""

    base_offset: int
    last_offset: int  # base_offset - 1 while no batch was read
    max_timestamp: int = NO_TIMESTAMP
    positions: list[int] = field(default_factory=list)
    last_offsets: list[int] = field(default_factory=list)
    unreadable: bool = False  # the .log could not be read: nothing to check its indexes against


def verify_log_dir(path: str) -> list[Problem]:
    """Every finding, in the order met: ``Problem``s and ``Note``s (a subclass; see ``split``)."""
    logdir = scan_log_dir(path)
    found = list(logdir.problems)  # a foreign directory, an empty meta.properties: a broker does not start
    clean_shutdown = storage.kind(storage.join(logdir.path, CLEAN_SHUTDOWN)) is not None
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    for part in logdir.partitions:
        found += check_partition(part, ends, clean_shutdown)
    found += check_checkpoints(logdir, ends)
    return found


def check_partition(part: Partition, ends: dict[tuple[str, int], tuple[int, int]] | None = None,
                    clean_shutdown: bool = False) -> list[Problem]:
    """Every finding of one partition; ``ends`` gets its (first base offset, log end offset).
    ``clean_shutdown``: the log dir holds a broker's clean-shutdown marker (no recovery on load)."""
    found = list(part.problems) + [_note(p) for p in part.notes]
    for info in part.leftovers:
        suffix = posixpath.splitext(info.path)[1]
        found.append(Note(info.path, None, LEFTOVER_MEANING[suffix]))
    prev_last = -1
    for i, seg in enumerate(part.segments):
        active = seg is part.active
        next_base = None if active else part.segments[i + 1].base_offset
        summary, seg_found = check_log(seg, prev_last, next_base)
        found += _torn_tail_said(seg, seg_found, clean_shutdown) if active and seg_found else seg_found
        found += [] if summary.unreadable else check_indexes(part, seg, summary, active)
        prev_last = max(prev_last, summary.last_offset)
    if ends is not None and part.segments:
        # the log end: past the last batch read, and never below the active segment's base offset
        ends[(part.topic, part.partition)] = (part.segments[0].base_offset,
                                              max(prev_last + 1, part.segments[-1].base_offset))
    return found


TORN_TAIL = ("a torn tail of the active segment, what a broker crash leaves: 'kcompact recover' truncates it "
             "as a restarting broker would")
TORN_TAIL_KEPT = (f"a torn tail of the active segment, but the log dir holds {CLEAN_SHUTDOWN}: a broker loading it "
                  "skips recovery, keeps these bytes and appends after them; 'kcompact recover' truncates it")
TAIL_NOT_TORN = ("at the end of the active segment, but no interrupted append leaves this: a restarting broker "
                 "truncates the segment here, and so does 'kcompact recover', losing whatever follows")
# what an append cut short by a crash leaves, in readers.segment's words: an entry or header running past the end of
# the file, zeros (preallocated, or never written), or a last batch whose bytes did not all reach the disk
INTERRUPTED_APPEND = ("torn batch: ", "torn tail: ", "zero-filled bytes ", "batch at offset ")


def _torn_tail_said(seg: Segment, found: list[Problem], clean_shutdown: bool = False) -> list[Problem]:
    """The active segment's findings, the one that starts a torn tail saying so (and the way out).
    A broker restarting after a crash truncates the segment at its first invalid entry
    (LogSegment.recover). When that tail is what an interrupted append leaves, the truncation
    loses no complete batch, only bytes whose write the crash cut short: everything from there on
    is a note. Not when the broker shut down cleanly (it does not recover the log then), nor when
    the tail starts with an entry no append leaves (an unknown magic, a length below the minimum):
    complete batches may follow it, and the broker would lose them."""
    try:
        with storage.open_read(seg.log.path) as f:
            tail = torn_tail(f, seg.log.path)
    except PermissionError:  # check_log said so
        return found
    if tail is None:
        return found
    if not tail.what.startswith(INTERRUPTED_APPEND):
        why, note = TAIL_NOT_TORN, False
    else:
        why, note = (TORN_TAIL_KEPT, False) if clean_shutdown else (TORN_TAIL, True)
    said = []
    for p in found:
        if p.path != tail.path or p.position is None or p.position < tail.position:
            said.append(p)
            continue
        what = f"{p.what} ({why})" if p.position == tail.position else p.what
        said.append(Note(p.path, p.position, what) if note else Problem(p.path, p.position, what))
    return said


# -- the .log -------------------------------------------------------------------------
def check_log(seg: Segment, prev_last: int, next_base: int | None) -> tuple[SegmentSummary, list[Problem]]:
    """Read every entry of the segment; ``prev_last`` is the last offset of earlier segments."""
    path = seg.log.path
    summary = SegmentSummary(seg.base_offset, seg.base_offset - 1)
    found = []  # an empty segment is no fault: Kafka's cleaner leaves one when a group loses every batch
    try:
        with storage.open_read(path) as f:
            for batch in iter_batches(f, path, strict=False):
                records, batch_found = check_batch(batch)
                first = _first_offset(batch, records)
                found += batch_found
                found += _check_offsets(batch, first, prev_last, seg.base_offset, next_base)
                prev_last = batch.last_offset
                _summarize(summary, batch)
    except FormatError as exc:
        found.append(Problem.of(exc))
    except PermissionError as exc:
        found.append(unreadable_problem(path, exc))
        summary.unreadable = True
    return summary, found


def check_batch(batch: Batch) -> tuple[list[Record] | None, list[Problem]]:
    """CRC, codec and header counts, then the records themselves (decompressed and walked)."""
    found = [Problem(batch.path, batch.position, f"batch at offset {batch.base_offset_field}: {what}")
             for what in problems(batch)]
    if batch.codec not in codecs.NAMES:
        return None, found  # already reported; nothing to decode with
    try:
        records = batch.records()
    except FormatError as exc:
        return None, found + [Problem.of(exc)]
    return records, found + _check_record_offsets(batch, records)


def _check_record_offsets(batch: Batch, records: list[Record]) -> list[Problem]:
    """Record offsets strictly increase and stay inside the batch's [base, last] range."""
    low, high = _first_offset(batch, records), batch.last_offset
    prev = low - 1
    for record in records:
        if not prev < record.offset <= high:
            return [Problem(batch.path, batch.position,
                            f"batch at offset {batch.base_offset_field}: record offset {record.offset} "
                            f"breaks the batch's increasing range {low}..{high} (previous {prev})")]
        prev = record.offset
    return []


def _first_offset(batch: Batch, records: list[Record] | None) -> int:
    """v2: the header's base offset; a legacy wrapper's header holds its LAST inner offset."""
    if batch.magic == 2 or not records:
        return batch.base_offset_field
    return records[0].offset


def _check_offsets(batch: Batch, first: int, prev_last: int, base: int, next_base: int | None) -> list[Problem]:
    last = batch.last_offset
    where = f"batch at offset {batch.base_offset_field}"
    checks = [
        (first > prev_last, f"{where}: offsets {first}..{last} do not follow the previous last offset {prev_last}"),
        (first >= base, f"{where}: offset {first} is below the segment's base offset {base} (from its name)"),
        (last - base <= MAX_RELATIVE_OFFSET,
         f"{where}: last offset {last} is too far past base offset {base} for the indexes"),
        (next_base is None or last < next_base,
         f"{where}: last offset {last} reaches the next segment's base offset {next_base}"),
    ]
    return [Problem(batch.path, batch.position, what) for ok, what in checks if not ok]


def _summarize(summary: SegmentSummary, batch: Batch) -> None:
    summary.positions.append(batch.position)
    summary.last_offsets.append(batch.last_offset)
    summary.last_offset = max(summary.last_offset, batch.last_offset)
    summary.max_timestamp = max(summary.max_timestamp, batch.max_timestamp)


# -- the three indexes -----------------------------------------------------------------
IndexCheck = Callable[[str, bytes, SegmentSummary], list[Problem]]


def check_indexes(part: Partition, seg: Segment, summary: SegmentSummary, active: bool) -> list[Problem]:
    """A closed segment should have its offset and time index (a broker makes up for either, so
    their absence is a note); a txnindex is optional. What is in them is checked: a broker does
    not check them on load (LogSegment.sanityCheck skips the offset and time index) but serves
    reads and retention from them, so a bad entry is a problem."""
    checks: dict[str, IndexCheck] = {
        "index": check_offset_index,
        "timeindex": partial(check_time_index, closed=not active),
        "txnindex": check_txn_index,
    }
    found: list[Problem] = []
    for kind, check in checks.items():
        info = getattr(seg, kind)
        if info is not None:
            found += _parsed(info.path, check, summary)
        elif kind != "txnindex" and not active:
            why = missing_indexes(seg.index is not None, seg.timeindex is not None)[kind]
            found.append(Note(storage.join(part.path, segment_name(seg.base_offset, kind)), None, why))
    return found


def _parsed(path: str, check: IndexCheck, summary: SegmentSummary) -> list[Problem]:
    try:
        return check(path, storage.read_bytes(path), summary)
    except FormatError as exc:
        return [Problem.of(exc)]
    except PermissionError as exc:
        return [unreadable_problem(path, exc)]


def check_offset_index(path: str, data: bytes, summary: SegmentSummary) -> list[Problem]:
    """Entries strictly increase, lie in the segment, point at batch starts, and at or before their offset."""
    found = []
    prev = None
    for i, entry in enumerate(parse_offset_index(path, data)):
        at, offset = i * OFFSET_ENTRY.size, summary.base_offset + entry.relative_offset
        if prev is not None and (entry.relative_offset <= prev.relative_offset or entry.position <= prev.position):
            found.append(Problem(path, at, f"entry (offset {offset}, position {entry.position}) does not strictly "
                                           f"follow (offset {summary.base_offset + prev.relative_offset}, "
                                           f"position {prev.position})"))
        prev = entry
        if not _in_segment(entry.relative_offset, offset, summary):
            found.append(Problem(path, at, _outside(offset, summary)))
            continue
        k = bisect.bisect_left(summary.positions, entry.position)
        if k == len(summary.positions) or summary.positions[k] != entry.position:
            found.append(Problem(path, at, f"position {entry.position} (offset {offset}) is not the start of a batch"))
            continue
        holder = bisect.bisect_left(summary.last_offsets, offset)
        if holder < len(summary.positions) and summary.positions[holder] < entry.position:
            found.append(Problem(path, at, f"offset {offset} is in the batch at position {summary.positions[holder]}, "
                                           f"before the entry's position {entry.position}"))
    return found


def check_time_index(path: str, data: bytes, summary: SegmentSummary, closed: bool) -> list[Problem]:
    """Timestamps strictly increase, offsets never decrease; a closed segment's last entry
    holds its largest timestamp (time-based retention reads it there)."""
    found = []
    entries = parse_time_index(path, data)
    prev = None
    for i, entry in enumerate(entries):
        at, offset = i * TIME_ENTRY.size, summary.base_offset + entry.relative_offset
        if prev is not None and entry.timestamp <= prev.timestamp:
            found.append(Problem(path, at, f"timestamp {entry.timestamp} does not increase on {prev.timestamp}"))
        if prev is not None and entry.relative_offset < prev.relative_offset:
            found.append(Problem(path, at, f"offset {offset} decreases from "
                                           f"{summary.base_offset + prev.relative_offset}"))
        if not _in_segment(entry.relative_offset, offset, summary):
            found.append(Problem(path, at, _outside(offset, summary)))
        prev = entry
    if not closed or summary.max_timestamp == NO_TIMESTAMP:
        return found
    if not entries:  # what a broker leaves when it had to create the file (logdir.broker_load.MISSING): it accepts it
        found.append(Note(path, None, f"no entry for the segment's largest timestamp {summary.max_timestamp}: a "
                                      "broker goes by the .log's modification time instead"))
    elif entries[-1].timestamp != summary.max_timestamp:  # Kafka loads it as it is (sanityCheck skips it)
        found.append(Note(path, (len(entries) - 1) * TIME_ENTRY.size,
                          f"last entry's timestamp {entries[-1].timestamp} is not the segment's largest timestamp "
                          f"{summary.max_timestamp}: a broker loads it as it is and goes by the entry for time "
                          "retention"))
    return found


def check_txn_index(path: str, data: bytes, summary: SegmentSummary) -> list[Problem]:
    """An aborted transaction ends (its ABORT marker) within or before the segment."""
    found = []
    for i, txn in enumerate(parse_txn_index(path, data)):
        at = i * TXN_ENTRY.size
        if txn.first_offset > txn.last_offset:
            found.append(Problem(path, at, f"producer {txn.producer_id}: first offset {txn.first_offset} "
                                           f"is after last offset {txn.last_offset}"))
        if txn.last_offset > summary.last_offset:
            found.append(Problem(path, at, f"producer {txn.producer_id}: last offset {txn.last_offset} is after "
                                           f"the segment's last offset {summary.last_offset}"))
    return found


def _in_segment(relative: int, offset: int, summary: SegmentSummary) -> bool:
    return relative >= 0 and offset <= summary.last_offset


def _outside(offset: int, summary: SegmentSummary) -> str:
    return f"offset {offset} lies outside the segment's offsets {summary.base_offset}..{summary.last_offset}"


# -- checkpoints -------------------------------------------------------------------------
def check_checkpoints(logdir: LogDir, ends: dict[tuple[str, int], tuple[int, int]] | None = None) -> list[Problem]:
    """Each checkpoint parses (a broker that cannot read one takes the whole log dir offline:
    a problem); the cleaner's names only partitions that exist, at an offset inside their log.
    Those two are notes: Kafka's cleaner drops the entries of partitions it does not hold the next
    time it writes the file (updateCheckpoints), and takes an entry below the log start or past the
    log end for a log truncated or rebuilt under it (an unclean leader election leaves one), resets
    it to the log start and cleans the whole log from there (cleanableOffsets)."""
    live = {(p.topic, p.partition) for p in logdir.partitions}
    found, parsed, lines = [], {}, {}  # lines: the cleaner checkpoint's entry positions
    for name, path in sorted(logdir.checkpoints.items()):
        try:
            text = storage.read_bytes(path)
            parsed[name] = checkpoint.parse(path, text)
        except FormatError as exc:
            refused, outcome = unreadable_checkpoint(name, exc)  # offline, or reset on load
            said = Problem(exc.path, exc.position, f"{exc.what}: {outcome}")
            found.append(said if refused else _note(said))
            continue
        except PermissionError as exc:
            found.append(unreadable_problem(path, exc))
            continue
        if name != checkpoint.CLEANER_OFFSET:
            continue
        lines = _line_positions(text)
        found += [Note(path, lines[key], f"entry for {key[0]}-{key[1]}, which has no partition directory: Kafka's "
                                         "cleaner drops it")
                  for key in parsed[name] if key not in live]
    if ends is None or checkpoint.CLEANER_OFFSET not in parsed:
        return found
    path = logdir.checkpoints[checkpoint.CLEANER_OFFSET]
    starts = parsed.get(checkpoint.LOG_START_OFFSET, {})
    for key, offset in parsed[checkpoint.CLEANER_OFFSET].items():
        if key not in ends:
            continue
        first, log_end = ends[key]
        log_start = max(starts.get(key, first), first)
        entry = f"entry {key[0]} {key[1]} {offset}"
        span = f"{key[0]}-{key[1]} holds offsets [{log_start}, {log_end})"
        if offset > log_end:
            found.append(Note(path, lines[key], f"{entry} is past the log end offset {log_end} ({span}); Kafka's "
                                                "cleaner ignores it and cleans the whole log from its start"))
        elif offset < log_start:
            found.append(Note(path, lines[key], f"{entry} is below the log start offset {log_start} ({span}); "
                                                "Kafka's cleaner ignores it and cleans the whole log from its start"))
    return found


def _line_positions(text: bytes) -> dict[tuple[str, int], int]:
    """Byte position of each entry's line (its last, when repeated) in a checkpoint that parsed."""
    return {key: at for at, key, _ in checkpoint.entries("", text)}
