"""The commit protocol for object stores, where Kafka's swap protocol (``operations.swap``) is not
crash-safe: a rename there is a copy and a delete, so a crash between renames leaves a mix. A
commit record decides instead, created by one conditional PUT that exactly one writer wins.

1. Staging. Tasks write each new segment file as ``<base>.<kind>.<owner>.staged`` in the
   partition dir (``owner``: the job's lease owner, unique per run). No reader takes it for a
   segment: nothing a reader sees changes.
2. Commit record. The driver creates ``kcompact-commit.<topic>-<partition>.<generation>.json``
   at the log dir root (beside the ``kcompact-state.*`` files) with If-None-Match; generation is
   1 + the latest one the job saw after taking its lease. The record names the staged -> final
   files, the replaced files, the partition's cleaner-offset-checkpoint entry, and the phase
   (``copied``, ``applied``: both false). Exactly one writer creates a generation; a loser
   deletes its staged files and reports the partition failed (transient).
3. Apply (roll forward; each step may be repeated after a crash anywhere): copy each staged file
   to its final name, then mark the record ``copied`` (compare-and-swap); delete the replaced
   files that are not final names, set the checkpoint entry (compare-and-swap on the checkpoint
   object, retried: commits of other partitions write it too), delete the staged files, delete
   the record two generations back, then mark the record ``applied``. A job finishes the applies
   of a wave of commits together (``finish``): each step for all of them, deletes batched, one
   checkpoint write for the log dir. Whether the copies are
   done is read from the record, never guessed from which staged files exist.
4. Readers follow the latest record (``logdir.listing.scan_partition``, through ``logdir.commits``): the
partition's files
   are the listed ones minus staged names and minus the record's replaced names, plus each final
   name read from its staged file while that exists, else from the final object. Staged files
   are deleted only once every copy is done, so from the moment the record exists readers see
   the new partition, at every instant of the apply; before, the old one.
5. Recovery (``operations.recover``): redo the latest record unless applied; delete staged files
   no such record names whose owner holds no live lease.

Retention (``operations.retention``) publishes its deletions the same way: a record with no staged
files, the deleted segments' files as ``replaced`` and the partition's new log start, which the
apply raises ``log-start-offset-checkpoint`` to (and a ``cleaner-offset-checkpoint`` entry below
it, as Kafka's cleaner resets one), both by compare-and-swap. From the record on, readers no
longer see the deleted segments, whichever of their objects are still there.

A reader's listing of the root may predate a commit. The apply of generation ``g`` deletes record
``g - 2`` before it marks itself applied, so while record ``g`` exists, ``g + 1`` has never been
deleted. A reader that saw generation ``g`` at the root therefore reads record ``g`` and asks for
``g + 1`` after listing the partition dir: if ``g`` is gone or ``g + 1`` exists, a commit began
meanwhile, and the partition is reported as changed under the reader (transient), never shown
mixed. (One that saw no record asks for generation 1: only a listing older than three whole
commits of the partition could miss them.) Writers are kept apart by leases; the generation is
a second fence.

Pure decisions (names, records, the view) are functions of listings; the rest goes through
``storage``, which must answer from the store, not from a listing cached earlier in the process.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kcompact import errors, storage
from kcompact.errors import CommitLost
from kcompact.logdir.commits import (
    CommitRecord,
    latest_generations,
    parse_staged,
    record_path,
    split_partition_dir,
)
from kcompact.logdir.listing import held_partitions
from kcompact.operations.checkpoints import move_log_starts, update_cleaner_offsets
from kcompact.storage import FileInfo


def plan_record(topic: str, partition: int, generation: int, owner: str, staged_paths: Iterable[str],
                replaced: Iterable[str], checkpoint_offset: int) -> CommitRecord:
    """The record of a commit: ``staged_paths`` (the files the job's tasks wrote) replace the
    segment files named ``replaced``."""
    staged = {}
    for path in staged_paths:
        parsed = parse_staged(posixpath.basename(path))
        if parsed is None or parsed[1] != owner:
            raise ValueError(f"{path}: not a staged file of owner {owner}")
        staged[posixpath.basename(path)] = parsed[0]
    return CommitRecord(topic, partition, generation, owner, staged, tuple(sorted(set(replaced))), checkpoint_offset)


def retention_record(topic: str, partition: int, generation: int, owner: str, deleted: Iterable[str],
                     log_start: int) -> CommitRecord:
    """The record of a retention: the segment files named ``deleted`` go, the log starts at ``log_start``."""
    names = tuple(sorted(set(deleted)))
    if not names or any("/" in name for name in names):
        raise ValueError(f"a retention record names the deleted files of one partition dir, not {names}")
    return CommitRecord(topic, partition, generation, owner, {}, names, None, log_start=log_start)


# -- commit and apply ----------------------------------------------------------------------------
def _copy(partition_dir: str, staged: dict[str, str]) -> None:
    """Server-side copies of the staged objects to their final names."""
    pairs = [
        (storage.join(partition_dir, name), storage.join(partition_dir, final))
        for name, final in sorted(staged.items())
    ]
    try:
        storage.copy_many(pairs)
    except FileNotFoundError as exc:
        raise errors.StorageError(
            f"{partition_dir}: a staged file is missing ({exc}); its commit record cannot be applied"
        ) from None


def move_checkpoints(log_dir: str, records: list[CommitRecord]) -> None:
    """The checkpoint entries ``records`` (of partitions of ``log_dir``) move, in one
    compare-and-swap per checkpoint file: the cleaner's set to each record's ``checkpoint``; for a
    retention, the log start raised to ``log_start`` and a cleaner entry below it raised too."""
    offsets = {(r.topic, r.partition): r.checkpoint for r in records if r.checkpoint is not None}
    starts = {(r.topic, r.partition): r.log_start for r in records if r.log_start is not None}
    if not offsets and not starts:
        return
    held = held_partitions(log_dir)
    if starts:
        move_log_starts(log_dir, starts, held)  # as local retention moves them
    if offsets:
        update_cleaner_offsets(log_dir, lambda entries: entries | offsets, held)


def discard(partition_dir: str, staged: Iterable[str]) -> None:
    storage.remove_many([storage.join(partition_dir, name) for name in staged])


def commit_partition(log_dir: str, partition_dir: str, record: CommitRecord) -> None:
    """Create the record (the commit point), then apply it. Raises CommitLost when another writer
    created this generation first (our staged files are deleted then)."""
    finish(log_dir, [commit_record(log_dir, partition_dir, record)])


def commit_record(log_dir: str, partition_dir: str, record: CommitRecord) -> Applying:
    """Create the record (the commit point) and copy its staged files to their final names; the
    rest of its apply is ``finish``'s, for every record of a wave of commits at once. Raises
    CommitLost as ``commit_partition``."""
    path = record_path(log_dir, record.topic, record.partition, record.generation)
    version = storage.write_if(path, record.to_json(), None)
    if version is None:
        discard(partition_dir, record.staged)
        raise CommitLost(f"{path} was created by another writer first; this job's cleaned segments were "
                         "discarded (transient: the next run plans the partition again)")
    return _copied(log_dir, partition_dir, record, version)


def _advance(path: str, record: CommitRecord, version: str) -> str:
    """Rewrite the record at its next phase (compare-and-swap); the new version. Another recovery
    of the same record may have got there first: fine when it is at that phase or later."""
    written = storage.write_if(path, record.to_json(), version)
    return written if written is not None else _confirmed(path, record)


def _confirmed(path: str, record: CommitRecord) -> str:
    """The version of the record at ``path`` once its write at ``record``'s phase failed: another
    recovery got it there or further (fine), or it changed otherwise (an error)."""
    found = storage.read_versioned(path)
    now = CommitRecord.parse(path, found[0]) if found else None
    if now is None or (record.applied and not now.applied) or (record.copied and not now.copied):
        raise errors.StorageError(f"{path}: commit record changed while it was being applied")
    return found[1]


@dataclass(frozen=True, slots=True)
class Applying:
    """A record whose staged files are copied (``copied`` marked), the rest of its apply to do."""

    log_dir: str
    partition_dir: str
    record: CommitRecord
    version: str


def _copied(log_dir: str, partition_dir: str, record: CommitRecord, version: str) -> Applying:
    if not record.copied:
        _copy(partition_dir, record.staged)
        record = replace(record, copied=True)
        version = _advance(record_path(log_dir, record.topic, record.partition, record.generation), record, version)
    return Applying(log_dir, partition_dir, record, version)


def finish(log_dir: str, applying: list[Applying]) -> None:
    """Finish the applies of copied records of partitions of ``log_dir``, in the protocol's order
    for each and in batches across them: the replaced files that are not final names deleted, the
    checkpoints moved (one compare-and-swap for all), the staged files and the records two
    generations back deleted, then each record marked ``applied``. A crash anywhere is finished
    by recovery, record by record."""
    if not applying:
        return
    storage.remove_many([storage.join(a.partition_dir, name) for a in applying for name in a.record.replaced
                         if name not in set(a.record.staged.values())])
    move_checkpoints(log_dir, [a.record for a in applying])
    storage.remove_many(
        [storage.join(a.partition_dir, name) for a in applying for name in sorted(a.record.staged)]
        + [record_path(log_dir, a.record.topic, a.record.partition, a.record.generation - 2)
           for a in applying if a.record.generation > 2])  # before marking applied: a crash cannot leave it behind
    done = [(record_path(log_dir, a.record.topic, a.record.partition, a.record.generation),
             replace(a.record, applied=True), a.version) for a in applying]
    written = storage.write_if_many([(path, record.to_json(), version) for path, record, version in done])
    for (path, record, _), version in zip(done, written):
        if version is None:
            _confirmed(path, record)


def apply(log_dir: str, partition_dir: str, record: CommitRecord, version: str) -> None:
    """Roll ``record`` forward from its phase; a crash anywhere is finished by running it again."""
    finish(log_dir, [_copied(log_dir, partition_dir, record, version)])


# -- recovery ------------------------------------------------------------------------------------
def latest_record(log_dir: str, topic: str, partition: int,
                  seen: int) -> tuple[CommitRecord | None, str | None]:
    """The partition's latest record and its version, read now: from generation ``seen`` (of a
    listing of the root) on, while a next one exists."""
    record, version, generation = None, None, seen
    if seen:
        path = record_path(log_dir, topic, partition, seen)
        found = storage.read_versioned(path)
        if found is None:
            raise errors.StorageError(f"{path}: commit record deleted since the log dir was listed (a commit finished "
                          "meanwhile); try again")
        record, version = CommitRecord.parse(path, found[0]), found[1]
    while True:
        path = record_path(log_dir, topic, partition, generation + 1)
        found = storage.read_versioned(path)
        if found is None:
            return record, version
        generation += 1
        record, version = CommitRecord.parse(path, found[0]), found[1]


@dataclass(slots=True)
class Recovered:
    generation: int = 0  # of the partition's latest record; 0: none
    redone: bool = False  # the latest record was applied now
    copied: list[tuple[str, str]] = field(default_factory=list)  # (staged, final) of the record redone
    replaced: list[str] = field(default_factory=list)  # files the record redone deleted (a retention's segments)
    deleted: list[str] = field(default_factory=list)  # staged files of no such record and no live job


def _live_owner(partition_dir: str) -> str | None:
    from kcompact.operations import states

    state, _ = states.read(partition_dir)
    if state.state in (states.IN_PROGRESS, states.ABORTED) and not state.lapsed():
        return state.owner
    return None


def recover_partition(partition_dir: str, files: list[FileInfo]) -> Recovered:
    """Redo the latest record unless applied; delete staged files no such record names whose owner
    holds no live lease. ``files``: the partition dir's listing. The caller holds the partition's
    lease (or no job can take it), so no commit runs meanwhile."""
    log_dir, topic, partition = split_partition_dir(partition_dir)
    seen = latest_generations(storage.list_dir(log_dir)[0]).get((topic, partition), 0)
    record, version = latest_record(log_dir, topic, partition, seen)
    out = Recovered(record.generation if record else 0)
    named: set[str] = set()
    if record is not None and not record.applied:
        apply(log_dir, partition_dir, record, version)
        out.redone, out.copied = True, sorted(record.staged.items())
        out.replaced = sorted(set(record.replaced) - set(record.staged.values()))
        named = set(record.staged)
    live = _live_owner(partition_dir)
    for info in files:
        name = posixpath.basename(info.path)
        parsed = parse_staged(name)
        if parsed is not None and name not in named and parsed[1] != live:
            out.deleted.append(name)
    discard(partition_dir, out.deleted)
    return out
