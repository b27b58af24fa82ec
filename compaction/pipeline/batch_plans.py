"""Stage 1 of the compaction job: each partition's batch plans, what Kafka's cleaner decides per batch
before it looks at records.

Tasks read batch headers, partition by partition, a chunk of a segment at a time
(``readers.walk``, through ``compaction.cleaning.partition_scan``), and decide over columns of headers
(``compaction.rules.decisions``). A partition's plans travel back to the driver as one blob of
``BATCH_PLAN`` records, with its segment groups and the aborted transactions each must list.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from kcompact import storage
from kcompact.compaction.cleaning import partition_scan
from kcompact.compaction.cleaning.results import read_error, read_failure_of
from kcompact.compaction.pipeline.settings import JobSettings
from kcompact.compaction.pipeline.tasks import bins, ranged, task_count
from kcompact.compaction.pipeline.to_clean import PartitionToClean
from kcompact.compaction.rules.cleaner_config import CLEANER_CONFIG
from kcompact.compaction.rules.decisions import PLAN_FLAGS
from kcompact.readers.errors import FormatError

# A partition's batch plans travel from its stage 1 task as one blob of these records: a nested
# Arrow list of structs would cost Spark a row conversion per batch, twice.
BATCH_PLAN = np.dtype([
    ("segment", "<i8"), ("position", "<i8"), ("size", "<i8"), ("records", "<i4"), ("group", "<i4"),
    ("feeds_map", "?"), *((name, "?") for name in PLAN_FLAGS),
])
GROUP = pa.struct([
    ("group", pa.int32()), ("base_offset", pa.int64()), ("segments", pa.list_(pa.int64())),
    ("sizes", pa.list_(pa.int64())), ("mtime_ms", pa.int64()),
    ("aborted", pa.list_(pa.struct([("producer_id", pa.int64()), ("first_offset", pa.int64()),
                                    ("last_offset", pa.int64()), ("last_stable_offset", pa.int64())]))),
])
PARTITION_PLAN = pa.schema([
    ("path", pa.string()), ("log_dir", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("first_dirty_offset", pa.int64()), ("first_uncleanable_dirty_offset", pa.int64()), ("latest_offset", pa.int64()),
    ("config", CLEANER_CONFIG), ("seconds", pa.float64()), ("error", pa.string()), ("failure", pa.string()),
    ("batches", pa.binary()), ("groups", pa.list_(GROUP)),
])


def batch_plans(spark, partitions: list[PartitionToClean], now: int, settings: JobSettings) -> pa.Table:
    """Stage 1: partitions in a few tasks of about equal bytes (the partitions travel with the
    tasks, no shuffle), the result in their order; a task with fewer partitions than cores reads
    a partition's segments on as many threads; on an object store a task reads several partitions
    at once (``storage.map_in_flight``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    sizes = [p.total_bytes for p in partitions]
    shares = bins(sizes, task_count(spark, sum(sizes), len(partitions)))
    threads = settings.task_threads(len(shares))

    def run(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in ids:
            for b in rb.column(0).to_pylist():
                mine = [partitions[i] for i in shares[b]]
                rows = storage.map_in_flight(lambda p: plan_one(p, now, threads), mine, mine[0].path) if mine else []
                yield pa.RecordBatch.from_pylist(rows, schema=PARTITION_PLAN)

    planned = ranged(spark, len(shares)).mapInArrow(run, from_arrow_schema(PARTITION_PLAN)).toArrow()
    rank = {p.path: i for i, p in enumerate(partitions)}
    return planned.take(sorted(range(planned.num_rows), key=lambda i: rank[planned.column("path")[i].as_py()]))


def plan_one(p: PartitionToClean, now: int, threads: int = 1) -> dict:
    """One partition's batch plans; ``threads``: its segments read at once (the cores its task
    leaves idle)."""
    started = time.monotonic()
    base = {
        "path": p.path,
        "log_dir": p.log_dir,
        "topic": p.topic,
        "partition": p.partition,
        "first_dirty_offset": p.first_dirty_offset,
        "first_uncleanable_dirty_offset": p.first_uncleanable_dirty_offset,
        "config": p.config.struct(),
        "batches": b"",
        "groups": [],
        "latest_offset": None,
        "error": None,
    }
    try:
        _, table, decided = partition_scan.plan(
            p.path, p.topic, p.partition, log_start=p.log_start_offset, first_dirty=p.first_dirty_offset,
            first_uncleanable=p.first_uncleanable_dirty_offset, now=now, config=p.config,
            retain_last_empty_at=p.retain_last_empty_at, threads=threads, listed=p.listed)
    except (FormatError, OSError, MemoryError) as exc:
        return {**base, "seconds": time.monotonic() - started, "error": read_error(exc, p.path),
                "failure": read_failure_of(exc)}
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
         "sizes": [s.size for s in group],
         "mtime_ms": group[-1].mtime_ms,
         "aborted": [{"producer_id": t.producer_id, "first_offset": t.first_offset, "last_offset": t.last_offset,
                      "last_stable_offset": t.last_stable_offset} for t in decided.txn_index.get(g, [])]}
        for g, group in enumerate(decided.groups)
    ]
    base["latest_offset"] = decided.latest_offset
    base["seconds"] = time.monotonic() - started
    return base
