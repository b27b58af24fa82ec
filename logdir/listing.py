"""List what a Kafka log dir holds: partitions, their segments, leftovers and checkpoints.

Listing only: no segment is opened. Directories of partitions being deleted,
moved or left stray (``-delete``, ``-future``, ``-stray``) are not live and are
skipped; names that follow no Kafka convention are reported, not guessed.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from kcompact import storage
from kcompact.errors import Problem
from kcompact.logdir import broker_load
from kcompact.logdir.commits import CommitRecord, follow, latest_generations
from kcompact.readers import checkpoint
from kcompact.storage import FileInfo

NOT_LIVE_SUFFIXES = ("-delete", "-future", "-stray")
METADATA_TOPIC = "__cluster_metadata"  # KRaft's own log: configuration, not data to clean
METADATA_DIR = f"{METADATA_TOPIC}-0"
LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".deleted")
SEGMENT_KINDS = ("log", "index", "timeindex", "txnindex")
BROKER_FILES = {"leader-epoch-checkpoint", "partition.metadata"}
CHECKPOINTS = (
    checkpoint.CLEANER_OFFSET,
    checkpoint.LOG_START_OFFSET,
    checkpoint.RECOVERY_POINT,
    checkpoint.REPLICATION_OFFSET,
)
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex|snapshot)((?:\.cleaned|\.swap|\.deleted)?)$")


def segment_name(base_offset: int, kind: str) -> str:
    return f"{base_offset:020d}.{kind}"


@dataclass(slots=True)
class Segment:
    base_offset: int
    log: FileInfo | None = None
    index: FileInfo | None = None
    timeindex: FileInfo | None = None
    txnindex: FileInfo | None = None

    @property
    def size(self) -> int:
        return self.log.size if self.log else 0


@dataclass(slots=True)
class Partition:
    topic: str
    partition: int
    path: str
    segments: list[Segment] = field(default_factory=list)
    leftovers: list[FileInfo] = field(default_factory=list)
    temporary: list[FileInfo] = field(default_factory=list)  # ``*.tmp``: a write cut short (kcompact's or the broker's)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)  # what a broker's load repairs or ignores (broker_load)
    # object stores (logdir.commits): the latest commit record, the staged files no reader sees,
    # and why the records could not be followed (also in ``problems``)
    commit: CommitRecord | None = None
    staged: list[FileInfo] = field(default_factory=list)
    commit_problem: Problem | None = None
    listed: list[FileInfo] | None = None  # local disk: every file of the dir as listed, for recovery's rules

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active(self) -> Segment | None:
        """The segment the broker appends to: the one with the highest base offset."""
        return self.segments[-1] if self.segments else None


@dataclass(slots=True)
class LogDir:
    path: str
    partitions: list[Partition] = field(default_factory=list)
    checkpoints: dict[str, str] = field(default_factory=dict)
    metadata: str | None = None  # the KRaft metadata partition dir, when the log dir holds one
    skipped: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``orders-7`` -> ("orders", 7); the partition follows the LAST '-'."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        return None
    return topic, int(number)


def is_live_partition_dir(name: str) -> bool:
    return not name.endswith(NOT_LIVE_SUFFIXES)


def scan_partition(path: str, topic: str, partition: int, files: list[FileInfo] | None = None,
                   commits: dict[tuple[str, int], int] | None = None,
                   after: dict[tuple[str, int], int] | None = None) -> Partition:
    """Group a partition dir's files into segments; ``files`` skips the listing when known. On an
    object store the files are those the latest commit record makes them (``logdir.commits``);
    ``commits``: the latest record generations of a listing of the log dir root made before;
    ``after``: those of one made after (``Listing``)."""
    if files is None:
        files, _ = storage.list_dir(path)
    part = Partition(topic, partition, path)
    entries = [(posixpath.basename(info.path), info) for info in files]
    if storage.is_local_path(path):
        part.listed = files
    else:
        followed = follow(path, files, commits, after)
        entries, part.commit, part.staged = followed.entries, followed.record, followed.staged
        if followed.problem is not None:
            part.problems.append(followed.problem)
            part.commit_problem = followed.problem
    by_base: dict[int, Segment] = {}
    for name, info in entries:
        match = _SEGMENT_FILE.match(name)
        if match is None:
            if name.endswith(".tmp"):
                part.temporary.append(info)
            elif name in BROKER_FILES:
                if (refused := broker_load.broker_file_problem(name, info.size)) is not None:
                    part.problems.append(Problem(info.path, None, refused))
            elif broker_load.refuses_name(name):
                part.problems.append(Problem(info.path, None, broker_load.NOT_A_SEGMENT_NAME))
            else:
                part.notes.append(Problem(info.path, None, broker_load.PASSED_OVER))
            continue
        base, kind, suffix = int(match.group(1)), match.group(2), match.group(3)
        if suffix:
            part.leftovers.append(info)
        elif kind in SEGMENT_KINDS:
            setattr(by_base.setdefault(base, Segment(base)), kind, info)
    for base in sorted(by_base):
        seg = by_base[base]
        if seg.log is None:
            part.notes.append(Problem(path, None, broker_load.orphan_note(base, segment_name(base, "log"))))
            continue
        part.segments.append(seg)
    return part


META_PROPERTIES = "meta.properties"  # the broker's identity in this log dir (node id, cluster id)
ROOT_FILES = (META_PROPERTIES, *CHECKPOINTS)
EXPECTED = ("a Kafka log dir: a directory holding meta.properties, checkpoint files or "
            "<topic>-<partition> directories of segments")


def not_a_log_dir(path: str) -> str | None:
    """Why ``path`` is not a Kafka log dir (None when it is one), checked before a command writes
    anything there: an empty directory is an unmounted volume more often than a broker's new dir.
    A directory counts when it holds a broker's root file, or a ``<topic>-<partition>``
    directory with a segment in it."""
    found = storage.kind(path)
    if found is None:
        return f"{storage.describe_error(FileNotFoundError(path), path)}; expected {EXPECTED}"
    if found == "file":
        return f"{path}: is a file; expected {EXPECTED}"
    files, dirs = storage.list_dir(path)
    if not files and not dirs:
        return f"{path}: is empty (an unmounted volume?); expected {EXPECTED}"
    if any(posixpath.basename(info.path) in ROOT_FILES for info in files):
        return None
    for sub in sorted(dirs):
        if parse_partition_dir(posixpath.basename(sub.rstrip("/"))) is None:
            continue
        if any(_SEGMENT_FILE.match(posixpath.basename(info.path)) for info in storage.list_dir(sub)[0]):
            return None
    return f"{path}: holds neither Kafka checkpoint files nor partition directories; expected {EXPECTED}"


def held_partitions(log_dir: str) -> set[tuple[str, int]]:
    """(topic, partition) of every live partition dir of ``log_dir``: the logs a broker serving it
    holds (its KRaft metadata log is not one of them)."""
    _, dirs = storage.list_dir(log_dir)
    parsed = (parse_partition_dir(posixpath.basename(d.rstrip("/"))) for d in dirs
              if is_live_partition_dir(posixpath.basename(d.rstrip("/"))))
    return {p for p in parsed if p is not None and p[0] != METADATA_TOPIC}


@dataclass(slots=True)
class Listing:
    """A log dir listed for a stage of a command: its root, and on an object store, at once
    whatever number of partitions it holds, the files of each partition dir and the commit record
    generations of the root listed before the partition dirs and again after them. On local disk
    a partition dir is listed when it is asked for (as cheap, and a dir that cannot be listed
    fails its partition alone)."""

    path: str
    root: list[FileInfo]
    dirs: list[str]
    files: dict[str, list[FileInfo]] | None = None  # by partition dir (object stores)
    before: dict[tuple[str, int], int] = field(default_factory=dict)
    after: dict[tuple[str, int], int] = field(default_factory=dict)

    def partition(self, path: str, topic: str, number: int) -> Partition:
        """The partition dir at ``path`` as this listing shows it (``scan_partition``)."""
        if self.files is None:
            return scan_partition(path, topic, number)
        return scan_partition(path, topic, number, self.files.get(path.rstrip("/"), []), self.before, self.after)

    def generation(self, topic: str, number: int) -> int:
        """The partition's latest commit record generation listed (0: none, or local disk)."""
        return self.before.get((topic, number), 0)


def list_log_dir(path: str) -> Listing:
    """List ``path`` for a stage (``Listing``): on an object store three listings in all (the
    root, every key under it, the root again) and not one a partition."""
    path = path.rstrip("/")
    root, dirs = storage.list_dir(path)
    if storage.is_local_path(path):
        return Listing(path, root, dirs)
    tree = storage.list_tree(path)
    after = latest_generations(storage.list_dir(path)[0])
    return Listing(path, root, dirs, tree, latest_generations(root), after)


def scan_log_dir(path: str, listing: Listing | None = None) -> LogDir:
    """Every partition of the log dir at ``path``; ``listing``: it as listed already."""
    listing = listing or list_log_dir(path)
    logdir = LogDir(listing.path)
    for info in listing.root:
        name = posixpath.basename(info.path)
        if name in CHECKPOINTS:
            logdir.checkpoints[name] = info.path
        elif name == META_PROPERTIES and (what := broker_load.meta_properties_problem(info.size)):
            logdir.problems.append(Problem(info.path, None, what))  # the broker does not start with it
    for sub in sorted(listing.dirs):
        name = posixpath.basename(sub.rstrip("/"))
        if not is_live_partition_dir(name):
            logdir.skipped.append(sub)
            continue
        parsed = parse_partition_dir(name)
        if parsed is None:
            if not broker_load.ignores_dir(name):
                logdir.problems.append(Problem(sub, None, broker_load.FOREIGN_DIR))
            continue
        if parsed[0] == METADATA_TOPIC:
            logdir.metadata = sub
            continue
        logdir.partitions.append(listing.partition(sub, *parsed))
    logdir.partitions.sort(key=lambda p: (p.topic, p.partition))
    return logdir
