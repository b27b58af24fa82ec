"""Read what the batch-level decisions need of one partition, and make them.

Runs on an executor, one partition per call: lists the partition dir, reads every
batch header (records are not decoded, control batches aside), the .txnindex files
and the offset index of the first dirty segment, then applies
``compaction.rules.decisions.plan_partition``. Bad bytes end it with a ``FormatError``
(file and position) that the job turns into an uncleanable partition; so do offsets that do not
increase from one batch to the next (a stale segment overlapping the one before it): Kafka's
cleaner fails on them when its offset index refuses the append, and marks the log uncleanable.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kcompact import storage
from kcompact.compaction.rules.cleaner_config import CleanerConfig
from kcompact.compaction.rules.decisions import PartitionPlan, plan_partition
from kcompact.compaction.rules.model import BATCH_TABLE, BatchInfo, SegmentInfo, table_of
from kcompact.errors import FormatError
from kcompact.logdir import broker_load
from kcompact.logdir.listing import Partition, Segment, scan_partition
from kcompact.readers import walk
from kcompact.readers.batch import ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TRANSACTIONAL
from kcompact.readers.indexes import parse_offset_index, parse_txn_index
from kcompact.readers.segment import to_torn_tail


def read_partition(path: str, topic: str, number: int, first_dirty: int, threads: int = 1,
                   listed: Partition | None = None) -> tuple[Partition, list[SegmentInfo], np.ndarray]:
    """The partition's segments and its batch table (``compaction.rules.model.BATCH_TABLE``): every
    batch header, a chunk of the file at a time (``readers.walk``, CRCs checked); a control
    batch's type and a legacy entry's inner messages decoded one by one (both are rare).
    ``threads``: segments read at once (the walk and the CRCs release the GIL); the first bad
    segment's error is the one raised, as when they are read in turn. ``listed``: the partition
    as the driver listed it (else it is listed here)."""
    part = listed if listed is not None else scan_partition(path, topic, number)
    segments = []
    for i, seg in enumerate(part.segments):
        holds_first_dirty = seg.base_offset <= first_dirty and (
            i + 1 == len(part.segments) or part.segments[i + 1].base_offset > first_dirty)
        segments.append(SegmentInfo(
            base_offset=seg.base_offset, size=seg.size, mtime_ms=seg.log.mtime_ms,
            index_size=seg.index.size if seg.index else 0,
            timeindex_size=seg.timeindex.size if seg.timeindex else 0,
            aborted=tuple(parse_txn_index(seg.txnindex.path, storage.read_bytes(seg.txnindex.path)))
            if seg.txnindex and seg.txnindex.size else (),  # an empty one is not read
            offset_index=tuple(parse_offset_index(seg.index.path, storage.read_bytes(seg.index.path)))
            if seg.index and holds_first_dirty else (),
        ))
    last = len(part.segments) - 1

    def read(i: int) -> list[np.ndarray]:
        return _tables(part.segments[i], i == last)

    if threads > 1 and last > 0:
        with ThreadPoolExecutor(threads) as pool:
            found = list(pool.map(read, range(last + 1)))
    else:  # no thread to start and hand each segment to: on a busy machine that wait is most of a small partition
        found = [read(i) for i in range(last + 1)]
    table = _joined([t for chunk_tables in found for t in chunk_tables])
    _offsets_increase(part, table)
    return part, segments, table


def _joined(tables: list[np.ndarray]) -> np.ndarray:
    """The chunks' batch tables as one. numpy's concatenate of structured arrays works out a
    promotion of their fields on each call, which outweighs a small partition's copy: the rows are
    joined as opaque items of the table's size, then seen as the table again."""
    if not tables:
        return np.empty(0, BATCH_TABLE)
    row = np.dtype((np.void, BATCH_TABLE.itemsize))
    return np.concatenate([t.view(row) for t in tables]).view(BATCH_TABLE)


def _offsets_increase(part: Partition, table: np.ndarray) -> None:
    """Each batch starts after the last offset of the batch before it, in the log's segment order
    (``logdir.broker_load.first_going_back``); the first that does not is a ``FormatError``
    naming both batches' files and offsets."""
    first = np.where(table["magic"] == 2, table["base_offset"], table["last_offset"])
    k = broker_load.first_going_back(first, table["last_offset"], -1)
    if k is None:
        return
    prev, bad = table[k - 1], table[k]
    paths = {seg.base_offset: seg.log.path for seg in part.segments}
    said = broker_load.going_back("", (int(bad["base_offset"]), int(bad["last_offset"])),
                                  f"byte {prev['position']} of {paths[int(prev['segment'])]}",
                                  (int(prev["base_offset"]), int(prev["last_offset"])))
    raise FormatError(paths[int(bad["segment"])], int(bad["position"]), said.removeprefix(": "))


def _tables(seg: Segment, active: bool) -> list[np.ndarray]:
    """A segment's batch tables, a chunk each; the active segment's end at a torn tail, as the log's."""
    path = seg.log.path
    with storage.open_read(path, seg.size) as f:
        chunks = walk.read_chunks(f, path)
        return [_table(chunk, seg.base_offset) for chunk in (to_torn_tail(chunks, f, path) if active else chunks)]


def _table(chunk: walk.Chunk, segment: int) -> np.ndarray:
    e = chunk.entries
    t = np.empty(len(e), BATCH_TABLE)
    attributes = e[:, walk.ATTRIBUTES]
    t["segment"], t["position"], t["size"] = segment, chunk.file_position + e[:, walk.POSITION], e[:, walk.SIZE]
    t["magic"], t["base_offset"] = e[:, walk.MAGIC], e[:, walk.BASE_OFFSET]
    t["last_offset"] = e[:, walk.BASE_OFFSET] + e[:, walk.LAST_OFFSET_DELTA]
    t["producer_id"], t["producer_epoch"] = e[:, walk.PRODUCER_ID], e[:, walk.PRODUCER_EPOCH]
    t["transactional"] = (attributes & ATTR_TRANSACTIONAL) != 0
    t["control"] = (attributes & ATTR_CONTROL) != 0
    t["control_type"] = -1
    t["has_horizon"] = (attributes & ATTR_DELETE_HORIZON) != 0
    t["horizon"] = np.where(t["has_horizon"], e[:, walk.BASE_TIMESTAMP], -1)
    t["max_timestamp"], t["record_count"] = e[:, walk.MAX_TIMESTAMP], e[:, walk.RECORDS_COUNT]
    legacy = e[:, walk.MAGIC] != 2
    for k in np.flatnonzero(legacy | (t["control"] & (t["record_count"] > 0))).tolist():
        t[k] = table_of([BatchInfo.of(chunk.batch(k), segment)])[0]
    return t


def plan(path: str, topic: str, number: int, *, log_start: int, first_dirty: int, first_uncleanable: int,
         now: int, config: CleanerConfig, retain_last_empty_at: int | None, threads: int = 1,
         listed: Partition | None = None) -> tuple[Partition, np.ndarray, PartitionPlan]:
    part, segments, batches = read_partition(path, topic, number, first_dirty, threads, listed)
    decided = plan_partition(
        segments, batches, log_start=log_start, first_dirty=first_dirty, first_uncleanable=first_uncleanable,
        now=now, delete_retention_ms=config.delete_retention_ms, segment_bytes=config.segment_bytes,
        segment_index_bytes=config.segment_index_bytes, producer_expiration_ms=config.producer_id_expiration_ms,
        retain_last_empty_at=retain_last_empty_at,
    )
    return part, batches, decided
