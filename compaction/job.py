"""The compaction job: every selected partition of a plan cleaned as Kafka's cleaner would.

Stages (Spark jobs named by job groups):
1. batch plans: tasks read batch headers, partition by partition, a chunk of a segment at a time
   (``readers.walk``), and decide per batch what Kafka's cleaner decides before looking at
   records (``compaction.decisions``, over columns of headers);
2. offset map: the records of the batches that feed the map, keys only (``compaction.map_pass``):
   a partition of at most ``WHOLE_BYTES`` gets its map (exact keys, ``compaction.offset_map``)
   in the task that reads it, which then rewrites its groups; a larger partition is read by many
   tasks that ship (group, key) facts in blobs by key hash, and a task per hash bucket makes the
   map's offsets and sends each group only the keys that supersede one of its records, so a key
   set may exceed any one executor's memory;
3. keep flags and 4. rewrite: per segment group, chunk by chunk, each record's fate (Kafka's
   shouldRetainRecord), each batch's outcome (filterTo), and the ``.cleaned`` files
   (``compaction.rewrite``, ``operations.cleaned``);
5. commit, on the driver alone: per partition, every group swapped in or none.
Stages 2-4 are one Spark job: nothing is cached, and no row per record or per key crosses a
shuffle. A Python task costs Spark about 0.1 s of fixed work, so each core takes one task (of at
most ``TASK_BYTES``), shares balanced by bytes. A dry run counts and writes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from compaction import partition_scan
from compaction.leases import LeaseKeeper
from compaction.map_pass import TABLE_BYTES, Planned, bucket_of, concat, packed, read_keys, reduce_bucket, unpack
from compaction.offset_map import Entries, KeyTable
from compaction.report import PartitionReport, Report, group_outcomes
from compaction.decisions import DISCARD, PLAN_FLAGS
from compaction.rewrite import (
    ABORTED_BY_OPERATOR,
    IO_ERROR,
    OUT_OF_MEMORY,
    OUTPUT_MEMORY,
    REASON_OF_CODE,
    RESULT_SCHEMA,
    GroupJob,
    GroupPlans,
    Lookup,
    clean_partition,
    count_group,
    memory_error,
    rewrite_group,
)
from conf.units import spark_size
from operations import s3commit, states
from operations.deleted import Removal
from operations.recover import recover_partition
from operations.checkpoints import set_cleaner_offset, update_cleaner_offsets
from operations.swap import commit_partition
from logdir.splits import OffsetRange, partition_ranges
from readers.errors import FormatError
from readers.indexes import AbortedTxn
from logdir.listing import SEGMENT_KINDS, scan_partition, segment_name
from writers.chunks import BufferSizes

CONFIG_KEYS = ("delete.retention.ms", "segment.bytes", "segment.index.bytes", "producer.id.expiration.ms",
               "index.interval.bytes", "max.message.bytes", "message.max.bytes", "log.cleaner.io.buffer.size",
               "log.cleaner.threads")

# A partition's batch plans travel from its stage 1 task as one blob of these records: a nested
# Arrow list of structs would cost Spark a row conversion per batch, twice.
BATCH_PLAN = np.dtype([
    ("segment", "<i8"), ("position", "<i8"), ("size", "<i8"), ("records", "<i4"), ("group", "<i4"),
    ("feeds_map", "?"), *((name, "?") for name in PLAN_FLAGS),
])
GROUP = pa.struct([
    ("group", pa.int32()), ("base_offset", pa.int64()), ("segments", pa.list_(pa.int64())),
    ("mtime_ms", pa.int64()),
    ("aborted", pa.list_(pa.struct([("producer_id", pa.int64()), ("first_offset", pa.int64()),
                                    ("last_offset", pa.int64()), ("last_stable_offset", pa.int64())]))),
])
PARTITION_PLAN = pa.schema([
    ("path", pa.string()), ("log_dir", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("first_dirty", pa.int64()), ("first_uncleanable", pa.int64()), ("latest_offset", pa.int64()),
    ("config", pa.string()), ("seconds", pa.float64()), ("error", pa.string()),
    ("batches", pa.binary()), ("groups", pa.list_(GROUP)),
])


def _config_values(row: dict) -> dict[str, int]:
    strings = dict(row["config"])
    return {key: int(strings[key]) for key in CONFIG_KEYS}


# -- tasks: a Python task costs Spark about 0.1 s of fixed work (2 cores), so each takes a share
# of the work rather than one partition, split or group: one task per core, each at most
# TASK_BYTES (a failed task's share is read again); shares are balanced by bytes, largest first.
# Two tasks per core instead cost multi's bench 0.1-0.3 s more at the same balance. The shared
# path's tasks take SHARED_TASK_BYTES, two per core: a task's key table is sized for the records
# it reads (up to half the map budget, map_pass.TABLE_BYTES at most, then shipped and begun
# again), and a 1 GiB worker cap holds it only for shares that small.
TASK_BYTES = 1 << 30
SHARED_TASK_BYTES = 256 << 20
WHOLE_BYTES = 256 << 20  # a partition of at most this is read by one task, which makes its map too
# A larger partition is read whole too when its offset map fits a task's map memory: the Spark
# setting MAP_MEMORY, by default a quarter of the Python worker's cap (spark.executor.pyspark.memory,
# which caps its address space: Python, numba and Arrow take half a gigabyte of it before any data)
# or, uncapped, DEFAULT_MAP_MEMORY. A key costs the map at most MAP_BYTES_PER_KEY (a 40-byte row,
# two index slots, up to 40 bytes of key); a partition's keys are at most its feeding records.
MAP_MEMORY = "spark.kcompact.map.memory"
DEFAULT_MAP_MEMORY = 2 << 30
MAP_BYTES_PER_KEY = 96
MIN_BUCKET_BYTES = 64 << 20  # the least map memory a hash bucket of the shared path is given
# Under a worker cap, a larger partition is read whole only when the cap also holds, beside the
# worker's imports (WORKER_IMPORTS), what reading it whole holds (``_whole_bytes``): its map tables
# (sized up front for every feeding record), the output of two segment groups (the one read and
# the one being written, each spilled past OUTPUT_MEMORY), and the ranges decoded ahead and
# rendered behind the map, WHOLE_FIXED plus WHOLE_PER_THREAD a thread. Drawn from measured peaks
# of a worker's address space, read whole: imports alone 535 MiB; single (938 MB, 2.8 M feeding
# records, 64 MiB segments) 1183 MiB on one thread, 1324 MiB on two; keys (1079 MB, 11.9 M, 256
# MiB segments) 2682 MiB on two, the largest beside its tables and outputs, which sets
# WHOLE_FIXED. A partition the cap cannot hold whole takes the shared path, which its map budget
# bounds: single under a 1 GiB cap peaked at 777 MiB there, after failing whole.
WORKER_IMPORTS = 560 << 20
WHOLE_FIXED = 350 << 20
WHOLE_PER_THREAD = 140 << 20
# Threads a task of batch plans or of whole partitions uses (rounded down to a power of two: the
# map's key shards); by default the cores its job leaves idle (one large partition: all of them).
THREADS = "spark.kcompact.threads"
# Whether the rewrite writes its .log files past the page cache (``storage.DirectFile``), "true" by
# default; "false" writes them through it, as Kafka's cleaner does, leaving them in the cache.
DIRECT_WRITES = "spark.kcompact.write.direct"


def _task_count(spark, total_bytes: int, items: int, task_bytes: int = TASK_BYTES, per_core: int = 1) -> int:
    wanted = max(per_core * spark.sparkContext.defaultParallelism, -(-total_bytes // task_bytes))
    return max(1, min(items, wanted))


def _bins(sizes: list[int], n: int) -> list[list[int]]:
    """Indexes of ``sizes`` in at most ``n`` bins of nearly equal sums: largest first, each into
    the lightest bin; the heaviest bin first (Spark starts tasks in order)."""
    heap = [(0, b) for b in range(n)]
    bins: list[list[int]] = [[] for _ in range(n)]
    loads = [0] * n
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        load, b = heapq.heappop(heap)
        bins[b].append(i)
        loads[b] = load + sizes[i]
        heapq.heappush(heap, (loads[b], b))
    return [bins[b] for b in sorted(range(n), key=lambda b: -loads[b]) if bins[b]]


def _ranged(spark, n: int):
    """Rows 0..n-1, one per Spark partition: task i knows its share by its row."""
    return spark.range(0, n, 1, max(n, 1))


def _slots(n: int) -> list[int]:
    """Values v[0..n-1] such that ``repartition(n, column)`` sends a row whose int column is v[p]
    to partition p: Spark's HashPartitioning (Murmur3 of the int, seed 42, modulo n) inverted.
    Were Spark to hash otherwise, rows would only meet in other tasks: the balance would
    suffer, never the result."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < n:
        found.setdefault(_spark_int_hash(value) % n, value)
        value += 1
    return [found[p] for p in range(n)]


def _spark_int_hash(value: int) -> int:
    """Spark's ``hash(int)``: Murmur3_x86_32.hashInt(value, 42), as a signed int."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k = rotl((value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h = (rotl(42 ^ k, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h = (h ^ (h >> 16)) * 0x85EBCA6B & 0xFFFFFFFF
    h = (h ^ (h >> 13)) * 0xC2B2AE35 & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


PLAN_INPUT = ("path", "log_dir", "topic", "partition", "log_start_offset", "first_dirty_offset",
              "first_uncleanable_dirty_offset", "config")


def _batch_plans(spark, selected: pa.Table, now: int) -> pa.Table:
    """Stage 1: partitions in a few tasks of about equal bytes (the rows travel with the tasks,
    no shuffle), the result in the plan's order; a task with fewer partitions than cores reads
    a partition's segments on as many threads."""
    from pyspark.sql.pandas.types import from_arrow_schema

    rows = selected.select(list(PLAN_INPUT)).to_pylist()
    sizes = [size or 0 for size in selected.column("total_bytes").to_pylist()]
    bins = _bins(sizes, _task_count(spark, sum(sizes), len(rows)))
    threads = _threads(spark, len(bins))

    def run(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in ids:
            for b in rb.column(0).to_pylist():
                yield pa.RecordBatch.from_pylist([_plan_one(rows[i], now, threads) for i in bins[b]],
                                                 schema=PARTITION_PLAN)

    planned = _ranged(spark, len(bins)).mapInArrow(run, from_arrow_schema(PARTITION_PLAN)).toArrow()
    rank = {path: i for i, path in enumerate(selected.column("path").to_pylist())}
    return planned.take(sorted(range(planned.num_rows), key=lambda i: rank[planned.column("path")[i].as_py()]))


def _plan_one(row: dict, now: int, threads: int = 1) -> dict:
    """One partition's batch plans; ``threads``: its segments read at once (the cores its task
    leaves idle)."""
    started = time.monotonic()
    config = _config_values(row)
    base = {"path": row["path"], "log_dir": row["log_dir"], "topic": row["topic"], "partition": row["partition"],
            "first_dirty": row["first_dirty_offset"], "first_uncleanable": row["first_uncleanable_dirty_offset"],
            "config": json.dumps(config), "batches": b"", "groups": [], "latest_offset": None, "error": None}
    try:
        _, table, decided = partition_scan.plan(
            row["path"], row["topic"], row["partition"], log_start=row["log_start_offset"],
            first_dirty=row["first_dirty_offset"], first_uncleanable=row["first_uncleanable_dirty_offset"],
            now=now, config=config, threads=threads)
    except (FormatError, OSError, MemoryError) as exc:
        return {**base, "seconds": time.monotonic() - started, "error": memory_error(exc) or str(exc)}
    rewritten = decided.group >= 0
    plans = np.zeros(int(rewritten.sum()), BATCH_PLAN)
    for name in ("segment", "position", "size"):
        plans[name] = table[name][rewritten]
    plans["records"] = table["record_count"][rewritten]
    plans["group"], plans["feeds_map"] = decided.group[rewritten], decided.feeds[rewritten]
    for i, name in enumerate(PLAN_FLAGS):
        plans[name] = decided.flags[rewritten, i]
    base["batches"] = plans.tobytes()
    base["groups"] = [
        {"group": g, "base_offset": group[0].base_offset, "segments": [s.base_offset for s in group],
         "mtime_ms": group[-1].mtime_ms,
         "aborted": [{"producer_id": t.producer_id, "first_offset": t.first_offset, "last_offset": t.last_offset,
                      "last_stable_offset": t.last_stable_offset} for t in decided.txn_index.get(g, [])]}
        for g, group in enumerate(decided.groups)
    ]
    base["latest_offset"] = decided.latest_offset
    base["seconds"] = time.monotonic() - started
    return base


# Every shuffle here has its partition count set, so adaptive execution has nothing to adapt; it
# would only split the job at each shuffle and plan again in between. Blob rows are megabytes:
# Arrow batches of a few of them, not thousands.
JOB_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.execution.arrow.maxRecordsPerBatch": "16"}
BLOB_SCHEMA = pa.schema([("slot", pa.int32()), ("blob", pa.binary())])


@contextlib.contextmanager
def _sql_conf(spark, values: dict[str, str]) -> Iterator[None]:
    """The session's SQL settings ``values`` for the duration, then what they were."""
    before = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)




@dataclass(slots=True)
class JobResult:
    report: Report
    uncleanable: dict[str, str] = field(default_factory=dict)  # partition dir -> reason
    # object stores: partition dir -> the latest commit record generation seen under our lease
    generations: dict[str, int] = field(default_factory=dict)
    # log dir -> {(topic, partition): first dirty offset} of the partitions whose cleaning failed:
    # Kafka's cleanLog writes that entry (doneCleaning) whether the cleaning succeeded or threw
    done_cleaning: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)  # what the commits renamed to .deleted, to remove

    def fail(self, row: dict, transient: bool = False, groups: list[dict] = (), cleaning: bool = True) -> None:
        """A partition this run could not clean: reported (with what became of each segment group:
        ``groups``), and marked uncleanable at the end unless the cause is transient (an I/O
        error, a log that changed under the job) or the task's memory, no fault of the log's."""
        if not transient and not row["error"].startswith((IO_ERROR, OUT_OF_MEMORY)):
            self.uncleanable[row["path"]] = row["error"]
        if cleaning and not transient:
            self.done_cleaning.setdefault(row["log_dir"], {})[row["topic"], row["partition"]] = row["first_dirty"]
        self.report.partitions.append(PartitionReport.failed(row, groups))


class Stopwatch:
    """Wall seconds per stage, laps back to back: their sum is the time since ``since``."""

    def __init__(self, since: float):
        self.last = since
        self.laps: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        at = time.monotonic()
        self.laps[stage] = at - self.last
        self.last = at


@dataclass(frozen=True)
class Batches:
    """Every batch plan of the partitions being cleaned, as columns in plan order (partition ``pid``,
    then file order), with ``gid`` the global index of the batch's output segment group. Shipped
    to executors with the tasks (a few bytes per batch), so that records meet their batch plan
    in the task that reads them instead of in a join."""

    starts: np.ndarray  # partition pid's rows are [starts[pid], starts[pid + 1])
    sizes: np.ndarray
    records: np.ndarray  # records per batch, by its header
    first_dirty: np.ndarray  # per partition
    latest_offset: np.ndarray  # per partition
    segment: np.ndarray
    position: np.ndarray
    gid: np.ndarray
    feeds_map: np.ndarray
    flags: np.ndarray  # (batches, len(PLAN_FLAGS)) bool
    pid_of_gid: np.ndarray  # the partition (row) of each group, batches or none

    @classmethod
    def of(cls, ok: pa.Table) -> Batches:
        blobs = ok.column("batches").to_pylist()
        plans = np.frombuffer(b"".join(blobs), BATCH_PLAN)
        counts = np.array([len(b) // BATCH_PLAN.itemsize for b in blobs], np.int64)
        groups = pa.compute.list_value_length(ok.column("groups")).to_numpy(zero_copy_only=False)
        group_starts = np.concatenate(([0], np.cumsum(groups)[:-1])).astype(np.int64)
        pid = np.repeat(np.arange(ok.num_rows), counts)
        return cls(
            starts=np.concatenate(([0], np.cumsum(counts))), sizes=plans["size"],
            records=plans["records"].astype(np.int64),
            first_dirty=ok.column("first_dirty").to_numpy(), latest_offset=ok.column("latest_offset").to_numpy(),
            segment=plans["segment"].copy(), position=plans["position"].copy(),
            gid=(group_starts[pid] + plans["group"]).astype(np.int32), feeds_map=plans["feeds_map"].copy(),
            flags=np.stack([plans[name] for name in PLAN_FLAGS], axis=1).reshape(len(plans), len(PLAN_FLAGS)),
            pid_of_gid=np.repeat(np.arange(ok.num_rows), groups),
        )

    def report_row(self, row: dict, pid: int) -> dict:
        """``row`` with its batches as ``PartitionReport.of`` reads them (their sizes)."""
        sizes = self.sizes[self.starts[pid]:self.starts[pid + 1]].tolist()
        return row | {"batches": [{"size": size} for size in sizes]}

    def group_plans(self, gid: int) -> GroupPlans:
        lo, hi = np.searchsorted(self.gid, gid, "left"), np.searchsorted(self.gid, gid, "right")
        return GroupPlans(self.segment[lo:hi], self.position[lo:hi], self.sizes[lo:hi], self.flags[lo:hi],
                          self.feeds_map[lo:hi])

    def map_keys(self, pid: int) -> int:
        """At most how many keys partition ``pid``'s offset map holds: the records of the batches
        that feed it."""
        lo, hi = self.starts[pid], self.starts[pid + 1]
        return int(self.records[lo:hi][self.feeds_map[lo:hi]].sum())

    def planned(self, pid: int) -> dict[int, Planned]:
        """The batch plans of partition ``pid`` as the map pass reads them, per segment base offset."""
        lo, hi = self.starts[pid], self.starts[pid + 1]
        segment = self.segment[lo:hi]
        out = {}
        for base in np.unique(segment).tolist():
            at = lo + np.flatnonzero(segment == base)
            out[base] = Planned(self.position[at], self.feeds_map[at], self.flags[at, DISCARD], self.gid[at].astype(np.int64),
                                self.records[at])
        return out


def run(spark, plan: pa.Table, now: int, dry_run: bool = False, progress=print,
        ready: float | None = None, leases: LeaseKeeper | None = None, removal: Removal | None = None) -> JobResult:
    """Clean every selected partition of ``plan`` (a table with the planner's schema).
    ``ready``: ``time.monotonic()`` when the session was ready, so the report's stages start with planning.
    ``leases``: the keeper of this job's leases (default: a new one with the default lease).
    ``removal``: started on the replaced segments' files once every partition is committed, for
    the caller to wait on while it still holds the log dirs' locks (the command line writes its
    report meanwhile); by default they are removed before this returns."""
    check_settings(spark)
    started = time.monotonic()
    watch = Stopwatch(started if ready is None else ready)
    if ready is not None:
        watch.lap("plan")
    report = Report(now=now, dry_run=dry_run, stages=watch.laps)
    result = JobResult(report)
    waits = removal is None
    removal = removal or Removal()
    with contextlib.ExitStack() as held, leases or LeaseKeeper() as keeper:
        selected = plan.filter(pa.compute.equal(plan.column("selected"), True))
        if not dry_run:
            selected = _take_partitions(selected, keeper, result, progress, held)
            _reset_checkpoints(plan, selected, result, progress)
        for row in corrupt_in_plan(plan):
            result.fail(row, cleaning=False)
        if selected.num_rows:
            try:
                _clean(spark, selected, now, dry_run, progress, watch, result, keeper)
            finally:  # what was committed before a failure or a Ctrl-C goes too
                if result.deleted:
                    removal.start(result.deleted)
            if not dry_run:
                _done_cleaning(result, progress)
        _give_back(result, keeper, dry_run)
        if waits:
            for problem in removal.wait():
                progress(f"  {problem}")
    report.observe_plan(plan, marked=result.uncleanable)
    report.seconds = time.monotonic() - started
    return result


def _take_partitions(selected: pa.Table, keeper: LeaseKeeper, result: JobResult, progress,
                     held: contextlib.ExitStack) -> pa.Table:
    """Hold each log dir's ``.lock`` (re-entrant: the command line may hold it already), lease
    each selected partition and finish any swap a crashed run left in it (the broker's recovery).
    A partition in a log dir another process locks, or that another job holds, is skipped; one
    where recovery changed files is skipped too, since the plan no longer describes it (the next
    run plans it afresh)."""
    import storage

    keep, locked = [], {}
    columns = ["path", "log_dir", "topic", "partition", "first_dirty_offset", "checkpoint_offset"]
    for i, row in enumerate(selected.select(columns).to_pylist()):
        if row["log_dir"] not in locked:
            try:
                held.enter_context(storage.LogDirLock(row["log_dir"]))
                locked[row["log_dir"]] = None
            except storage.LogDirBusy as exc:
                locked[row["log_dir"]] = str(exc)
        busy = locked[row["log_dir"]] or keeper.acquire(row["path"])
        if busy is not None:
            result.report.partitions.append(PartitionReport.skipped_for(row, busy))
            progress(f"  skipped {row['topic']}-{row['partition']}: {busy}")
            continue
        # swaps only: the command line recovered the whole log dirs (indexes too) before planning
        recovered = recover_partition(row["path"], indexes=False)
        if recovered.generation is not None:
            result.generations[row["path"]] = recovered.generation
        if recovered.changed:
            keeper.release(row["path"])
            why = f"recovered an interrupted run first ({recovered.summary()}); planned again next run"
            result.report.partitions.append(PartitionReport.skipped_for(row, why))
            progress(f"  skipped {row['topic']}-{row['partition']}: {why}")
            continue
        moved = _cleaned_since_plan(row)
        if moved:
            keeper.release(row["path"])
            result.report.partitions.append(PartitionReport.skipped_for(row, moved))
            progress(f"  skipped {row['topic']}-{row['partition']}: {moved}")
            continue
        keep.append(i)
    return selected.take(pa.array(keep, pa.int64()))  # an empty list alone has no type


def _reset_checkpoints(plan: pa.Table, taken: pa.Table, result: JobResult, progress) -> None:
    """Kafka's grabFilthiestCompactedLog writes the log start as the cleaner checkpoint entry of
    every compacted partition it considers (not being cleaned, paused or aborted elsewhere, not
    uncleanable) whose entry lies below the log start or past the log end (forceUpdateCheckpoint),
    before it drops the logs with nothing to clean: so do we, for every such partition of the
    plan, the selected ones this job took included. An entry that changed since planning (another
    job cleaned the partition meanwhile) is left alone: the change is compare-and-swap."""
    mine = set(taken.column("path").to_pylist())
    wanted: dict[str, list[dict]] = {}
    for row in plan.to_pylist():
        considered = (row["state"] == "idle" or row["path"] in mine) and "compact" in (row["cleanup_policy"] or "")
        if (considered and row["checkpoint_offset"] is not None and row["checkpoint_reset"] is not None
                and (not row["selected"] or row["path"] in mine)):
            wanted.setdefault(row["log_dir"], []).append(
                {"log_dir": row["log_dir"], "topic": row["topic"], "partition": row["partition"],
                 "from": row["checkpoint_offset"], "offset": row["first_dirty_offset"], "why": row["checkpoint_reset"]})
    for log_dir, resets in wanted.items():
        done = []

        def change(entries: dict, resets=resets, done=done) -> dict:
            done.clear()
            for r in resets:
                if entries.get((r["topic"], r["partition"])) == r["from"]:
                    entries[(r["topic"], r["partition"])] = r["offset"]
                    done.append(r)
            return entries

        try:
            update_cleaner_offsets(log_dir, change)
        except (FormatError, OSError) as exc:
            progress(f"  cleaner checkpoints of {log_dir} not reset: {exc}")
            continue
        for r in done:
            result.report.checkpoint_resets.append(r)
            progress(f"  reset the cleaner checkpoint of {r['topic']}-{r['partition']}: {r['why']}; "
                     f"now the log start {r['offset']}")


def _done_cleaning(result: JobResult, progress) -> None:
    """The checkpoint entry of each partition whose cleaning failed: its first dirty offset, as
    Kafka's cleanLog writes it in its ``finally`` (so a partition without an entry gets one)."""
    for log_dir, entries in result.done_cleaning.items():
        try:
            update_cleaner_offsets(log_dir, lambda current, entries=entries: current | entries)
        except (FormatError, OSError) as exc:
            progress(f"  cleaner checkpoint of {log_dir} not written after failed cleanings: {exc}")


def _cleaned_since_plan(row: dict) -> str | None:
    """Another job cleaned the partition between this plan and our lease (its cleaner checkpoint
    entry moved): the plan's dirty range is stale, and cleaning it again would redo that work."""
    import storage
    from readers import checkpoint

    path = storage.join(row["log_dir"], checkpoint.CLEANER_OFFSET)
    found = storage.read_versioned(path)
    try:
        now = checkpoint.parse(path, found[0]).get((row["topic"], row["partition"])) if found else None
    except FormatError as exc:
        return f"{exc}; planned again next run"
    if now == row["checkpoint_offset"]:
        return None
    return f"cleaned by another job since it was planned (checkpoint {row['checkpoint_offset']} -> {now}); planned again next run"


def _clean(spark, selected: pa.Table, now: int, dry_run: bool, progress, watch: Stopwatch, result: JobResult,
           keeper: LeaseKeeper) -> None:
    report = result.report
    sc = spark.sparkContext
    progress(f"stage 1/5: batch plans of {selected.num_rows} partition{'s' * (selected.num_rows != 1)}")
    sc.setJobGroup("kcompact-batch-plans", f"batch-level decisions for {selected.num_rows} partitions")
    partitions = _batch_plans(spark, selected, now)
    watch.lap("1 batch plans")
    ok = partitions.filter(pa.compute.is_null(partitions.column("error")))
    for row in partitions.filter(pa.compute.is_valid(partitions.column("error"))).to_pylist():
        result.fail(row)
    if ok.num_rows == 0:
        return

    rows = ok.drop_columns(["batches"]).to_pylist()
    batches = Batches.of(ok)
    direct = spark.conf.get(DIRECT_WRITES, "true").strip().lower() == "true"
    jobs = _group_jobs(rows, batches, now, keeper.owner, direct)
    stage = "2-3 offset map, keep flags" if dry_run else "2-4 offset map, keep flags, rewrite"
    progress(f"stages {stage} ({len(jobs)} segment group{'s' * (len(jobs) != 1)})")
    sc.setJobGroup("kcompact-clean", f"offset map, keep flags, .cleaned segments for {len(jobs)} groups")
    with _sql_conf(spark, JOB_CONF):
        written = _clean_groups(spark, rows, batches, jobs, dry_run, keeper.owner)
    watch.lap(stage)
    counts = _fate_counts(written)
    if dry_run:
        for pid, row in enumerate(rows):
            report.partitions.append(PartitionReport.of(batches.report_row(row, pid), counts, [], committed=False))
        return
    failing = {w["path"] for w in written if w["error"]}
    ready = sum(row["path"] not in failing for row in rows)
    progress(f"stage 5/5: committing {ready} of {len(rows)} partitions (swap, checkpoint)" if ready else
             "stage 5/5: nothing to commit: every partition failed")
    for pid, row in enumerate(rows):
        groups = [w for w in written if w["path"] == row["path"]]
        errors = [w["error"] for w in groups if w["error"]]
        if errors or len(groups) != len(row["groups"]):
            _discard(groups)
            error = errors[0] if errors else "not every segment group was rewritten"
            if error == ABORTED_BY_OPERATOR:
                _aborted(row, result, progress)
            else:
                result.fail(row | {"error": error}, groups=group_outcomes(row, groups, "written"))
            continue
        changed = _changed_since_plan(row)
        if changed:
            _discard(groups)
            result.fail(row | {"error": changed}, transient=True)
            continue
        if not keeper.held(row["path"]):  # the last moment an abort can still stop us
            _discard(groups)
            _aborted(row, result, progress)
            continue
        try:
            result.deleted += _commit(row, groups, keeper.owner, result.generations.get(row["path"]))
        except s3commit.CommitLost as exc:
            result.fail(row | {"error": str(exc)}, transient=True)
            continue
        except OSError as exc:  # the swap stopped part way: finish or undo it as a broker would
            try:
                recover_partition(row["path"], indexes=False)
                error = f"{IO_ERROR}commit failed ({exc}); the interrupted swap was recovered"
            except OSError as again:
                error = f"{IO_ERROR}commit failed ({exc}), recovery too ({again}): run 'kcompact recover'"
            result.fail(row | {"error": error})
            continue
        report.partitions.append(PartitionReport.of(batches.report_row(row, pid), counts, groups, committed=True))
        progress(f"  committed {row['topic']}-{row['partition']} ({pid + 1}/{len(rows)}): "
                 f"checkpoint {row['latest_offset'] + 1}")
    watch.lap("5 commit")


def _aborted(row: dict, result: JobResult, progress) -> None:
    result.report.partitions.append(PartitionReport.skipped_for(row | {"first_dirty_offset": row["first_dirty"]},
                                                            "aborted by an operator; old segments kept"))
    progress(f"  aborted {row['topic']}-{row['partition']}: old segments kept")


def _changed_since_plan(row: dict) -> str | None:
    """The segments the commit would replace are not those the job read (retention, another
    cleaner, a restarted broker got there first): committing would lose records."""
    now = [s.base_offset for s in scan_partition(row["path"], row["topic"], row["partition"]).segments
           if s.base_offset <= row["latest_offset"]]
    read = [base for g in row["groups"] for base in g["segments"]]
    if now != read:
        return f"the partition changed while it was being cleaned (segments {read} became {now}); cleaned next run"
    return None


def corrupt_in_plan(plan: pa.Table) -> list[dict]:
    """Idle compacted partitions the planner could not read because a segment is corrupt (a
    problem naming a .log file and byte): failures of this run, whoever found them first.
    Leftovers of an interrupted swap are not among them: ``recover`` is their way out."""
    found = []
    for row in plan.to_pylist():
        if "compact" not in (row["cleanup_policy"] or "") or row["state"] != "idle":
            continue
        corrupt = [p for p in row["problems"] or [] if ".log: byte " in p]
        if corrupt:
            found.append({"topic": row["topic"], "partition": row["partition"], "path": row["path"],
                          "first_dirty": row["first_dirty_offset"], "seconds": 0.0, "error": corrupt[0]})
    return found


def _fate_counts(written: list[dict]) -> dict[tuple[str, str], int]:
    """Records per (partition dir, reason), as ``PartitionReport.of`` reads them."""
    counts: dict[tuple[str, str], int] = {}
    for w in written:
        for code, n in enumerate(w["codes"]):
            key = (w["path"], REASON_OF_CODE[code])
            counts[key] = counts.get(key, 0) + n
    return counts


def _group_jobs(rows: list[dict], batches: Batches, now: int, owner: str,
                direct: bool) -> dict[int, tuple[GroupJob, GroupPlans]]:
    jobs, gid = {}, 0
    for row in rows:
        config = json.loads(row["config"])
        for g in row["groups"]:
            job = GroupJob(
                path=row["path"], group=g["group"], base_offset=g["base_offset"], segments=tuple(g["segments"]),
                mtime_ms=g["mtime_ms"], aborted=tuple(AbortedTxn(**t) for t in g["aborted"]),
                index_interval_bytes=config["index.interval.bytes"], max_index_bytes=config["segment.index.bytes"],
                buffers=BufferSizes.of(config),
                delete_retention_ms=config["delete.retention.ms"], now=now, latest_offset=row["latest_offset"],
                first_dirty=row["first_dirty"], owner=owner, direct=direct)
            jobs[gid] = (job, batches.group_plans(gid))
            gid += 1
    return jobs


def _clean_groups(spark, rows: list[dict], batches: Batches, jobs: dict[int, tuple[GroupJob, GroupPlans]],
                  dry_run: bool, owner: str) -> list[dict]:
    """Stages 2-4, one Spark job: a result row per segment group (``RESULT_SCHEMA``). A partition of
    at most ``WHOLE_BYTES`` is read by one task that makes its map and rewrites its groups; a larger
    one's map is made by many tasks and a shuffle of blobs (``compaction.map_pass``), and its groups
    are rewritten by tasks of their own."""
    sizes = [int(batches.sizes[batches.starts[pid]:batches.starts[pid + 1]].sum()) for pid in range(len(rows))]
    groups_of: dict[int, list[int]] = {}
    pid_of_gid = batches.pid_of_gid
    for gid in jobs:
        groups_of.setdefault(int(pid_of_gid[gid]), []).append(gid)

    def result(gid: int, lookup: Lookup) -> pa.RecordBatch:
        job, plans = jobs[gid]
        base = {"gid": gid, "path": job.path, "group": job.group}
        if dry_run:
            row = base | {"codes": count_group(job, plans, lookup)}
        elif not states.held_by(job.path, owner):  # aborted (or lease lost): stop at this group boundary
            row = base | {"files": [], "error": ABORTED_BY_OPERATOR, "codes": [0] * len(REASON_OF_CODE)}
        else:
            row = rewrite_group(job, plans, lookup) | {"gid": gid}
        return pa.RecordBatch.from_pylist([row], schema=RESULT_SCHEMA)

    keys = [batches.map_keys(pid) for pid in range(len(rows))]
    budget, cap, threads = _map_memory(spark), _worker_cap(spark), _threads(spark, 1)
    largest = {pid: max(int(jobs[gid][1].size.sum()) for gid in gids) for pid, gids in groups_of.items()}
    read_whole = [_reads_whole(size, keys[pid], largest.get(pid, 0), budget, cap, threads)
                  for pid, size in enumerate(sizes)]
    whole = [pid for pid in groups_of if read_whole[pid]]
    large = [pid for pid in groups_of if not read_whole[pid]]
    frames = []
    if whole:
        frames.append(_whole(spark, whole, sizes, keys, jobs, groups_of, dry_run, owner))
    if large:
        frames.append(_shared(spark, large, rows, batches, jobs, groups_of, pid_of_gid, result,
                              sum(keys[pid] for pid in large) * MAP_BYTES_PER_KEY, budget))
    if not frames:
        return []
    union = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    return union.toArrow().to_pylist()


def check_settings(spark) -> None:
    """The session's values of this job's settings, checked as ``check_setting`` checks one (the
    command line checks its own ``--spark-conf``; spark-submit's ``--conf`` and a notebook's come
    unchecked)."""
    for key in (MAP_MEMORY, THREADS, DIRECT_WRITES):
        value = spark.conf.get(key, None)
        if value is not None:
            check_setting(key, value)


def check_setting(key: str, value: str) -> None:
    """A ValueError naming the setting unless ``value`` suits ``key`` (any key but this job's passes)."""
    if key == MAP_MEMORY:
        try:
            spark_size(value)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    if key == THREADS and not (value.isdigit() and int(value) >= 1):
        raise ValueError(f"{key}={value!r}: the threads of a task are a whole number of at least 1")
    if key == DIRECT_WRITES and value.strip().lower() not in ("true", "false"):
        raise ValueError(f"{key}={value!r}: true or false")


def _map_memory(spark) -> int:
    """The bytes a task may give one partition's offset map (``MAP_MEMORY``)."""
    chosen = spark.conf.get(MAP_MEMORY, None)
    if chosen is not None:
        return spark_size(chosen)
    cap = _worker_cap(spark)
    return cap // 4 if cap else DEFAULT_MAP_MEMORY


def _worker_cap(spark) -> int | None:
    """The address space a Python worker may take (spark.executor.pyspark.memory), None: uncapped."""
    cap = spark.sparkContext.getConf().get("spark.executor.pyspark.memory", None)
    return spark_size(cap) if cap else None


def _reads_whole(size: int, keys: int, largest_group: int, budget: int, cap: int | None, threads: int) -> bool:
    """Whether a task reads a partition of ``size`` bytes whole (its map made as it is rewritten),
    rather than by the shared path: when it is small, or when its map fits the map ``budget`` and,
    under a worker ``cap``, the cap holds the worker's imports and all that reading it whole holds."""
    return size <= WHOLE_BYTES or (keys * MAP_BYTES_PER_KEY <= budget and (
        cap is None or WORKER_IMPORTS + _whole_bytes(keys, largest_group, threads) <= cap))


def _whole_bytes(keys: int, largest_group: int, threads: int) -> int:
    """What a task holds beside its imports while it reads a partition whole (the comment at
    WORKER_IMPORTS): the map's tables for ``keys`` keys, one per thread, two groups' output of at
    most ``OUTPUT_MEMORY`` each, and its ranges in flight."""
    return (threads * KeyTable.nbytes_for(-(-keys // threads)) + 2 * min(largest_group, OUTPUT_MEMORY)
            + WHOLE_FIXED + threads * WHOLE_PER_THREAD)


def _threads(spark, tasks: int) -> int:
    """Threads per task when ``tasks`` tasks share the cores (``THREADS``): batch plans and whole partitions."""
    chosen = spark.conf.get(THREADS, None)
    wanted = int(chosen) if chosen else spark.sparkContext.defaultParallelism // tasks
    return 1 << (max(1, wanted).bit_length() - 1)


def _whole(spark, pids: list[int], sizes: list[int], keys: list[int], jobs: dict[int, tuple[GroupJob, GroupPlans]],
           groups_of: dict[int, list[int]], dry_run: bool, owner: str):
    """Partitions read whole: each task takes a share of them, by bytes; a partition is read once,
    from its end back, its map made on the way (``compaction.rewrite.clean_partition``). Fewer
    tasks than cores (one large partition): each task uses the cores left idle, as threads."""
    from pyspark.sql.pandas.types import from_arrow_schema

    bins = _bins([sizes[pid] for pid in pids], _task_count(spark, sum(sizes[pid] for pid in pids), len(pids)))
    threads = _threads(spark, len(bins))

    def run(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in (b for rb in ids for b in rb.column(0).to_pylist()):
            for pid in (pids[i] for i in bins[b]):
                gids = groups_of[pid]
                done = clean_partition([jobs[gid] for gid in gids], render=not dry_run,
                                       held=lambda path: states.held_by(path, owner), threads=threads, keys=keys[pid])
                yield pa.RecordBatch.from_pylist([row | {"gid": gid} for gid, row in zip(gids[len(gids) - len(done):],
                                                                                         done, strict=True)],
                                                 schema=RESULT_SCHEMA)

    return _ranged(spark, len(bins)).mapInArrow(run, from_arrow_schema(RESULT_SCHEMA))


def _shared(spark, pids: list[int], rows: list[dict], batches: Batches, jobs: dict[int, tuple[GroupJob, GroupPlans]],
            groups_of: dict[int, list[int]], pid_of_gid: np.ndarray, result, map_bytes: int, budget: int):
    """Partitions larger than a task: their byte ranges read by tasks of about equal bytes, which
    ship (group, key) facts by key hash bucket; a task per bucket makes the map's offsets and
    sends each group's rewrite task the keys that supersede its records."""
    from pyspark.sql.pandas.types import from_arrow_schema

    splits = [(pid, split) for pid in pids for split in partition_ranges(
        scan_partition(rows[pid]["path"], rows[pid]["topic"], rows[pid]["partition"]),
        OffsetRange(None, rows[pid]["latest_offset"] + 1))]
    sizes = [split.end - split.start for _, split in splits]
    shared = {"task_bytes": SHARED_TASK_BYTES, "per_core": 2}
    map_bins = _bins(sizes, _task_count(spark, sum(sizes), len(splits), **shared))
    # a bucket's task holds its blobs twice (as they came, then joined) and a few int64s per entry
    # to sort them by key hash: about twice its share of the map's bytes
    buckets = max(_task_count(spark, sum(sizes), 1 << 30, **shared),
                  -(-2 * map_bytes // max(budget, MIN_BUCKET_BYTES)))
    bucket_slots = np.array(_slots(buckets), np.int32)
    gids = [gid for pid in pids for gid in groups_of[pid]]
    group_bytes = [int(jobs[gid][1].size.sum()) for gid in gids]
    rewrite_bins = _bins(group_bytes, _task_count(spark, sum(group_bytes), len(gids), **shared))
    rewrite_slots = np.array(_slots(len(rewrite_bins)), np.int32)
    bin_of_slot = {slot: b for b, slot in enumerate(rewrite_slots.tolist())}
    slot_of_gid = np.full(len(pid_of_gid), -1, np.int32)
    for b, members in enumerate(rewrite_bins):
        slot_of_gid[[gids[i] for i in members]] = b
    first_dirty, latest = batches.first_dirty, batches.latest_offset
    # a map task's table holds at most half the map budget: with a 1 GiB worker cap (budget a
    # quarter of it) a full 256 MiB table, its entries and blobs left a map task 17-83 MB short of the cap
    table_bytes = min(TABLE_BYTES, budget // 2)

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        planned: dict[int, dict[int, Planned]] = {}  # a partition's, made once for all its splits
        for b in (b for rb in ids for b in rb.column(0).to_pylist()):
            for pid, split in (splits[i] for i in map_bins[b]):
                if pid not in planned:
                    planned[pid] = batches.planned(pid)
                plans = planned[pid].get(split.segment_base)
                if plans is None:
                    continue
                for blobs in read_keys(split.path, split.start, split.end, plans, int(first_dirty[pid]),
                                       int(latest[pid]), ship, table_bytes):
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
        for b in sorted(mine):
            for gid in (gids[i] for i in rewrite_bins[b]):
                yield result(gid, Lookup(table, gid))

    keys = _ranged(spark, len(map_bins)).mapInArrow(read, from_arrow_schema(BLOB_SCHEMA))
    entries = keys.repartition(buckets, "slot").mapInArrow(reduce, from_arrow_schema(BLOB_SCHEMA))
    marks = spark.createDataFrame(pa.table({"slot": pa.array(rewrite_slots), "blob": pa.nulls(len(rewrite_slots),
                                                                                            pa.binary())}))
    return (entries.unionByName(marks).repartition(len(rewrite_bins), "slot")
            .mapInArrow(rewrite, from_arrow_schema(RESULT_SCHEMA)))


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


def _commit(row: dict, groups: list[dict], owner: str, generation: int | None) -> list[str]:
    """Swap the partition's groups in and move its checkpoint; returns the ``.deleted`` files to
    remove (none on object stores, whose commit deletes what it replaces)."""
    import storage
    from operations.cleaned import WrittenGroup

    end = row["latest_offset"] + 1
    if not storage.is_local_path(row["path"]):  # no atomic rename there: a commit record decides
        replaced = [segment_name(base, kind) for g in row["groups"] for base in g["segments"] for kind in SEGMENT_KINDS]
        staged = [path for g in groups for path in g["files"]]
        record = s3commit.plan_record(row["topic"], row["partition"], generation + 1, owner, staged, replaced, end)
        s3commit.commit_partition(row["log_dir"], row["path"], record)
        return []
    part = scan_partition(row["path"], row["topic"], row["partition"])
    replaced = [s for s in part.segments if s.base_offset < end]
    written = [WrittenGroup(g["base_offset"], g["size"], g["batches"], g["records"], tuple(g["files"]))
               for g in groups]
    deleted = commit_partition(row["path"], written, replaced)
    try:
        set_cleaner_offset(row["log_dir"], row["topic"], row["partition"], end)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        for path in deleted:  # a full disk: the replaced files go first, as they did before, then again
            storage.remove(path)
        set_cleaner_offset(row["log_dir"], row["topic"], row["partition"], end)
        return []
    return deleted


def _discard(groups: list[dict]) -> None:
    import storage

    for g in groups:
        for path in g["files"]:
            with contextlib.suppress(FileNotFoundError):  # not asked first: an object store's cached listing may not know it
                storage.remove(path)


def _give_back(result: JobResult, keeper: LeaseKeeper, dry_run: bool) -> None:
    """Leases back: failed partitions uncleanable (with file and byte), transient failures and
    the rest idle; a partition failed without a lease (the planner found it corrupt) is
    marked uncleanable unless it is in some other state."""
    if dry_run:
        return
    for path, reason in result.uncleanable.items():
        if keeper.held(path):
            keeper.release(path, uncleanable=reason)
        else:
            states.mark_uncleanable(path, reason)
