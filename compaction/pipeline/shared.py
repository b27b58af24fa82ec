"""The shared path: partitions too big for one worker's memory, their offset map made by many tasks.

Tasks of about equal bytes read the partitions' byte ranges (``logdir.splits``) and ship
(segment group, key) facts in blobs by key hash (``compaction.cleaning.map_pass``); a task per hash bucket
makes the map's offsets for its bucket and sends each group's rewrite task only the keys that
supersede one of its records. No task holds a whole map, and no row per record or per key crosses
a shuffle: blobs of megabytes do. Which partitions come here: ``compaction.pipeline.routing``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from kcompact.compaction.cleaning.map_pass import (
    TABLE_BYTES,
    bucket_of,
    concat,
    packed,
    read_keys,
    reduce_bucket,
    unpack,
)
from kcompact.compaction.cleaning.offset_map import Entries, KeyTable
from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.cleaning.results import ABORTED_BY_OPERATOR, REASON_OF_CODE, GroupResult
from kcompact.compaction.cleaning.rewrite import GroupJob, GroupPlans, Lookup, count_group, made_durable, rewrite_group
from kcompact.compaction.pipeline.routing import MIN_BUCKET_BYTES
from kcompact.compaction.pipeline.tasks import BLOB_SCHEMA, SHARED_TASK_BYTES, bins, ranged, slots, task_count
from kcompact.errors.failure import Failure
from kcompact.logdir.listing import scan_partition
from kcompact.logdir.splits import OffsetRange, partition_ranges
from kcompact.operations import states
from kcompact.session import kinds


def clean(spark, pids: list[int], rows: list[PartitionBatches], batches, jobs: dict[int, tuple[GroupJob, GroupPlans]],
          groups_of: dict[int, list[int]], dry_run: bool, owner: str, map_bytes: int, budget: int, step_bytes: int):
    """A DataFrame of ``GroupResult``: the groups of partitions ``pids`` (``batches``: the job's
    ``Batches``); ``map_bytes``: their maps together, at most; ``budget``: a task's map memory;
    ``step_bytes``: its stages' smallest task (``JobSettings.step_bytes``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    pid_of_gid = batches.pid_of_gid

    def result(gid: int, lookup: Lookup) -> GroupResult:
        job, plans = jobs[gid]
        base = GroupResult(gid, job.path, job.group)
        if dry_run:
            return base.but(codes=tuple(count_group(job, plans, lookup)))
        if not states.held_by(job.path, owner):  # aborted (or lease lost): stop at this group boundary
            return base.but(error=ABORTED_BY_OPERATOR, failure=Failure.ABORTED.value, codes=(0,) * len(REASON_OF_CODE))
        return rewrite_group(job, plans, lookup).but(gid=gid)

    splits = [(pid, split) for pid in pids for split in partition_ranges(
        scan_partition(rows[pid].path, rows[pid].topic, rows[pid].partition),
        OffsetRange(None, rows[pid].latest_offset + 1))]
    sizes = [split.end - split.start for _, split in splits]
    shared = {"task_bytes": SHARED_TASK_BYTES, "per_core": 2}
    map_bins = bins(sizes, task_count(spark, sum(sizes), len(splits), **shared, step_bytes=step_bytes))
    # a bucket's task holds its blobs twice (as they came, then joined) and a few int64s per entry
    # to sort them by key hash: about twice its share of the map's bytes
    buckets = max(task_count(spark, sum(sizes), 1 << 30, **shared),
                  -(-2 * map_bytes // max(budget, MIN_BUCKET_BYTES)))
    bucket_slots = np.array(slots(buckets), np.int32)
    gids = [gid for pid in pids for gid in groups_of[pid]]
    group_bytes = [int(jobs[gid][1].size.sum()) for gid in gids]
    rewrite_bins = bins(group_bytes, task_count(spark, sum(group_bytes), len(gids), **shared, step_bytes=step_bytes))
    rewrite_slots = np.array(slots(len(rewrite_bins)), np.int32)
    bin_of_slot = {slot: b for b, slot in enumerate(rewrite_slots.tolist())}
    slot_of_gid = np.full(len(pid_of_gid), -1, np.int32)
    for b, members in enumerate(rewrite_bins):
        slot_of_gid[[gids[i] for i in members]] = b
    # the shared partitions' own plans and offsets: the job's whole ``batches`` would go to every task
    planned = {pid: batches.planned(pid) for pid in pids}
    first_dirty = {pid: int(batches.first_dirty[pid]) for pid in pids}
    latest = {pid: int(batches.latest_offset[pid]) for pid in pids}
    # a map task's table holds at most half the map budget: a full table beside its entries and
    # blobs left a capped map task short of its cap
    table_bytes = min(TABLE_BYTES, budget // 2)

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in (b for rb in ids for b in rb.column(0).to_pylist()):
            for pid, split in (splits[i] for i in map_bins[b]):
                plans = planned[pid].get(split.segment_base)
                if plans is None:
                    continue
                for blobs in read_keys(split.path, split.start, split.end, plans, first_dirty[pid], latest[pid],
                                       ship, table_bytes, split.file_size):
                    yield from blobs

    def ship(entries: Entries) -> Iterator[pa.RecordBatch]:
        return (_blob(bucket_slots[t], blob) for t, blob in packed(entries, bucket_of(entries, pid_of_gid, buckets)))

    def reduce(found: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        blobs = [unpack(blob) for rb in found for blob in _views(rb.column("blob"))]
        if not blobs:
            return
        joined, blobs = concat(blobs), None  # the blobs' memory goes as soon as they are joined
        entries = reduce_bucket(joined, pid_of_gid)
        for t, blob in packed(entries, slot_of_gid[entries.tags]):
            yield _blob(rewrite_slots[t], blob)

    def rewrite(found: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        mine, blobs = set(), []
        for rb in found:
            for slot, blob in zip(rb.column("slot").to_pylist(), _views(rb.column("blob")), strict=True):
                mine.add(bin_of_slot[slot])
                if len(blob):
                    blobs.append(unpack(blob))
        table = KeyTable.for_keys(sum(len(e) for e in blobs))  # sized once: it does not grow
        for e in blobs:
            table.upsert(e.keys, e.offsets[:-1], np.diff(e.offsets), e.tags, e.high)
        blobs = None
        done = [result(gid, Lookup(table, gid)) for b in sorted(mine) for gid in (gids[i] for i in rewrite_bins[b])]
        if done:
            yield GroupResult.batch(made_durable(done))  # the groups' files durable before they are reported

    keys = ranged(spark, len(map_bins)).mapInArrow(kinds.carrying(spark, read), from_arrow_schema(BLOB_SCHEMA))
    entries = keys.repartition(buckets, "slot").mapInArrow(reduce, from_arrow_schema(BLOB_SCHEMA))
    marks = spark.createDataFrame(pa.table({"slot": pa.array(rewrite_slots), "blob": pa.nulls(len(rewrite_slots),
                                                                                            pa.binary())}))
    return (entries.unionByName(marks).repartition(len(rewrite_bins), "slot")
            .mapInArrow(kinds.carrying(spark, rewrite), from_arrow_schema(GroupResult.schema())))


def _blob(slot: int, blob: np.ndarray) -> pa.RecordBatch:
    """One blob, to ``slot``, as a batch of ``BLOB_SCHEMA`` (its bytes not copied)."""
    column = pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, len(blob)], np.int32)),
                                                   pa.py_buffer(blob)])
    return pa.RecordBatch.from_arrays([pa.array([slot], pa.int32()), column], schema=BLOB_SCHEMA)


def _views(blobs: pa.BinaryArray) -> list[np.ndarray]:
    """Each blob as a view of the column's buffer: no copy (fresh memory costs more than the bytes)."""
    offsets = np.frombuffer(blobs.buffers()[1], np.int32)[blobs.offset:blobs.offset + len(blobs) + 1].tolist()
    data = np.frombuffer(blobs.buffers()[2] or b"", np.uint8)  # no buffer: every blob null (a slot's mark)
    return [data[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
