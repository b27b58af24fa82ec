"""What a broker does with a partition dir's files when it loads the log, as Kafka's LogLoader,
LogSegment.sanityCheck and LogManager do it (3.x to 4.x): each state is accepted, repaired,
passed over or refused. plan, verify, compact and dump all ask here, so they agree: what Kafka
repairs is planned as repaired, what it deletes is named in a note and otherwise ignored, and
only what it refuses is refused.

Pure functions of names, listing facts and parse errors; no file is opened.
"""

from __future__ import annotations

import numpy as np

from kcompact.errors import FormatError
from kcompact.readers.checkpoint import EntryNumberError

# LogLoader.loadSegmentFiles: no offset index -> NoSuchFileException -> recoverSegment, which
# rebuilds the offset, time and transaction indexes from the .log
REBUILT = "a broker rebuilds it from the .log on load"
# LogSegment.sanityCheck: a time index that did not exist is created empty (resize 0); the segment's
# largest timestamp is then its .log's modification time (LogSegment.largestTimestamp), for time
# retention and the lag rules
MISSING = {
    "index": f"missing for a closed segment: {REBUILT}",
    "timeindex": "missing for a closed segment: a broker creates it empty on load and goes by the .log's "
                 "modification time for the segment's largest timestamp",
    "both": f"missing for a closed segment: {REBUILT}, with the missing .index",
}
# LogLoader.removeTempFilesAndCollectSwapFiles
LEFTOVER_MEANING = {
    ".cleaned": "leftover of an unfinished segment rewrite (.cleaned): a broker deletes it on load",
    ".swap": "leftover of an unfinished segment replacement (.swap): a broker completes or drops it on load",
    ".deleted": "leftover of a replaced segment (.deleted): a broker deletes it on load",
}
# LogLoader.loadSegmentFiles: "Found an orphaned index file ..., with no corresponding log file"
ORPHAN = "but no {log}: a broker deletes them on load"
# names a broker parses a base offset out of on load (LogLoader: .log and index files; producer
# snapshots): misnamed, it fails to load the log or loads another segment than the file holds
OFFSET_NAMED = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
NOT_A_SEGMENT_NAME = "not a Kafka segment file name"
PASSED_OVER = f"{NOT_A_SEGMENT_NAME}: a broker passes over it"


def missing_indexes(has_index: bool, has_timeindex: bool) -> dict[str, str]:
    """A closed segment's missing ``index``/``timeindex`` (by kind), given which of the two it has,
    and what a broker does about each."""
    if not has_index:
        return {"index": MISSING["index"], **({} if has_timeindex else {"timeindex": MISSING["both"]})}
    return {} if has_timeindex else {"timeindex": MISSING["timeindex"]}


def rebuilds_time_index(has_index: bool) -> bool:
    """Whether a broker rebuilds a segment's time index on load (it has no offset index): then the
    segment's largest timestamp is its batches' largest, not the .log's mtime."""
    return not has_index


def orphan_note(base_offset: int, log_name: str) -> str:
    """Index files without their .log: named, never refused (a broker deletes them)."""
    return f"index files for base offset {base_offset} " + ORPHAN.format(log=log_name)


def refuses_name(name: str) -> bool:
    """Whether a broker refuses a file of a partition dir that follows no segment naming (it is
    named like a segment file: the broker parses a base offset out of it); it passes over the rest."""
    return name.endswith(OFFSET_NAMED)


# PartitionMetadataReadBuffer.read splits its first line; an empty file has none, the read throws
# and UnifiedLog cannot load the log (the broker's log loading fails with it)
EMPTY_PARTITION_METADATA = ("empty: a broker reads the topic id from it on load, fails on an empty file "
                            "(PartitionMetadataFile) and cannot load the log")
# KafkaRaftServer.initializeLogDirs: an empty meta.properties loads as a version 0 file holding nothing
# (MetaProperties.Builder), and a log dir without a node.id stops the broker's start ("node ID not found";
# 3.3 to 3.6: MetaProperties.parse asks for version 1). Every command refuses the log dir with it.
EMPTY_META_PROPERTIES = ("empty: a KRaft broker fails to start with it (it finds no node.id in it: "
                         "KafkaRaftServer.initializeLogDirs); restore it, from a copy or another log dir of the broker")


def meta_properties_problem(size: int | None) -> str | None:
    """What keeps a broker from starting with a log dir whose meta.properties is ``size`` bytes
    (None: no file, which a ZooKeeper-mode broker writes and a new log dir lacks; not judged here)."""
    return EMPTY_META_PROPERTIES if size == 0 else None


# LogManager.loadLogs reads these two per log dir and, on any exception, warns and loads the logs as if
# the file held no entries. It reads them through CheckpointFileWithFailureHandler, though, which on
# an IOException (every fault of CheckpointFile's reader but a number parseInt/parseLong refuses in an
# entry line: that NumberFormatException passes it by) first marks the log dir offline: the broker then
# stops serving it, and halts when it is its only or its metadata log dir (LogDirFailureChannel).
RESET_ON_LOAD = {
    "recovery-point-offset-checkpoint": "resets every recovery point to 0 on load (and recovers every segment)",
    "log-start-offset-checkpoint": "takes each log's first segment's base offset as its log start on load",
}
OFFLINE = ("a broker that reads it marks this log dir offline (CheckpointFileWithFailureHandler) and stops "
           "serving and cleaning it; fix or remove the file")


def unreadable_checkpoint(name: str, exc: FormatError) -> tuple[bool, str]:
    """What a broker makes of a root checkpoint file ``name`` its reader failed on with ``exc``:
    (whether the log dir is refused, the sentence that says so after the fault). Only the two that
    LogManager.loadLogs reads fall back, and only on a NumberFormatException."""
    if name in RESET_ON_LOAD and isinstance(exc, EntryNumberError):
        return False, f"a broker that cannot read it {RESET_ON_LOAD[name]}"
    return True, OFFLINE


def broker_file_problem(name: str, size: int) -> str | None:
    """What keeps a broker from loading a partition dir's own file ``name`` of ``size`` bytes
    (None: it loads it). An empty ``leader-epoch-checkpoint`` is none: CheckpointFile reads it
    as no entries."""
    return EMPTY_PARTITION_METADATA if name == "partition.metadata" and size == 0 else None


# LogManager.loadLogs parses every directory of a log dir as <topic>-<partition> (the tiered
# storage index cache aside) and fails the broker's start on one that is not
REMOTE_INDEX_CACHE = "remote-log-index-cache"
FOREIGN_DIR = ("directory name is not <topic>-<partition>: a broker fails to start with it in its log dir "
               "(LocalLog.parseTopicPartitionName); move it out of the log dir")


def ignores_dir(name: str) -> bool:
    """A directory of a log dir that a broker's load passes over without parsing its name."""
    return name == REMOTE_INDEX_CACHE


def first_going_back(first: np.ndarray, last: np.ndarray, before: int) -> int | None:
    """The first batch (by index) that does not start after the last offset of the one before it
    (``before``: the last offset ahead of the first batch; -1: none), or None. A stale segment
    overlapping the one before it is one: Kafka's cleaner fails on it (its offset index refuses
    the append) and marks the log uncleanable. ``first``: each batch's base offset (a legacy
    wrapper's own offset), ``last``: its last offset."""
    if not len(first):
        return None
    back = np.flatnonzero(first <= np.concatenate(([before], last[:-1])))
    return int(back[0]) if len(back) else None


def going_back(at: str, offsets: tuple[int, int], after: str, after_offsets: tuple[int, int]) -> str:
    """What a batch at ``at`` (file: byte) whose offsets go back says."""
    return (f"{at}: batch at offsets {offsets[0]}..{offsets[1]} does not follow the batch at offsets "
            f"{after_offsets[0]}..{after_offsets[1]} ({after}): offsets go back, segments overlap; Kafka's cleaner "
            "fails on this log and marks it uncleanable")
