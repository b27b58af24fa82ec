"""The compaction job: every selected partition of a plan cleaned as Kafka's cleaner would.

Stages (each a Spark job, with a job group naming it):
1. batch plans: one task per partition reads batch headers and decides, batch by batch,
   what Kafka's cleaner decides before looking at records (``compaction.decisions``);
2. offset map: the dirty range's records (``kafka-log`` source, compaction mode), latest
   offset per (partition, exact key) by a shuffle, so a key set may exceed any one
   executor's memory;
3. keep flags: every record of the segments to rewrite joined with its batch plan and
   the map, through the same rule as ``compaction.decisions.keep_record``;
4. rewrite: one task per segment group writes ``.cleaned`` files (``compaction.rewrite``);
5. commit, on the driver alone: per partition, every group swapped in or none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from compaction import partition_scan, states
from compaction.report import PartitionReport, Report
from compaction.rewrite import RESULT_SCHEMA, GroupJob, rewrite_group
from readers.errors import FormatError
from readers.indexes import AbortedTxn
from readers.logdir import scan_partition
from writers.swap import commit_partition, set_cleaner_checkpoint

CONFIG_KEYS = ("delete.retention.ms", "segment.bytes", "segment.index.bytes", "producer.id.expiration.ms",
               "index.interval.bytes")

BATCH_PLAN = pa.struct([
    ("segment", pa.int64()), ("position", pa.int64()), ("size", pa.int64()), ("group", pa.int32()),
    ("record_count", pa.int64()), ("is_control", pa.bool_()), ("feeds_map", pa.bool_()),
    ("delete", pa.bool_()), ("discard_records", pa.bool_()), ("retain_empty", pa.bool_()),
    ("retain_deletes", pa.bool_()), ("marker_for_empty_txn", pa.bool_()),
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
    ("batches", pa.list_(BATCH_PLAN)), ("groups", pa.list_(GROUP)),
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
            "config": json.dumps(config), "batches": [], "groups": [], "latest_offset": None, "error": None}
    try:
        _, _, decided = partition_scan.plan(
            row["path"], row["topic"], row["partition"], log_start=row["log_start_offset"],
            first_dirty=row["first_dirty_offset"], first_uncleanable=row["first_uncleanable_dirty_offset"],
            now=now, config=config)
    except (FormatError, OSError) as exc:
        return {**base, "seconds": time.monotonic() - started, "error": str(exc)}
    feeding = decided.map_batches
    base["batches"] = [
        {"segment": p.batch.segment, "position": p.batch.position, "size": p.batch.size, "group": p.group,
         "record_count": p.batch.record_count, "is_control": p.batch.is_control,
         "feeds_map": (p.batch.segment, p.batch.position) in feeding, "delete": p.delete,
         "discard_records": p.discard_records, "retain_empty": p.retain_empty, "retain_deletes": p.retain_deletes,
         "marker_for_empty_txn": p.marker_for_empty_txn}
        for p in decided.batches
    ]
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


KEEP_SQL = """
    NOT b.discard_records AND (
        r.isControl OR r.offset > b.latest_offset OR (
            r.key IS NOT NULL AND r.offset >= coalesce(m.mapped, -1) AND (NOT r.tombstone OR b.retain_deletes)))
"""
REASON_SQL = f"""
    CASE WHEN {KEEP_SQL} THEN 'kept'
         WHEN b.discard_records AND r.isControl THEN 'marker'
         WHEN b.discard_records THEN 'aborted'
         WHEN r.key IS NULL THEN 'keyless'
         WHEN r.offset < m.mapped THEN 'superseded'
         ELSE 'tombstone' END
"""


@dataclass(slots=True)
class JobResult:
    report: Report
    uncleanable: dict[str, str] = field(default_factory=dict)  # partition dir -> reason


def run(spark, plan: pa.Table, now: int, dry_run: bool = False, progress=print) -> JobResult:
    """Clean every selected partition of ``plan`` (a table with the planner's schema)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from readers.datasource import KafkaLogDataSource

    started = time.monotonic()
    selected = plan.filter(pa.compute.equal(plan.column("selected"), True))
    report = Report(now=now, dry_run=dry_run)
    result = JobResult(report)
    if selected.num_rows == 0:
        report.seconds = time.monotonic() - started
        return result
    sc = spark.sparkContext
    progress(f"stage 1/5: batch plans of {selected.num_rows} partitions")
    sc.setJobGroup("kcompact-batch-plans", f"batch-level decisions for {selected.num_rows} partitions")
    partitions = (spark.createDataFrame(selected).repartition(min(selected.num_rows, sc.defaultParallelism * 4))
                  .mapInArrow(_plan_rows(now), from_arrow_schema(PARTITION_PLAN)).toArrow())
    ok = partitions.filter(pa.compute.is_null(partitions.column("error")))
    for row in partitions.filter(pa.compute.is_valid(partitions.column("error"))).to_pylist():
        result.uncleanable[row["path"]] = row["error"]
        report.partitions.append(PartitionReport.failed(row))
    if ok.num_rows == 0:
        _mark_uncleanable(result, dry_run)
        report.seconds = time.monotonic() - started
        return result

    batch_plans = (spark.createDataFrame(ok.select(["path", "latest_offset", "first_dirty", "batches"]))
                   .select("path", "latest_offset", "first_dirty", F.explode("batches").alias("b"))
                   .select("path", "latest_offset", "first_dirty", "b.*"))
    spark.dataSource.register(KafkaLogDataSource)
    ranges = {row["path"]: row["latest_offset"] + 1 for row in ok.select(["path", "latest_offset"]).to_pylist()}
    records = (spark.read.format("kafka-log").option("mode", "compaction")
               .option("partitionDirs", json.dumps(ranges)).load())
    r = records.alias("r")
    b = batch_plans.alias("b")
    joined = r.join(b, (F.col("r.partitionDir") == F.col("b.path")) & (F.col("r.segmentBaseOffset") == F.col("b.segment"))
                    & (F.col("r.batchPosition") == F.col("b.position")))
    progress("stage 2/5: offset map (latest offset per exact key)")
    sc.setJobGroup("kcompact-offset-map", "latest offset per (partition, key) over the dirty range")
    offset_map = (joined.where("b.feeds_map AND r.key IS NOT NULL AND NOT r.isControl AND r.offset >= b.first_dirty")
                  .groupBy(F.col("b.path").alias("path"), F.col("r.key").alias("key"))
                  .agg(F.max("r.offset").alias("mapped")).alias("m"))
    decided = (joined
               .join(offset_map, (F.col("b.path") == F.col("m.path")) & (F.col("r.key") == F.col("m.key")), "left")
               .select(F.col("b.path").alias("path"), F.col("b.group").alias("group"),
                       F.col("b.segment").alias("segment"), F.col("b.position").alias("position"),
                       F.col("r.recordIndex").alias("record_index"), F.expr(KEEP_SQL).alias("keep"),
                       F.expr(REASON_SQL).alias("reason"))
               .cache())
    progress("stage 3/5: keep flags and reasons")
    sc.setJobGroup("kcompact-keep", "which records stay, and why the others go")
    counts = {(row["path"], row["reason"]): row["n"] for row in
              decided.groupBy("path", "reason").agg(F.count("*").alias("n")).toArrow().to_pylist()}
    jobs = _group_jobs(ok, now)
    if dry_run:
        for row in ok.to_pylist():
            report.partitions.append(PartitionReport.of(row, counts, [], committed=False))
        decided.unpersist()
        report.seconds = time.monotonic() - started
        return result
    progress(f"stage 4/5: rewriting {len(jobs)} segment groups")
    sc.setJobGroup("kcompact-rewrite", f"writing .cleaned segments for {len(jobs)} groups")
    written = _rewrite(spark, jobs, batch_plans, decided)
    decided.unpersist()
    progress("stage 5/5: committing (swap, checkpoint)")
    for row in ok.to_pylist():
        groups = [w for w in written if w["path"] == row["path"]]
        errors = [w["error"] for w in groups if w["error"]]
        if errors or len(groups) != len(row["groups"]):
            _discard(groups)
            result.uncleanable[row["path"]] = errors[0] if errors else "not every segment group was rewritten"
            report.partitions.append(PartitionReport.failed(row | {"error": result.uncleanable[row["path"]]}))
            continue
        _commit(row, groups)
        report.partitions.append(PartitionReport.of(row, counts, groups, committed=True))
        progress(f"  committed {row['topic']}-{row['partition']}: checkpoint {row['latest_offset'] + 1}")
    _mark_uncleanable(result, dry_run)
    report.seconds = time.monotonic() - started
    return result


def _group_jobs(ok: pa.Table, now: int) -> dict[tuple[str, int], GroupJob]:
    jobs = {}
    for row in ok.to_pylist():
        config = json.loads(row["config"])
        for g in row["groups"]:
            jobs[(row["path"], g["group"])] = GroupJob(
                path=row["path"], group=g["group"], base_offset=g["base_offset"], segments=tuple(g["segments"]),
                mtime_ms=g["mtime_ms"], aborted=tuple(AbortedTxn(**t) for t in g["aborted"]),
                index_interval_bytes=config["index.interval.bytes"],
                delete_retention_ms=config["delete.retention.ms"], now=now)
    return jobs


def _rewrite(spark, jobs: dict[tuple[str, int], GroupJob], batch_plans, decided) -> list[dict]:
    from pyspark.sql.pandas.types import from_arrow_schema

    def task(key, batches: pa.Table, records: pa.Table) -> pa.Table:
        job = jobs[(key[0].as_py(), key[1].as_py())]
        return pa.Table.from_pylist([rewrite_group(job, batches, records)], schema=RESULT_SCHEMA)

    plans = batch_plans.select("path", "group", "segment", "position", "delete",
                                                   "discard_records", "retain_empty", "retain_deletes",
                                                   "marker_for_empty_txn")
    keeps = decided.select("path", "group", "segment", "position", "record_index", "keep")
    return (plans.groupBy("path", "group").cogroup(keeps.groupBy("path", "group"))
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
