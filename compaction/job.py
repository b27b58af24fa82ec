"""The compaction job: every selected partition of a plan cleaned as Kafka's cleaner would.

Stages (Spark jobs named by job groups):
1. batch plans: one task per partition reads batch headers and decides, batch by batch,
   what Kafka's cleaner decides before looking at records (``compaction.decisions``);
2. offset map: one task per split of the dirty range's segments reads the records as the
   ``kafka-log`` source does in compaction mode (no value is decoded) and gives each the fate
   its batch plan decides; only "superseded or not" is left, the latest offset per
   (partition, exact key): a window over a shuffle, so a key set may exceed any one
   executor's memory;
3. keep flags: each record's fate, through the same rule as ``compaction.decisions.keep_record``;
4. rewrite: one task per segment group writes ``.cleaned`` files (``compaction.rewrite``) and
   counts the fates;
5. commit, on the driver alone: per partition, every group swapped in or none.
Stages 2-4 run as one Spark job (three Spark stages: read, window, rewrite), so nothing is
cached or read twice; a dry run stops after stage 3 with the counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from compaction import partition_scan, states
from compaction.report import PartitionReport, Report
from compaction.rewrite import (
    DISCARD,
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
from readers.logdir import scan_partition
from writers.swap import commit_partition, set_cleaner_checkpoint

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


def _plan_rows(now: int):
    """Stage 1, on executors: a partition's batch plans (or the error that stops it)."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            out = [_plan_one(row, now) for row in rb.to_pylist()]
            yield pa.RecordBatch.from_pylist(out, schema=PARTITION_PLAN)
    return run


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


# The offset map, as each group needs it. A read task per split keeps, per key of its records,
# the largest offset of a record that feeds the map and the smallest of one whose fate waits on
# the map; a window over (key, partition) gives the map's offset; a group hears of a key only
# when that offset supersedes one of its records.
KEY_SCHEMA = pa.schema([
    ("pid", pa.int32()), ("key", pa.binary()), ("gid", pa.int32()), ("feeds", pa.int64()), ("waits", pa.int64()),
])
MAP_SQL = "max(feeds) OVER (PARTITION BY key, pid)"


@dataclass(slots=True)
class JobResult:
    report: Report
    uncleanable: dict[str, str] = field(default_factory=dict)  # partition dir -> reason


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
        lo, hi = lo + np.searchsorted(in_partition, segment, "left"), lo + np.searchsorted(in_partition, segment, "right")
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
        ready: float | None = None) -> JobResult:
    """Clean every selected partition of ``plan`` (a table with the planner's schema).
    ``ready``: ``time.monotonic()`` when the session was ready, so the report's stages start with planning."""
    from pyspark.sql.pandas.types import from_arrow_schema

    started = time.monotonic()
    watch = Stopwatch(started if ready is None else ready)
    if ready is not None:
        watch.lap("plan")
    selected = plan.filter(pa.compute.equal(plan.column("selected"), True))
    report = Report(now=now, dry_run=dry_run, stages=watch.laps)
    result = JobResult(report)
    if selected.num_rows == 0:
        report.seconds = time.monotonic() - started
        return result
    sc = spark.sparkContext
    progress(f"stage 1/5: batch plans of {selected.num_rows} partitions")
    sc.setJobGroup("kcompact-batch-plans", f"batch-level decisions for {selected.num_rows} partitions")
    partitions = (spark.createDataFrame(selected).repartition(min(selected.num_rows, sc.defaultParallelism * 4))
                  .mapInArrow(_plan_rows(now), from_arrow_schema(PARTITION_PLAN)).toArrow())
    watch.lap("1 batch plans")
    ok = partitions.filter(pa.compute.is_null(partitions.column("error")))
    for row in partitions.filter(pa.compute.is_valid(partitions.column("error"))).to_pylist():
        result.uncleanable[row["path"]] = row["error"]
        report.partitions.append(PartitionReport.failed(row))
    if ok.num_rows == 0:
        _mark_uncleanable(result, dry_run)
        report.seconds = time.monotonic() - started
        return result

    rows = ok.drop_columns(["batches"]).to_pylist()
    batches = Batches.of(ok)
    jobs = _group_jobs(rows, batches, now)
    entries = _map_entries(spark, rows, batches)
    stage = "2-3 offset map, keep flags" if dry_run else "2-4 offset map, keep flags, rewrite"
    progress(f"stages {stage} ({len(jobs)} segment groups)")
    sc.setJobGroup("kcompact-clean", f"offset map, keep flags, .cleaned segments for {len(jobs)} groups")
    written = _per_group(spark, jobs, entries, dry_run)
    watch.lap(stage)
    counts: dict[tuple[str, str], int] = {}
    for w in written:
        for code, n in enumerate(w["codes"]):
            key = (w["path"], REASON_OF_CODE[code])
            counts[key] = counts.get(key, 0) + n
    if dry_run:
        for pid, row in enumerate(rows):
            report.partitions.append(PartitionReport.of(batches.report_row(row, pid), counts, [], committed=False))
        report.seconds = time.monotonic() - started
        return result
    progress("stage 5/5: committing (swap, checkpoint)")
    for pid, row in enumerate(rows):
        groups = [w for w in written if w["path"] == row["path"]]
        errors = [w["error"] for w in groups if w["error"]]
        if errors or len(groups) != len(row["groups"]):
            _discard(groups)
            result.uncleanable[row["path"]] = errors[0] if errors else "not every segment group was rewritten"
            report.partitions.append(PartitionReport.failed(row | {"error": result.uncleanable[row["path"]]}))
            continue
        _commit(row, groups)
        report.partitions.append(PartitionReport.of(batches.report_row(row, pid), counts, groups, committed=True))
        progress(f"  committed {row['topic']}-{row['partition']}: checkpoint {row['latest_offset'] + 1}")
    _mark_uncleanable(result, dry_run)
    watch.lap("5 commit")
    report.seconds = time.monotonic() - started
    return result


def _map_entries(spark, rows: list[dict], batches: Batches):
    """(gid, key, mapped): the offset map's offset of each key that supersedes a record of group gid.
    Read by one task per split of the ``kafka-log`` source's compaction mode (largest first)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    splits = sorted(((pid, split) for pid, row in enumerate(rows) for split in partition_splits(
        scan_partition(row["path"], row["topic"], row["partition"]), OffsetRange(None, row["latest_offset"] + 1),
        DEFAULT_MAX_SPLIT_BYTES)), key=lambda item: item[1].start - item[1].end)

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in ids:
            for i in rb.column(0).to_pylist():
                found = _split_keys(splits[i][1], splits[i][0], batches)
                if found is not None:
                    yield found

    keys = spark.range(0, len(splits), 1, max(len(splits), 1)).mapInArrow(read, from_arrow_schema(KEY_SCHEMA))
    return (keys.repartition(spark.sparkContext.defaultParallelism * 2, "key", "pid")
            .select("gid", "key", "waits", F.expr(MAP_SQL).alias("mapped"))
            .where("waits < mapped").select("gid", "key", "mapped"))


def _group_jobs(rows: list[dict], batches: Batches, now: int) -> dict[int, tuple[GroupJob, GroupPlans]]:
    jobs, gid = {}, 0
    for row in rows:
        config = json.loads(row["config"])
        for g in row["groups"]:
            job = GroupJob(
                path=row["path"], group=g["group"], base_offset=g["base_offset"], segments=tuple(g["segments"]),
                mtime_ms=g["mtime_ms"], aborted=tuple(AbortedTxn(**t) for t in g["aborted"]),
                index_interval_bytes=config["index.interval.bytes"],
                delete_retention_ms=config["delete.retention.ms"], now=now, latest_offset=row["latest_offset"])
            jobs[gid] = (job, batches.group_plans(gid))
            gid += 1
    return jobs


def _per_group(spark, jobs: dict[int, tuple[GroupJob, GroupPlans]], entries, dry_run: bool) -> list[dict]:
    """One task per group with batches (as a cogroup with the batch plans would call it): a row
    (gid, null key) per such group joins the map entries, so every such group is called. A dry
    run counts the fates and writes nothing."""
    from pyspark.sql.pandas.types import from_arrow_schema

    def task(key, found):  # no hints: applyInArrow reads them to choose its API, and fails on these
        gid = key[0].as_py()
        job, plans = jobs[gid]
        if dry_run:
            out = {"gid": gid, "path": job.path, "group": job.group, "codes": count_group(job, plans, found)}
        else:
            out = rewrite_group(job, plans, found) | {"gid": gid}
        return pa.Table.from_pylist([out], schema=RESULT_SCHEMA)

    with_batches = [gid for gid, (_, plans) in jobs.items() if len(plans.segment)]
    marks = spark.createDataFrame(pa.table({
        "gid": pa.array(with_batches, pa.int32()), "key": pa.nulls(len(with_batches), pa.binary()),
        "mapped": pa.nulls(len(with_batches), pa.int64()),
    }))
    return (entries.unionByName(marks).repartition(max(len(with_batches), 1), "gid").groupBy("gid")
            .applyInArrow(task, from_arrow_schema(RESULT_SCHEMA)).toArrow().to_pylist())


def _commit(row: dict, groups: list[dict]) -> None:
    from writers.cleaned import WrittenGroup

    part = scan_partition(row["path"], row["topic"], row["partition"])
    end = row["latest_offset"] + 1
    replaced = [s for s in part.segments if s.base_offset < end]
    written = [WrittenGroup(g["base_offset"], g["size"], g["batches"], g["records"], tuple(g["files"]))
               for g in groups]
    commit_partition(row["path"], written, replaced)
    set_cleaner_checkpoint(row["log_dir"], row["topic"], row["partition"], end)


def _discard(groups: list[dict]) -> None:
    import storage

    for g in groups:
        for path in g["files"]:
            if storage.exists(path):
                storage.remove(path)


def _mark_uncleanable(result: JobResult, dry_run: bool) -> None:
    if dry_run:
        return
    for path, reason in result.uncleanable.items():
        states.mark_uncleanable(path, reason)
