"""Stage 1 of the compaction job: each partition's batch plans, what Kafka's cleaner decides per batch
before it looks at records.

Tasks read batch headers, partition by partition, a chunk of a segment at a time
(``readers.walk``, through ``compaction.partition_scan``), and decide over columns of headers
(``compaction.decisions``). A partition's plans travel back to the driver as one blob of
``BATCH_PLAN`` records, with its segment groups and the aborted transactions each must list.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from compaction import partition_scan
from compaction.decisions import PLAN_FLAGS
from compaction.results import memory_error
from compaction.routing import task_threads
from compaction.tasks import bins, ranged, task_count
from readers.errors import FormatError

CONFIG_KEYS = ("delete.retention.ms", "segment.bytes", "segment.index.bytes", "producer.id.expiration.ms",
               "index.interval.bytes", "max.message.bytes", "message.max.bytes", "log.cleaner.io.buffer.size",
               "log.cleaner.threads")
PLAN_INPUT = ("path", "log_dir", "topic", "partition", "log_start_offset", "first_dirty_offset",
              "first_uncleanable_dirty_offset", "config")  # the plan's columns stage 1 reads

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


def batch_plans(spark, selected: pa.Table, now: int) -> pa.Table:
    """Stage 1: partitions in a few tasks of about equal bytes (the rows travel with the tasks,
    no shuffle), the result in the plan's order; a task with fewer partitions than cores reads
    a partition's segments on as many threads."""
    from pyspark.sql.pandas.types import from_arrow_schema

    rows = selected.select(list(PLAN_INPUT)).to_pylist()
    sizes = [size or 0 for size in selected.column("total_bytes").to_pylist()]
    shares = bins(sizes, task_count(spark, sum(sizes), len(rows)))
    threads = task_threads(spark, len(shares))

    def run(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in ids:
            for b in rb.column(0).to_pylist():
                yield pa.RecordBatch.from_pylist([plan_one(rows[i], now, threads) for i in shares[b]],
                                                 schema=PARTITION_PLAN)

    planned = ranged(spark, len(shares)).mapInArrow(run, from_arrow_schema(PARTITION_PLAN)).toArrow()
    rank = {path: i for i, path in enumerate(selected.column("path").to_pylist())}
    return planned.take(sorted(range(planned.num_rows), key=lambda i: rank[planned.column("path")[i].as_py()]))


def plan_one(row: dict, now: int, threads: int = 1) -> dict:
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
