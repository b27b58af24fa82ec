"""Every name kcompact can leave in a Kafka log dir, and what a broker starting on that dir does
with it: the table of docs/protocols.md, "Files kcompact adds to a log dir"
(``#files-kcompact-adds-to-a-log-dir``), as data. The why and Kafka's sources are stated there,
once; here each entry carries a one-line summary of them for the tests' messages.

The table also holds the names of Kafka's own files that a log dir holds beside kcompact's, so
``unknown`` can check a whole listing: a name it returns is one no entry knows, where it was
found. Tests keep the table honest: ``tests/unit/test_log_dir_names.py`` scans the product's
source for file names it builds, and the crash tests (``tests/e2e/test_crash_recovery.py``,
``tests/e2e/test_s3_commit.py``) list every log dir a kill left.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Where a name may appear.
ROOT = "log dir root"
PARTITION = "partition dir"
METADATA = "KRaft metadata dir"  # __cluster_metadata-0: Kafka's raft layer loads it, not LogManager

# What a starting broker does with it.
IGNORES = "ignores"
READS = "reads"
LOADS = "loads"
DELETES = "deletes"
RECOVERS = "recovers"
SKIPS = "skips"  # a directory LogManager.loadLogs does not load as a partition

_TOPIC = r"[A-Za-z0-9._-]+"  # Kafka's legal topic characters (a subset of what its parser takes)
_PARTITION = r"\d{1,9}"  # an int, as Integer.parseInt reads it (conservatively: below 10^9)
_BASE = r"\d{20}"  # a base offset, zero-padded as LogFileUtils.filenamePrefixFromOffset writes it
_KIND = r"(?:log|index|timeindex|txnindex)"  # the files of a segment
_INDEX = r"(?:index|timeindex|txnindex)"


@dataclass(frozen=True, slots=True)
class Name:
    """One row of the table: ``pattern`` is matched against a whole file (or directory) name."""

    shown: str  # the name as the docs write it
    pattern: str
    where: tuple[str, ...]
    writer: str  # who writes it; "Kafka" alone: kcompact never does
    broker: str  # what a starting broker does with it (IGNORES, READS, ...)
    why: str  # why that is safe
    example: str
    directory: bool = False
    kcompact_writes: bool = True
    regex: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))

    def matches(self, name: str) -> bool:
        return self.regex.fullmatch(name) is not None


def _name(shown: str, pattern: str, where: str | tuple[str, ...], writer: str, broker: str, why: str,
          example: str, directory: bool = False, kcompact_writes: bool = True) -> Name:
    where = (where,) if isinstance(where, str) else where
    return Name(shown, pattern, where, writer, broker, why, example, directory, kcompact_writes)


IN_PARTITIONS = (PARTITION, METADATA)

TABLE: tuple[Name, ...] = (
    # -- kcompact's own names, at the log dir root ---------------------------------------------
    _name("kcompact-state.<topic>-<partition>.json", rf"kcompact-state\.{_TOPIC}-{_PARTITION}\.json", ROOT,
          "jobs (leases) and operator commands (operations/states.py)", IGNORES,
          "a root file: LogManager.loadLogs loads directories only; no broker code opens it",
          "kcompact-state.orders.v2-7.json"),
    _name("kcompact-state.<topic>-<partition>.json.tmp", rf"kcompact-state\.{_TOPIC}-{_PARTITION}\.json\.tmp",
          ROOT, "storage.write_atomic under write_if, cut short by a crash", IGNORES,
          "a root file; kcompact recover removes it (operations/recover.py _ROOT_TEMP)",
          "kcompact-state.orders.v2-7.json.tmp"),
    _name("kcompact-commit.<topic>-<partition>.<generation>.json",
          rf"kcompact-commit\.{_TOPIC}-{_PARTITION}\.\d{{10}}\.json", ROOT,
          "the object-store commit (operations/s3commit.py); object stores only", IGNORES,
          "no broker runs on an object store; copied to a disk, a root file, never loaded",
          "kcompact-commit.orders-0.0000000003.json"),
    _name("kcompact-last-run.json", r"kcompact-last-run\.json", ROOT,
          "every run that is not a dry run (operations/last_run.py)", IGNORES,
          "a root file: LogManager.loadLogs loads directories only", "kcompact-last-run.json"),
    _name("kcompact-last-run.json.tmp", r"kcompact-last-run\.json\.tmp", ROOT,
          "storage.write_atomic, cut short by a crash", IGNORES,
          "a root file; kcompact recover removes it", "kcompact-last-run.json.tmp"),
    _name("kcompact-probe", r"kcompact-probe", ROOT,
          "the probe of an object store's conditional writes (storage/probe.py); object stores only", IGNORES,
          "empty; no broker runs on an object store; copied to a disk, a root file, never loaded",
          "kcompact-probe"),
    # -- Kafka's names at the root that kcompact writes -----------------------------------------
    _name(".lock", r"\.lock", ROOT, "Kafka; kcompact creates it when missing, removes it after (storage/lock.py)",
          READS,
          "the broker's own lock file (LogManager.lockLogDirs), empty, given the log dir's owner",
          ".lock"),
    _name("cleaner-offset-checkpoint", r"cleaner-offset-checkpoint", ROOT,
          "Kafka's cleaner; kcompact's commits and resets (operations/checkpoints.py)", READS,
          "Kafka's checkpoint format, replaced by rename (LogCleanerManager reads it)",
          "cleaner-offset-checkpoint"),
    _name("log-start-offset-checkpoint", r"log-start-offset-checkpoint", ROOT,
          "Kafka; kcompact's retention (operations/retention.py, operations/s3commit.py)", READS,
          "Kafka's checkpoint format, replaced by rename (LogManager.loadLogs reads it)",
          "log-start-offset-checkpoint"),
    _name("cleaner-offset-checkpoint.tmp, log-start-offset-checkpoint.tmp",
          r"(?:cleaner-offset|log-start-offset)-checkpoint\.tmp", ROOT,
          "Kafka's own temp name (CheckpointFile.write); kcompact's storage.write_atomic", IGNORES,
          "a root file; the broker's next write of the checkpoint truncates it; kcompact recover removes it",
          "cleaner-offset-checkpoint.tmp"),
    # -- Kafka's names at the root that kcompact never writes ------------------------------------
    _name("recovery-point-offset-checkpoint, replication-offset-checkpoint",
          r"(?:recovery-point-offset|replication-offset)-checkpoint(?:\.tmp)?", ROOT, "Kafka", READS,
          "the broker's own", "recovery-point-offset-checkpoint", kcompact_writes=False),
    _name("meta.properties", r"meta\.properties", ROOT, "Kafka", READS, "the broker's own", "meta.properties",
          kcompact_writes=False),
    _name(".kafka_cleanshutdown", r"\.kafka_cleanshutdown", ROOT, "Kafka", READS,
          "the broker's own (CleanShutdownFileHandler): read, then deleted", ".kafka_cleanshutdown",
          kcompact_writes=False),
    # -- directories at the root: kcompact never creates one --------------------------------------
    _name("<topic>-<partition>/", rf"(?!__cluster_metadata-0$){_TOPIC}-{_PARTITION}", ROOT,
          "Kafka; kcompact writes only inside existing ones", LOADS,
          "UnifiedLog.parseTopicPartitionName parses it; kcompact creates no directory", "orders.v2-7",
          directory=True, kcompact_writes=False),
    _name("<topic>-<partition>.<uniqueId>-delete/ (-future/, -stray/)",
          rf"{_TOPIC}-{_PARTITION}\.[0-9A-Za-z]+-(?:delete|future|stray)", ROOT,
          "Kafka; kcompact skips them (logdir/listing.py NOT_LIVE_SUFFIXES)", LOADS,
          "Kafka's own; kcompact writes nothing inside", "orders-7.0f1e2dc3b4a5468e9c0d2b7a61f3e8d4-delete",
          directory=True, kcompact_writes=False),
    _name("__cluster_metadata-0/", r"__cluster_metadata-0", ROOT, "Kafka (KRaft)", SKIPS,
          "LogManager.loadLogs leaves it to the raft layer; kcompact only reads it", "__cluster_metadata-0",
          directory=True, kcompact_writes=False),
    _name("remote-log-index-cache/", r"remote-log-index-cache", ROOT, "Kafka (tiered storage)", SKIPS,
          "LogManager.loadLogs skips it by name (RemoteIndexCache.DIR_NAME); kcompact never touches it",
          "remote-log-index-cache", directory=True, kcompact_writes=False),
    # -- in a partition dir ----------------------------------------------------------------------
    _name("<base>.log, .index, .timeindex, .txnindex", rf"{_BASE}\.{_KIND}", IN_PARTITIONS,
          "Kafka; kcompact's swap (final rename), its recovery (index rebuilt, torn tail cut), "
          "the object-store apply (copy)", LOADS,
          "Kafka's formats (LogLoader.loadSegmentFiles); an index without its .log is deleted as orphaned",
          "00000000000000001200.log"),
    _name("<base>.log.cleaned (and .index, .timeindex, .txnindex)", rf"{_BASE}\.{_KIND}\.cleaned", PARTITION,
          "kcompact's executors (operations/cleaned.py), as Kafka's cleaner", DELETES,
          "LogLoader.removeTempFilesAndCollectSwapFiles deletes it, and every .swap at or above its base",
          "00000000000000001200.log.cleaned"),
    _name("<base>.log.swap (and .index, .timeindex, .txnindex)", rf"{_BASE}\.{_KIND}\.swap", PARTITION,
          "kcompact's swap, step 1 (operations/swap.py), as Kafka's cleaner", RECOVERS,
          "LogLoader.load completes the swap, or deletes it when at or above a .cleaned base offset",
          "00000000000000001200.index.swap"),
    _name("<base>.log.deleted (and .index, .timeindex, .txnindex, .snapshot)",
          rf"{_BASE}\.(?:log|index|timeindex|txnindex|snapshot)\.deleted", IN_PARTITIONS,
          "kcompact's swap, step 2, and retention (operations/swap.py, operations/retention.py)", DELETES,
          "LogLoader.removeTempFilesAndCollectSwapFiles deletes it: replaced data, garbage from its rename",
          "00000000000000001200.snapshot.deleted"),
    _name("<base>.index.tmp, <base>.timeindex.tmp, <base>.txnindex.tmp", rf"{_BASE}\.{_INDEX}\.tmp", PARTITION,
          "kcompact recover's storage.write_atomic (an index rebuilt, a .txnindex trimmed), cut short",
          IGNORES,
          "no index, log, .cleaned, .swap or .deleted name: LogLoader never reads it",
          "00000000000000001200.index.tmp"),
    _name("<base>.<kind>.<owner>.staged", rf"{_BASE}\.{_KIND}\.[A-Za-z0-9_-]+\.staged", PARTITION,
          "the object-store commit's tasks (operations/cleaned.py, operations/s3commit.py); object stores only",
          IGNORES, "no broker runs on an object store; copied to a disk, LogLoader never reads it",
          "00000000000000001200.log.kcompact-0123456789ab.staged"),
    # -- Kafka's own in a partition dir ------------------------------------------------------------
    _name("<base>.snapshot", rf"{_BASE}\.snapshot", IN_PARTITIONS, "Kafka; kcompact only renames it (retention)",
          LOADS, "the broker's producer state (ProducerStateManager)", "00000000000000001200.snapshot",
          kcompact_writes=False),
    _name("leader-epoch-checkpoint, partition.metadata",
          r"(?:leader-epoch-checkpoint|partition\.metadata)(?:\.tmp)?", IN_PARTITIONS, "Kafka", READS,
          "the broker's own", "leader-epoch-checkpoint", kcompact_writes=False),
    _name("quorum-state, <offset>-<epoch>.checkpoint", r"quorum-state|\d{20}-\d{10}\.checkpoint(?:\.part|\.deleted)?",
          METADATA, "Kafka (KRaft)", READS, "the raft layer's own (KafkaMetadataLog, Snapshots)",
          "00000000000000000100-0000000001.checkpoint", kcompact_writes=False),
)

_CACHE_DIR = next(n for n in TABLE if n.shown == "remote-log-index-cache/")
_METADATA_DIR = next(n for n in TABLE if n.shown == "__cluster_metadata-0/")


def entry(name: str, where: str, directory: bool = False) -> Name | None:
    """The entry of ``name`` found at ``where`` (a directory when ``directory``), or None."""
    for row in TABLE:
        if row.directory == directory and where in row.where and row.matches(name):
            return row
    return None


def entry_of_path(path: str) -> Name | None:
    """The entry of a path relative to a log dir: ``name`` at its root, ``dir/name`` in one of its
    directories; a trailing ``/`` marks a directory. None when no entry knows it there, or when it
    lies deeper than a partition dir (no broker looks there, and kcompact writes nothing there)."""
    directory = path.endswith("/")
    parts = path.strip("/").split("/")
    if len(parts) == 1:
        return entry(parts[0], ROOT, directory)
    if len(parts) != 2:
        return None
    parent = entry(parts[0], ROOT, directory=True)
    if parent is None:
        return None
    if parent is _CACHE_DIR:
        return parent  # the tiered-storage cache's own files
    return entry(parts[1], METADATA if parent is _METADATA_DIR else PARTITION, directory)


def unknown(paths: Iterable[str]) -> list[str]:
    """The paths (relative to a log dir, as ``entry_of_path`` takes them) that no entry of the
    table knows where they are, in their order: what a broker might reject or misread."""
    return [path for path in paths if entry_of_path(path) is None]
