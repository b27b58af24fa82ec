"""The commit step: the one place that chooses how a partition's change is made visible, for the
compaction job and for retention alike.

On a local disk a rename is atomic, so a change is made of renames that a broker loading the dir
finishes or undoes after a crash: a compaction by Kafka's swap (``operations.swap``), then the
partition's cleaner checkpoint entry moved; a retention by renaming the deleted segments' files
to ``.deleted``, its checkpoints moved by the caller once the log dir's partitions are done. On an
object store a rename is a copy and a delete, so a crash between two would leave a mix: there one
commit record, created by a conditional PUT that exactly one writer wins, decides
(``operations.s3commit``), and its apply moves the checkpoint entries too.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterable, Sequence

from kcompact import storage
from kcompact.logdir.listing import SEGMENT_KINDS, scan_partition, segment_name
from kcompact.operations import critical, s3commit, swap
from kcompact.operations.checkpoints import set_cleaner_offset
from kcompact.operations.cleaned import WrittenGroup


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
                   read: Sequence[int], end: int, owner: str, seen: int | None, wave: Wave | None = None) -> list[str]:
    """Put a partition's cleaned groups ``written`` in place of the segments the job ``read`` (their
    base offsets), all of them or none, and set its cleaner checkpoint entry to ``end``; returns
    the ``.deleted`` files to remove (none on object stores, whose commit deletes what it
    replaces). ``owner``: the job's lease owner; ``seen``: the latest commit record generation
    seen under its lease (object stores). Raises ``errors.CommitLost`` when another writer
    committed the partition first; an OSError inside the swap leaves it for recovery. A signal
    that stops the command waits for the partition's commit to end (``operations.critical``).
    ``wave``: an object store's apply is finished with the wave's (else at once)."""
    with critical.section():
        return _commit_cleaned(log_dir, partition_dir, topic, partition, written, read, end, owner, seen, wave)


def _commit_cleaned(log_dir: str, partition_dir: str, topic: str, partition: int, written: Sequence[WrittenGroup],
                    read: Sequence[int], end: int, owner: str, seen: int | None, wave: Wave | None) -> list[str]:
    if by_record(partition_dir):
        replaced = [segment_name(base, kind) for base in read for kind in SEGMENT_KINDS]
        staged = [path for group in written for path in group.files]
        record = s3commit.plan_record(topic, partition, seen + 1, owner, staged, replaced, end)
        applying = s3commit.commit_record(log_dir, partition_dir, record)
        if wave is None:
            s3commit.finish(log_dir, [applying])
        else:
            wave.add(applying)
        return []
    part = scan_partition(partition_dir, topic, partition)
    replaced = [s for s in part.segments if s.base_offset < end]
    deleted = swap.commit_partition(partition_dir, written, replaced)
    try:
        set_cleaner_offset(log_dir, topic, partition, end)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        for path in deleted:  # a full disk: the replaced files go first, as they did before, then again
            storage.remove(path)
        set_cleaner_offset(log_dir, topic, partition, end)
        return []
    return deleted


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
