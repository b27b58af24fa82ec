"""How a partition dir on an object store reads under kcompact's commit protocol
(``operations.s3commit``): the names of staged files and commit records, the record itself,
and the view a reader takes of a listing. Writing and applying records is in ``operations``;
this half only reads, so ``logdir.listing`` can follow a record without importing upward.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from kcompact import storage
from kcompact.errors import FormatError, Problem
from kcompact.storage import FileInfo

STAGED = ".staged"
_OWNER = re.compile(r"^[A-Za-z0-9_-]+$")
_STAGED = re.compile(r"^(?P<final>\d{20}\.(?:log|index|timeindex|txnindex))\.(?P<owner>[A-Za-z0-9_-]+)\.staged$")
_RECORD = re.compile(r"^kcompact-commit\.(?P<topic>.+)-(?P<partition>\d+)\.(?P<generation>\d{10})\.json$")


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


def split_partition_dir(partition_dir: str) -> tuple[str, str, int]:
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


def follow(partition_dir: str, files: list[FileInfo], generations: dict[tuple[str, int], int] | None,
           after: dict[tuple[str, int], int] | None = None) -> Followed:
    """What ``scan_partition`` shows of an object-store listing ``files``. ``generations``: the
    latest generation per partition of a listing of the log dir root made before ``files``
    (None: list the root now). ``after``: the same of a listing of the root made after ``files``
    (a log dir listed whole, ``logdir.listing.list_log_dir``): a commit began meanwhile when it
    differs. Without it, the next generation is asked for after the record is read."""
    log_dir, topic, partition = split_partition_dir(partition_dir)
    if generations is None:
        generations = latest_generations(storage.list_dir(log_dir)[0])
    seen = generations.get((topic, partition), 0)
    staged = [f for f in files if parse_staged(posixpath.basename(f.path)) is not None]
    record = None
    try:
        if seen:
            path = record_path(log_dir, topic, partition, seen)
            record = CommitRecord.parse(path, storage.read_bytes(path))
        if after is not None:
            moved = after.get((topic, partition), 0) != seen
        else:
            moved = storage.read_versioned(record_path(log_dir, topic, partition, seen + 1)) is not None
    except FileNotFoundError:
        moved = True
    except FormatError as exc:
        return Followed(view(files, None), None, staged, Problem.of(exc))
    if moved:
        why = f"a commit (generation {seen + 1}) began while the partition was listed; transient: list it again"
        return Followed(view(files, record), record, staged, Problem(partition_dir, None, why))
    return Followed(view(files, record), record, staged)
