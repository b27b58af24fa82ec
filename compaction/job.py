"""The compaction job: every selected partition of a plan cleaned as Kafka's cleaner would.

Stages (Spark jobs named by job groups):
1. batch plans: tasks read batch headers, partition by partition, and decide batch by batch
   what Kafka's cleaner decides before looking at records (``compaction.decisions``);
2. offset map: tasks read the records of the segments to clean as the ``kafka-log`` source
   does in compaction mode (keys and offsets, no value) and keep per key the latest offset
   that feeds the map and the earliest whose fate waits on it. The map's offset per
   (partition, exact key) is made in the task when it read the whole partition, else by a
   shuffle on (key, partition), so a key set may exceed any one executor's memory; each
   segment group receives the map entries that supersede some of its records;
3. keep flags and 4. rewrite: one call per segment group decodes its batches again, gives
   each record its fate by the rule of ``compaction.decisions.keep_record`` (and counts the
   fates), and writes the ``.cleaned`` files (``compaction.rewrite``);
5. commit, on the driver alone: per partition, every group swapped in or none.
Stages 2-4 are one Spark job: nothing is cached, and nothing per record crosses a shuffle. A
Python task costs Spark ~70 ms of fixed work, so a task takes a share of about ``TASK_BYTES``
(at least two tasks per core), shares balanced by bytes. A dry run counts and writes nothing.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from compaction import partition_scan
from operations import states
from compaction.leases import LeaseKeeper
from compaction.report import PartitionReport, Report
from compaction.rewrite import (
    DISCARD,
    IO_ERROR,
    PLAN_FLAGS,
    REASON_OF_CODE,
    RESULT_SCHEMA,
    GroupJob,
    GroupPlans,
    count_group,
    rewrite_group,
    undecided,
)
from readers.datasource import DEFAULT_MAX_SPLIT_BYTES, OffsetRange, Split, partition_splits, split_records
from readers.errors import FormatError
from readers.indexes import AbortedTxn
from readers.logdir import SEGMENT_KINDS, scan_partition, segment_name
from operations import s3commit
from operations.recover import recover_partition
from operations.swap import commit_partition, set_cleaner_checkpoint

CONFIG_KEYS = ("delete.retention.ms", "segment.bytes", "segment.index.bytes", "producer.id.expiration.ms",
               "index.interval.bytes")

# A partition's batch plans travel from its stage 1 task as one blob of these records: a nested
# Arrow list of structs would cost Spark a row conversion per batch, twice.
BATCH_PLAN = np.dtype([
    ("segment", "<i8"), ("position", "<i8"), ("size", "<i8"), ("group", "<i4"), ("feeds_map", "?"),
    *((name, "?") for name in PLAN_FLAGS),
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


# -- tasks: a Python task costs Spark ~70 ms of fixed work (2 cores), so each takes a share of the
# work rather than one partition, split or group; shares are balanced by bytes, largest first.
TASK_BYTES = 256 << 20  # log bytes per task, at least


def _task_count(spark, total_bytes: int, items: int) -> int:
    wanted = max(2 * spark.sparkContext.defaultParallelism, -(-total_bytes // TASK_BYTES))
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
    no shuffle), the result in the plan's order."""
    from pyspark.sql.pandas.types import from_arrow_schema

    rows = selected.select(list(PLAN_INPUT)).to_pylist()
    sizes = [size or 0 for size in selected.column("total_bytes").to_pylist()]
    bins = _bins(sizes, _task_count(spark, sum(sizes), len(rows)))

    def run(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in ids:
            for b in rb.column(0).to_pylist():
                yield pa.RecordBatch.from_pylist([_plan_one(rows[i], now) for i in bins[b]], schema=PARTITION_PLAN)

    planned = _ranged(spark, len(bins)).mapInArrow(run, from_arrow_schema(PARTITION_PLAN)).toArrow()
    rank = {path: i for i, path in enumerate(selected.column("path").to_pylist())}
    return planned.take(sorted(range(planned.num_rows), key=lambda i: rank[planned.column("path")[i].as_py()]))


def _plan_one(row: dict, now: int) -> dict:
    started = time.monotonic()
    config = _config_values(row)
    base = {"path": row["path"], "log_dir": row["log_dir"], "topic": row["topic"], "partition": row["partition"],
            "first_dirty": row["first_dirty_offset"], "first_uncleanable": row["first_uncleanable_dirty_offset"],
            "config": json.dumps(config), "batches": b"", "groups": [], "latest_offset": None, "error": None}
    try:
        _, _, decided = partition_scan.plan(
            row["path"], row["topic"], row["partition"], log_start=row["log_start_offset"],
            first_dirty=row["first_dirty_offset"], first_uncleanable=row["first_uncleanable_dirty_offset"],
            now=now, config=config)
    except (FormatError, OSError) as exc:
        return {**base, "seconds": time.monotonic() - started, "error": str(exc)}
    feeding = decided.map_batches
    base["batches"] = np.array([
        (p.batch.segment, p.batch.position, p.batch.size, p.group, (p.batch.segment, p.batch.position) in feeding,
         p.delete, p.discard_records, p.retain_empty, p.retain_deletes, p.marker_for_empty_txn)
        for p in decided.batches
    ], dtype=BATCH_PLAN).tobytes()
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


# The offset map, as each group needs it. Per split, a row per key of its records: the largest
# offset of one that feeds the map, the smallest of one whose fate waits on the map. All rows of
# a (key, partition) together (in one task, or after a shuffle), the largest ``feeds`` is the
# map's offset; a group hears of a key only when that offset supersedes one of its records.
KEY_SCHEMA = pa.schema([
    ("pid", pa.int32()), ("key", pa.binary()), ("gid", pa.int32()), ("feeds", pa.int64()), ("waits", pa.int64()),
])
ENTRY_SCHEMA = pa.schema([
    ("slot", pa.int32()), ("gid", pa.int32()), ("key", pa.binary()), ("mapped", pa.int64()),
])


# Every shuffle here has its partition count set, so adaptive execution has nothing to adapt; it
# would only split the job at each shuffle and plan again in between.
JOB_CONF = {"spark.sql.adaptive.enabled": "false"}


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


ABORTED = "aborted"


@dataclass(slots=True)
class JobResult:
    report: Report
    uncleanable: dict[str, str] = field(default_factory=dict)  # partition dir -> reason
    # object stores: partition dir -> the latest commit record generation seen under our lease
    generations: dict[str, int] = field(default_factory=dict)

    def fail(self, row: dict, transient: bool = False) -> None:
        """A partition this run could not clean: reported, and marked uncleanable at the end
        unless the cause is transient (an I/O error, a log that changed under the job)."""
        if not transient and not row["error"].startswith(IO_ERROR):
            self.uncleanable[row["path"]] = row["error"]
        self.report.partitions.append(PartitionReport.failed(row))


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
    first_dirty: np.ndarray  # per partition
    latest_offset: np.ndarray  # per partition
    segment: np.ndarray
    position: np.ndarray
    gid: np.ndarray
    feeds_map: np.ndarray
    flags: np.ndarray  # (batches, len(PLAN_FLAGS)) bool

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
            first_dirty=ok.column("first_dirty").to_numpy(), latest_offset=ok.column("latest_offset").to_numpy(),
            segment=plans["segment"].copy(), position=plans["position"].copy(),
            gid=(group_starts[pid] + plans["group"]).astype(np.int32), feeds_map=plans["feeds_map"].copy(),
            flags=np.stack([plans[name] for name in PLAN_FLAGS], axis=1).reshape(len(plans), len(PLAN_FLAGS)),
        )

    def report_row(self, row: dict, pid: int) -> dict:
        """``row`` with its batches as ``PartitionReport.of`` reads them (their sizes)."""
        sizes = self.sizes[self.starts[pid]:self.starts[pid + 1]].tolist()
        return row | {"batches": [{"size": size} for size in sizes]}

    def group_plans(self, gid: int) -> GroupPlans:
        lo, hi = np.searchsorted(self.gid, gid, "left"), np.searchsorted(self.gid, gid, "right")
        return GroupPlans(self.segment[lo:hi], self.position[lo:hi], self.flags[lo:hi])

    def locate(self, pid: int, segment: int, position: np.ndarray) -> np.ndarray:
        """Row of the batch at each ``position`` of one segment of partition ``pid``, -1 for none."""
        lo, hi = self.starts[pid], self.starts[pid + 1]
        in_partition = self.segment[lo:hi]
        lo, hi = (lo + np.searchsorted(in_partition, segment, "left"),
                  lo + np.searchsorted(in_partition, segment, "right"))
        at = lo + np.searchsorted(self.position[lo:hi], position)
        found = at < hi
        found[found] = self.position[at[found]] == position[found]
        return np.where(found, at, -1)

    def keys(self, rows: pa.RecordBatch, pid: int, segment: int) -> pa.Table:
        """Of ``rows`` (``readers.columns`` rows of one segment), the (key, gid, feeds, waits) of
        each record that feeds the map or waits on it: ``feeds`` its offset if it feeds the map,
        ``waits`` its offset if its fate waits on the map (else null). Rows of batches without
        a plan are left out, as a join with the plans would leave them."""
        at = self.locate(pid, segment, rows.column("batch_position").to_numpy())
        planned = at >= 0
        if not planned.all():
            rows, at = rows.filter(pa.array(planned)), at[planned]
        offset = rows.column("offset").to_numpy()
        key = rows.column("key")
        has_key = key.is_valid().to_numpy(zero_copy_only=False)
        control = rows.column("is_control").to_numpy(zero_copy_only=False)
        waits = undecided(self.flags[at, DISCARD], control, offset, int(self.latest_offset[pid]), has_key)
        feeds = self.feeds_map[at] & has_key & ~control & (offset >= self.first_dirty[pid])
        either = waits | feeds
        return pa.table({
            "key": key.filter(pa.array(either)), "gid": self.gid[at[either]],
            "feeds": pa.array(offset[either], mask=~feeds[either]),
            "waits": pa.array(offset[either], mask=~waits[either]),
        })


def _split_keys(split: Split, pid: int, batches: Batches) -> pa.RecordBatch | None:
    """One row per key of the split's records that feed the map or wait on it (``KEY_SCHEMA``)."""
    found = [t for t in (batches.keys(rows, pid, split.segment_base) for rows in split_records(split)) if t.num_rows]
    if not found:
        return None
    per_key = (pa.concat_tables(found).group_by(["key", "gid"], use_threads=False)  # threads: 2 cores, 2 tasks
               .aggregate([("feeds", "max"), ("waits", "min")]))
    n = per_key.num_rows
    return pa.RecordBatch.from_arrays([
        pa.array(np.full(n, pid, np.int32)), *(per_key.column(name).combine_chunks()
                                               for name in ("key", "gid", "feeds_max", "waits_min")),
    ], schema=KEY_SCHEMA)


def run(spark, plan: pa.Table, now: int, dry_run: bool = False, progress=print,
        ready: float | None = None, leases: LeaseKeeper | None = None) -> JobResult:
    """Clean every selected partition of ``plan`` (a table with the planner's schema).
    ``ready``: ``time.monotonic()`` when the session was ready, so the report's stages start with planning.
    ``leases``: the keeper of this job's leases (default: a new one with the default lease)."""
    started = time.monotonic()
    watch = Stopwatch(started if ready is None else ready)
    if ready is not None:
        watch.lap("plan")
    report = Report(now=now, dry_run=dry_run, stages=watch.laps)
    result = JobResult(report)
    with contextlib.ExitStack() as held, leases or LeaseKeeper() as keeper:
        selected = plan.filter(pa.compute.equal(plan.column("selected"), True))
        if not dry_run:
            selected = _take_partitions(selected, keeper, result, progress, held)
        for row in corrupt_in_plan(plan):
            result.fail(row)
        if selected.num_rows:
            _clean(spark, selected, now, dry_run, progress, watch, result, keeper)
        _give_back(result, keeper, dry_run)
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
    jobs = _group_jobs(rows, batches, now, keeper.owner)
    slot_of_gid = _rewrite_slots(spark, jobs, batches)
    entries = _map_entries(spark, rows, batches, slot_of_gid)
    stage = "2-3 offset map, keep flags" if dry_run else "2-4 offset map, keep flags, rewrite"
    progress(f"stages {stage} ({len(jobs)} segment group{'s' * (len(jobs) != 1)})")
    sc.setJobGroup("kcompact-clean", f"offset map, keep flags, .cleaned segments for {len(jobs)} groups")
    with _sql_conf(spark, JOB_CONF):
        written = _per_group(spark, jobs, entries, slot_of_gid, dry_run, keeper.owner)
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
            if error == ABORTED:
                _aborted(row, result, progress)
            else:
                result.fail(row | {"error": error})
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
            _commit(row, groups, keeper.owner, result.generations.get(row["path"]))
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


def _map_entries(spark, rows: list[dict], batches: Batches, slot_of_gid: np.ndarray):
    """(slot, gid, key, mapped): the offset map's offset of each key that supersedes a record of
    group gid. The records are read as the ``kafka-log`` source reads them in compaction mode,
    in a few tasks of about equal bytes. A partition of at most ``TASK_BYTES`` is read whole by
    one task, which makes its map too; a larger one's splits are spread over tasks and its map
    made by a shuffle on (key, partition), so no task holds more than a share of a key set."""
    from pyspark.sql.pandas.types import from_arrow_schema

    splits = [[split for split in partition_splits(
        scan_partition(row["path"], row["topic"], row["partition"]), OffsetRange(None, row["latest_offset"] + 1),
        DEFAULT_MAX_SPLIT_BYTES)] for row in rows]
    sizes = [sum(split.end - split.start for split in mine) for mine in splits]
    whole = [pid for pid, size in enumerate(sizes) if size <= TASK_BYTES]
    shared = [(pid, split) for pid, size in enumerate(sizes) if size > TASK_BYTES for split in splits[pid]]
    whole_bins = _bins([sizes[pid] for pid in whole], _task_count(spark, sum(sizes[pid] for pid in whole), len(whole)))

    def read_whole(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in (b for rb in ids for b in rb.column(0).to_pylist()):
            for pid in (whole[i] for i in whole_bins[b]):
                found = [k for k in (_split_keys(split, pid, batches) for split in splits[pid]) if k is not None]
                yield from _offset_map(iter(found), slot_of_gid)

    entries = _ranged(spark, len(whole_bins)).mapInArrow(read_whole, from_arrow_schema(ENTRY_SCHEMA))
    if shared:
        entries = entries.unionByName(_shared_map(spark, shared, batches, slot_of_gid))
    return entries


def _shared_map(spark, splits: list[tuple[int, Split]], batches: Batches, slot_of_gid: np.ndarray):
    """``_map_entries`` of partitions larger than a task: splits read in tasks of about equal
    bytes, rows of one (key, partition) brought together by a shuffle."""
    from pyspark.sql.pandas.types import from_arrow_schema

    sizes = [split.end - split.start for _, split in splits]
    tasks = _task_count(spark, sum(sizes), len(splits))
    bins = _bins(sizes, tasks)

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in (b for rb in ids for b in rb.column(0).to_pylist()):
            for i in bins[b]:
                found = _split_keys(splits[i][1], splits[i][0], batches)
                if found is not None:
                    yield found

    def offset_map(found: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _offset_map(found, slot_of_gid)

    keys = _ranged(spark, len(bins)).mapInArrow(read, from_arrow_schema(KEY_SCHEMA))
    return keys.repartition(tasks, "key", "pid").mapInArrow(offset_map, from_arrow_schema(ENTRY_SCHEMA))


def _offset_map(found: Iterator[pa.RecordBatch], slot_of_gid: np.ndarray) -> Iterator[pa.RecordBatch]:
    """Every ``KEY_SCHEMA`` row of some (key, partition)s -> the map's offset of each, for the rows
    (groups) with a record it supersedes. Done here rather than by a Spark window, which would
    sort the rows and bring one more operator for the JVM to compile."""
    rows = pa.Table.from_batches(list(found), schema=KEY_SCHEMA)
    if not rows.num_rows:
        return
    latest = rows.group_by(["key", "pid"], use_threads=False).aggregate([("feeds", "max")])
    joined = rows.join(latest, ["key", "pid"], use_threads=False)
    superseding = joined.filter(pa.compute.less(joined.column("waits"), joined.column("feeds_max")))
    gid = superseding.column("gid").to_numpy()
    yield from pa.table([pa.array(slot_of_gid[gid]), gid, superseding.column("key"), superseding.column("feeds_max")],
                        schema=ENTRY_SCHEMA).to_batches()


def _group_jobs(rows: list[dict], batches: Batches, now: int, owner: str) -> dict[int, tuple[GroupJob, GroupPlans]]:
    jobs, gid = {}, 0
    for row in rows:
        config = json.loads(row["config"])
        for g in row["groups"]:
            job = GroupJob(
                path=row["path"], group=g["group"], base_offset=g["base_offset"], segments=tuple(g["segments"]),
                mtime_ms=g["mtime_ms"], aborted=tuple(AbortedTxn(**t) for t in g["aborted"]),
                index_interval_bytes=config["index.interval.bytes"],
                delete_retention_ms=config["delete.retention.ms"], now=now, latest_offset=row["latest_offset"],
                owner=owner)
            jobs[gid] = (job, batches.group_plans(gid))
            gid += 1
    return jobs


def _rewrite_slots(spark, jobs: dict[int, tuple[GroupJob, GroupPlans]], batches: Batches) -> np.ndarray:
    """The slot (see ``_slots``) of each group's task: groups with batches in a few tasks of
    about equal bytes."""
    gids = [gid for gid, (_, plans) in jobs.items() if len(plans.segment)]
    group_bytes = np.bincount(batches.gid, weights=batches.sizes, minlength=len(jobs)) if len(jobs) else []
    sizes = [int(group_bytes[gid]) for gid in gids]
    bins = _bins(sizes, _task_count(spark, sum(sizes), len(gids)))
    values = _slots(len(bins))
    slot_of_gid = np.full(len(jobs), -1, np.int32)
    for b, members in enumerate(bins):
        slot_of_gid[[gids[i] for i in members]] = values[b]
    return slot_of_gid


def _per_group(spark, jobs: dict[int, tuple[GroupJob, GroupPlans]], entries, slot_of_gid: np.ndarray,
               dry_run: bool, owner: str) -> list[dict]:
    """One call per group with batches (as a cogroup with the batch plans would call it): a row
    (gid, null key) per such group joins the map entries, so every such group is called. A dry
    run counts the fates and writes nothing."""
    from pyspark.sql.pandas.types import from_arrow_schema

    def run(found: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = pa.Table.from_batches(list(found), schema=ENTRY_SCHEMA)
        gids = rows.column("gid").to_numpy()
        for gid in np.unique(gids).tolist():
            yield pa.RecordBatch.from_pylist([_group_result(gid, rows.filter(pa.array(gids == gid)))],
                                             schema=RESULT_SCHEMA)

    def _group_result(gid: int, found: pa.Table) -> dict:
        job, plans = jobs[gid]
        if dry_run:
            return {"gid": gid, "path": job.path, "group": job.group, "codes": count_group(job, plans, found)}
        if not states.held_by(job.path, owner):  # aborted (or lease lost): stop at this group boundary
            return {"gid": gid, "path": job.path, "group": job.group, "files": [], "error": ABORTED,
                    "codes": [0] * len(REASON_OF_CODE)}
        return rewrite_group(job, plans, found) | {"gid": gid}

    with_batches = np.flatnonzero(slot_of_gid >= 0)
    marks = spark.createDataFrame(pa.table({
        "slot": pa.array(slot_of_gid[with_batches]), "gid": pa.array(with_batches.astype(np.int32)),
        "key": pa.nulls(len(with_batches), pa.binary()), "mapped": pa.nulls(len(with_batches), pa.int64()),
    }))
    tasks = len(set(slot_of_gid[with_batches].tolist()))
    return (entries.unionByName(marks).repartition(max(tasks, 1), "slot")
            .mapInArrow(run, from_arrow_schema(RESULT_SCHEMA)).toArrow().to_pylist())


def _commit(row: dict, groups: list[dict], owner: str, generation: int | None) -> None:
    import storage
    from operations.cleaned import WrittenGroup

    end = row["latest_offset"] + 1
    if not storage.is_local_path(row["path"]):  # no atomic rename there: a commit record decides
        replaced = [segment_name(base, kind) for g in row["groups"] for base in g["segments"] for kind in SEGMENT_KINDS]
        staged = [path for g in groups for path in g["files"]]
        record = s3commit.plan_record(row["topic"], row["partition"], generation + 1, owner, staged, replaced, end)
        s3commit.commit_partition(row["log_dir"], row["path"], record)
        return
    part = scan_partition(row["path"], row["topic"], row["partition"])
    replaced = [s for s in part.segments if s.base_offset < end]
    written = [WrittenGroup(g["base_offset"], g["size"], g["batches"], g["records"], tuple(g["files"]))
               for g in groups]
    commit_partition(row["path"], written, replaced)
    set_cleaner_checkpoint(row["log_dir"], row["topic"], row["partition"], end)


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
