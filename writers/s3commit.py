"""The commit protocol for object stores, where Kafka's swap protocol (``writers.swap``) is not
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
   the record two generations back, then mark the record ``applied``. Whether the copies are
   done is read from the record, never guessed from which staged files exist.
4. Readers follow the latest record (``readers.logdir.scan_partition``): the partition's files
   are the listed ones minus staged names and minus the record's replaced names, plus each final
   name read from its staged file while that exists, else from the final object. Staged files
   are deleted only once every copy is done, so from the moment the record exists readers see
   the new partition, at every instant of the apply; before, the old one.
5. Recovery (``writers.recover``): redo the latest record unless applied; delete staged files
   no such record names whose owner holds no live lease.

Retention (``writers.retention``) publishes its deletions the same way: a record with no staged
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

import json
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace

import storage
from readers import checkpoint
from readers.errors import FormatError, Problem
from storage import FileInfo

STAGED = ".staged"
CAS_ATTEMPTS = 100  # compare-and-swap rounds on the checkpoint before giving up (transient)
_OWNER = re.compile(r"^[A-Za-z0-9_-]+$")
_STAGED = re.compile(r"^(?P<final>\d{20}\.(?:log|index|timeindex|txnindex))\.(?P<owner>[A-Za-z0-9_-]+)\.staged$")
_RECORD = re.compile(r"^kcompact-commit\.(?P<topic>.+)-(?P<partition>\d+)\.(?P<generation>\d{10})\.json$")


class CommitLost(Exception):
    """Another writer created this generation's record first; this job's result was discarded."""


# -- names ---------------------------------------------------------------------------------------
def staged_name(final: str, owner: str) -> str:
    if not _OWNER.match(owner):
        raise ValueError(f"lease owner {owner!r} cannot be part of a file name (letters, digits, '-', '_')")
    return f"{final}.{owner}{STAGED}"


def parse_staged(name: str) -> tuple[str, str] | None:
    """(final name, owner) of a staged file name; None for any other name."""
    match = _STAGED.match(name)
    return (match["final"], match["owner"]) if match else None


def record_name(topic: str, partition: int, generation: int) -> str:
    return f"kcompact-commit.{topic}-{partition}.{generation:010d}.json"


def parse_record_name(name: str) -> tuple[str, int, int] | None:
    """(topic, partition, generation) of a commit record's file name."""
    match = _RECORD.match(posixpath.basename(name))
    return (match["topic"], int(match["partition"]), int(match["generation"])) if match else None


def record_path(log_dir: str, topic: str, partition: int, generation: int) -> str:
    return storage.join(log_dir, record_name(topic, partition, generation))


def _split(partition_dir: str) -> tuple[str, str, int]:
    log_dir, _, name = partition_dir.rstrip("/").rpartition("/")
    topic, _, number = name.rpartition("-")
    return log_dir, topic, int(number)


# -- the record ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CommitRecord:
    topic: str
    partition: int
    generation: int
    owner: str
    staged: dict[str, str]  # staged file name -> final name, in the partition dir
    replaced: tuple[str, ...]  # names of the segment files the commit replaces
    checkpoint: int | None  # the partition's cleaner-offset-checkpoint entry once applied (None: kept)
    copied: bool = False  # every staged file is at its final name
    applied: bool = False  # and the rest is done
    log_start: int | None = None  # retention: the partition's new log start offset

    def to_json(self) -> bytes:
        return json.dumps(asdict(self) | {"replaced": list(self.replaced)}, sort_keys=True).encode()

    @classmethod
    def parse(cls, path: str, data: bytes) -> CommitRecord:
        try:
            doc = json.loads(data)
            record = cls(str(doc["topic"]), int(doc["partition"]), int(doc["generation"]), str(doc["owner"]),
                         {str(k): str(v) for k, v in doc["staged"].items()}, tuple(map(str, doc["replaced"])),
                         _optional_int(doc["checkpoint"]), bool(doc["copied"]), bool(doc["applied"]),
                         _optional_int(doc.get("log_start")))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise FormatError(path, None, "commit record is not a JSON object with generation, owner, staged, "
                                          "replaced, checkpoint, copied and applied") from None
        if record.checkpoint is None and record.log_start is None:
            raise FormatError(path, None, "commit record moves neither the cleaner checkpoint nor the log start")
        if parse_record_name(path) != (record.topic, record.partition, record.generation):
            raise FormatError(path, None, f"commit record's content is for {record.topic}-{record.partition} "
                                          f"generation {record.generation}, not its file name's")
        return record


def _optional_int(value) -> int | None:
    return None if value is None else int(value)


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


def latest_generations(root_files: Iterable[FileInfo]) -> dict[tuple[str, int], int]:
    """The latest record generation per (topic, partition), from a listing of the log dir root."""
    latest: dict[tuple[str, int], int] = {}
    for info in root_files:
        parsed = parse_record_name(info.path)
        if parsed is not None:
            key = parsed[:2]
            latest[key] = max(latest.get(key, 0), parsed[2])
    return latest


def view(files: Iterable[FileInfo], record: CommitRecord | None) -> list[tuple[str, FileInfo]]:
    """The partition readers see, as (name, file to read): the listed files minus staged names and
    minus the record's replaced names, plus each final name read from its staged file while that
    exists, else from the final object."""
    listed = {posixpath.basename(f.path): f for f in files}
    shown = {name: f for name, f in listed.items() if parse_staged(name) is None}
    if record is not None:
        for name in record.replaced:
            shown.pop(name, None)
        for staged, final in record.staged.items():
            found = listed.get(staged) or listed.get(final)
            if found is not None:
                shown[final] = found
    return sorted(shown.items())


def pending(record: CommitRecord | None, staged: list[FileInfo]) -> bool:
    """Something for recovery to do: a latest record not yet applied, or staged files."""
    return bool(staged) or (record is not None and not record.applied)


@dataclass(slots=True)
class Followed:
    """A partition dir's listing read through the commit protocol."""

    entries: list[tuple[str, FileInfo]]  # (name, file to read) of the partition readers see
    record: CommitRecord | None  # the latest record
    staged: list[FileInfo]  # staged files, shown or not
    problem: Problem | None = None


def follow(partition_dir: str, files: list[FileInfo], generations: dict[tuple[str, int], int] | None) -> Followed:
    """What ``scan_partition`` shows of an object-store listing ``files``. ``generations``: the
    latest generation per partition of a listing of the log dir root made before ``files``
    (None: list the root now). The record is read, and the next generation asked for, after."""
    log_dir, topic, partition = _split(partition_dir)
    if generations is None:
        generations = latest_generations(storage.list_dir(log_dir)[0])
    seen = generations.get((topic, partition), 0)
    staged = [f for f in files if parse_staged(posixpath.basename(f.path)) is not None]
    record = None
    try:
        if seen:
            path = record_path(log_dir, topic, partition, seen)
            record = CommitRecord.parse(path, storage.read_bytes(path))
        moved = storage.read_versioned(record_path(log_dir, topic, partition, seen + 1)) is not None
    except FileNotFoundError:
        moved = True
    except FormatError as exc:
        return Followed(view(files, None), None, staged, Problem.of(exc))
    if moved:
        why = f"a commit (generation {seen + 1}) began while the partition was listed; transient: list it again"
        return Followed(view(files, record), record, staged, Problem(partition_dir, None, why))
    return Followed(view(files, record), record, staged)


# -- commit and apply ----------------------------------------------------------------------------
def _remove(path: str) -> None:
    try:
        storage.remove(path)
    except FileNotFoundError:
        pass


def _copy(src: str, dst: str) -> None:
    """Server-side copy of one staged object to its final name."""
    try:
        storage.copy(src, dst)
    except FileNotFoundError:
        raise OSError(f"{src}: staged file missing; its commit record cannot be applied") from None


def update_checkpoint(log_dir: str, name: str, change: Callable[[dict], dict | None]) -> None:
    """Rewrite the checkpoint file ``name`` of ``log_dir`` to ``change(entries)`` by compare-and-swap,
    retried while commits of other partitions change it in between; ``None``: leave it as it is."""
    path = storage.join(log_dir, name)
    for _ in range(CAS_ATTEMPTS):
        found = storage.read_versioned(path)
        entries = checkpoint.parse(path, found[0]) if found else {}
        wanted = change(dict(entries))
        if wanted is None or wanted == entries:
            return
        if storage.write_if(path, checkpoint.render(wanted), found[1] if found else None):
            return
    raise OSError(f"{path}: changed by others {CAS_ATTEMPTS} times while this commit set its entry; try again")


def move_checkpoints(log_dir: str, record: CommitRecord) -> None:
    """The checkpoint entries ``record`` moves: the cleaner's set to its ``checkpoint``; for a
    retention, the log start raised to ``log_start`` and a cleaner entry below it raised too."""
    key = (record.topic, record.partition)
    if record.checkpoint is not None:
        update_checkpoint(log_dir, checkpoint.CLEANER_OFFSET, lambda entries: entries | {key: record.checkpoint})
    if record.log_start is not None:
        starts = {key: record.log_start}
        update_checkpoint(log_dir, checkpoint.LOG_START_OFFSET,
                          lambda entries: checkpoint.raise_log_starts(entries, starts))
        update_checkpoint(log_dir, checkpoint.CLEANER_OFFSET,
                          lambda entries: checkpoint.raise_cleaner_offsets(entries, starts))


def discard(partition_dir: str, staged: Iterable[str]) -> None:
    for name in staged:
        _remove(storage.join(partition_dir, name))


def commit_partition(log_dir: str, partition_dir: str, record: CommitRecord) -> None:
    """Create the record (the commit point), then apply it. Raises CommitLost when another
    writer created this generation first (our staged files are deleted then)."""
    path = record_path(log_dir, record.topic, record.partition, record.generation)
    if not storage.write_if(path, record.to_json(), None):
        discard(partition_dir, record.staged)
        raise CommitLost(f"{path} was created by another writer first; this job's cleaned segments were "
                         "discarded (transient: the next run plans the partition again)")
    found = storage.read_versioned(path)
    if found is None:
        raise OSError(f"{path}: commit record vanished right after it was written")
    apply(log_dir, partition_dir, CommitRecord.parse(path, found[0]), found[1])


def _advance(path: str, record: CommitRecord, version: str) -> str:
    """Rewrite the record at its next phase (compare-and-swap); the new version. Another recovery
    of the same record may have got there first: fine when it is at that phase or later."""
    if not storage.write_if(path, record.to_json(), version):
        found = storage.read_versioned(path)
        now = CommitRecord.parse(path, found[0]) if found else None
        if now is None or (record.applied and not now.applied) or (record.copied and not now.copied):
            raise OSError(f"{path}: commit record changed while it was being applied")
    found = storage.read_versioned(path)
    if found is None:
        raise OSError(f"{path}: commit record deleted while it was being applied")
    return found[1]


def apply(log_dir: str, partition_dir: str, record: CommitRecord, version: str) -> None:
    """Roll ``record`` forward from its phase; a crash anywhere is finished by running it again."""
    path = record_path(log_dir, record.topic, record.partition, record.generation)
    if not record.copied:
        for staged, final in sorted(record.staged.items()):
            _copy(storage.join(partition_dir, staged), storage.join(partition_dir, final))
        record = replace(record, copied=True)
        version = _advance(path, record, version)
    finals = set(record.staged.values())
    for name in record.replaced:
        if name not in finals:
            _remove(storage.join(partition_dir, name))
    move_checkpoints(log_dir, record)
    discard(partition_dir, sorted(record.staged))
    if record.generation > 2:  # before marking applied, so a crash cannot leave it behind
        _remove(record_path(log_dir, record.topic, record.partition, record.generation - 2))
    _advance(path, replace(record, applied=True), version)


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
            raise OSError(f"{path}: commit record deleted since the log dir was listed (a commit finished "
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
    from compaction import states

    state, _ = states.read(partition_dir)
    if state.state in (states.IN_PROGRESS, states.ABORTED) and not state.expired():
        return state.owner
    return None


def recover_partition(partition_dir: str, files: list[FileInfo]) -> Recovered:
    """Redo the latest record unless applied; delete staged files no such record names whose owner
    holds no live lease. ``files``: the partition dir's listing. The caller holds the partition's
    lease (or no job can take it), so no commit runs meanwhile."""
    log_dir, topic, partition = _split(partition_dir)
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
            _remove(info.path)
            out.deleted.append(name)
    return out
