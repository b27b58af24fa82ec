"""The commit step: the one place that chooses how a partition's change is made visible, for the
compaction job and for retention alike.

On a local disk a rename is atomic, so a change is made of renames that a broker loading the dir
finishes or undoes after a crash: a compaction by Kafka's swap (``operations.swap``), many
partitions of a log dir in one wave, then their cleaner checkpoint entries moved in one write
(``commit_wave``); a retention by renaming the deleted segments' files
to ``.deleted``, its checkpoints moved by the caller once the log dir's partitions are done. On an
object store a rename is a copy and a delete, so a crash between two would leave a mix: there one
commit record, created by a conditional PUT that exactly one writer wins, decides
(``operations.s3commit``), and its apply moves the checkpoint entries too.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kcompact import storage
from kcompact.logdir.listing import SEGMENT_KINDS, Segment, scan_partition, segment_name
from kcompact.operations import critical, s3commit, swap
from kcompact.operations.checkpoints import update_cleaner_offsets
from kcompact.operations.cleaned import WrittenGroup

WAVE = 2048  # the most partitions of a local log dir committed in one wave (``commit_wave``)


def by_record(path: str) -> bool:
    """Whether a change under ``path`` (a log dir or a partition dir) is committed by a commit
    record, which moves the checkpoints itself (object stores), rather than by renames (local disk)."""
    return not storage.is_local_path(path)


class Wave:
    """Commits made one after another whose object-store applies finish together, per log dir
    (``s3commit.finish``): a few requests for all of them where each alone would send its own
    deletes and checkpoint write. Each partition is committed, and its readers see it, once its
    record exists; what ``finish`` leaves undone (an error) recovery finishes."""

    def __init__(self) -> None:
        self._applying: dict[str, list[s3commit.Applying]] = {}
        self._lock = threading.Lock()  # commits of a batch add theirs at once

    def add(self, applying: s3commit.Applying) -> None:
        with self._lock:
            self._applying.setdefault(applying.log_dir, []).append(applying)

    def finish(self) -> dict[str, OSError]:
        """Finish every apply; the error of each log dir whose applies did not all finish."""
        failed = {}
        for log_dir, applying in self._applying.items():
            try:
                with critical.section():
                    s3commit.finish(log_dir, applying)
            except OSError as exc:
                failed[log_dir] = exc
        self._applying.clear()
        return failed


def commit_cleaned(log_dir: str, partition_dir: str, topic: str, partition: int, written: Sequence[WrittenGroup],
                   read: Sequence[int], end: int, owner: str, seen: int | None, wave: Wave | None = None) -> None:
    """On an object store, put a partition's cleaned groups ``written`` in place of the segments the
    job ``read`` (their base offsets), all of them or none, and set its cleaner checkpoint entry
    to ``end`` (the commit deletes what it replaces); local partitions are committed by
    ``commit_wave``. ``owner``: the job's lease owner; ``seen``: the latest commit record
    generation seen under its lease. Raises ``errors.CommitLost`` when another writer committed
    the partition first. A signal that stops the command waits for the partition's commit to
    end (``operations.critical``). ``wave``: the apply is finished with the wave's (else at once)."""
    with critical.section():
        replaced = [segment_name(base, kind) for base in read for kind in SEGMENT_KINDS]
        staged = [path for group in written for path in group.files]
        record = s3commit.plan_record(topic, partition, seen + 1, owner, staged, replaced, end)
        applying = s3commit.commit_record(log_dir, partition_dir, record)
        if wave is None:
            s3commit.finish(log_dir, [applying])
        else:
            wave.add(applying)


@dataclass(frozen=True, slots=True)
class LocalCommit:
    """One partition of a local wave: its cleaned groups ``written``, its checkpoint entry's new
    value ``end``, and the segments below ``end`` as listed before the wave (None: listed by the
    wave)."""

    partition_dir: str
    topic: str
    partition: int
    written: Sequence[WrittenGroup]
    end: int
    replaced: Sequence[Segment] | None = None


def commit_wave(log_dir: str, commits: Sequence[LocalCommit], threads: int = 1,
                holds: set[tuple[str, int]] | None = None) -> list[list[str] | OSError]:
    """Commit partitions of the local ``log_dir`` together (at most ``WAVE``): each one's groups in
    place of the segments below its ``end``, all of them or none, by Kafka's swap with every step
    made durable once for the wave (``operations.swap.swap_wave``, its fsyncs ``threads`` at once); then,
    once every swap is durable, one write of ``cleaner-offset-checkpoint`` moves the entries of
    every partition swapped in (Kafka's rule: the checkpoint moves only after the swap). Returns,
    per partition: the ``.deleted`` files to remove, or the OSError that stopped its commit (a
    swap left part way, for recovery; or the checkpoint write, which fails every partition of the
    wave: their swaps are in, their entries were not moved). A full disk at the checkpoint
    removes the wave's ``.deleted`` files first, then writes it again. A signal that stops the
    command waits for the wave to end (``operations.critical``). ``holds``: the partitions of
    ``log_dir`` (``logdir.listing.held_partitions``, whose entries the checkpoint keeps) when
    listed already, so that a log dir's waves list its root once, not once a wave."""
    with critical.section():
        return _commit_wave(log_dir, commits, threads, holds)


def _commit_wave(log_dir: str, commits: Sequence[LocalCommit], threads: int,
                 holds: set[tuple[str, int]] | None) -> list[list[str] | OSError]:
    results: list[list[str] | OSError | None] = [None] * len(commits)
    swaps, at = [], []
    for i, c in enumerate(commits):
        try:
            replaced = c.replaced if c.replaced is not None else [
                s for s in scan_partition(c.partition_dir, c.topic, c.partition).segments if s.base_offset < c.end]
        except OSError as exc:
            results[i] = exc
            continue
        swaps.append(swap.Swap(c.partition_dir, c.written, replaced))
        at.append(i)
    for i, done in zip(at, swap.swap_wave(swaps, threads)):
        results[i] = done
    moved = {(c.topic, c.partition): c.end for c, done in zip(commits, results) if not isinstance(done, OSError)}
    if not moved:
        return results

    def change(entries: dict) -> dict:
        return entries | moved

    try:
        try:
            update_cleaner_offsets(log_dir, change, holds)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # a full disk: the replaced files go first, as they did before, then again
            storage.remove_many([path for done in results if isinstance(done, list) for path in done])
            results = [done if isinstance(done, OSError) else [] for done in results]
            update_cleaner_offsets(log_dir, change, holds)
    except OSError as exc:
        return [done if isinstance(done, OSError) else exc for done in results]
    return results


def discard_cleaned(files: Iterable[str]) -> None:
    """Remove the files of cleaned groups that will not be committed (not asked first whether
    they exist: on an object store each question is a request)."""
    storage.remove_many(list(files))


def commit_deletion(log_dir: str, partition_dir: str, topic: str, partition: int, names: Sequence[str],
                    log_start: int, owner: str, seen: int) -> None:
    """Delete a partition's oldest segments, the files ``names`` of ``partition_dir`` (in the order
    given), its log start now ``log_start``. On a local disk each is renamed ``.deleted``, the
    directory fsynced, then each removed: the caller then moves the log dir's checkpoints
    (``by_record`` says whether it must). ``owner``: names the run in its commit record; ``seen``:
    the partition's latest commit record generation, 0 for none (object stores). Raises
    ``errors.CommitLost`` when another writer committed the partition first. A signal that stops
    the command waits for the partition's commit to end (``operations.critical``)."""
    with critical.section():
        _commit_deletion(log_dir, partition_dir, topic, partition, names, log_start, owner, seen)


def _commit_deletion(log_dir: str, partition_dir: str, topic: str, partition: int, names: Sequence[str],
                     log_start: int, owner: str, seen: int) -> None:
    if by_record(partition_dir):
        record = s3commit.retention_record(topic, partition, seen + 1, owner, names, log_start)
        s3commit.commit_partition(log_dir, partition_dir, record)
        return
    renamed = []
    for victim in (storage.join(partition_dir, name) for name in names):
        storage.rename(victim, victim + swap.DELETED)
        renamed.append(victim + swap.DELETED)
    storage.fsync_dir(partition_dir)
    for gone in renamed:
        storage.remove(gone)
