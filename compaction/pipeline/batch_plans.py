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
from kcompact.compaction.cleaning.partition_batches import Aborted, PartitionBatches, SegmentGroup
from kcompact.compaction.cleaning.results import read_error, read_failure_of
from kcompact.compaction.pipeline.settings import JobSettings
from kcompact.compaction.pipeline.tasks import bins, ranged, task_count
from kcompact.compaction.pipeline.to_clean import PartitionToClean
from kcompact.compaction.rules.decisions import PLAN_FLAGS
from kcompact.errors import FormatError
from kcompact.session import kinds

# A partition's batch plans travel from its stage 1 task as one blob of these records: a nested
# Arrow list of structs would cost Spark a row conversion per batch, twice.
BATCH_PLAN = np.dtype([
    ("segment", "<i8"), ("position", "<i8"), ("size", "<i8"), ("records", "<i4"), ("group", "<i4"),
    ("feeds_map", "?"), *((name, "?") for name in PLAN_FLAGS),
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
                yield PartitionBatches.batch(rows)

    schema = from_arrow_schema(PartitionBatches.schema())
    planned = ranged(spark, len(shares)).mapInArrow(kinds.carrying(spark, run), schema).toArrow()
    rank = {p.path: i for i, p in enumerate(partitions)}
    return planned.take(sorted(range(planned.num_rows), key=lambda i: rank[planned.column("path")[i].as_py()]))


def plan_one(p: PartitionToClean, now: int, threads: int = 1) -> PartitionBatches:
    """One partition's batch plans; ``threads``: its segments read at once (the cores its task
    leaves idle)."""
    started = time.monotonic()
    base = PartitionBatches(p.path, p.log_dir, p.topic, p.partition, p.first_dirty_offset,
                         p.first_uncleanable_dirty_offset, config=p.config)
    try:
        _, table, decided = partition_scan.plan(
            p.path, p.topic, p.partition, log_start=p.log_start_offset, first_dirty=p.first_dirty_offset,
            first_uncleanable=p.first_uncleanable_dirty_offset, now=now, config=p.config,
            retain_last_empty_at=p.retain_last_empty_at, threads=threads, listed=p.listed)
    except (FormatError, OSError, MemoryError) as exc:
        return base.but(seconds=time.monotonic() - started, error=read_error(exc, p.path),
                        failure=read_failure_of(exc))
    rewritten = decided.group >= 0
    plans = np.zeros(int(rewritten.sum()), BATCH_PLAN)
    for name in ("segment", "position", "size"):
        plans[name] = table[name][rewritten]
    plans["records"] = table["record_count"][rewritten]
    plans["group"], plans["feeds_map"] = decided.group[rewritten], decided.feeds[rewritten]
    for i, name in enumerate(PLAN_FLAGS):
        plans[name] = decided.flags[rewritten, i]
    groups = tuple(
        SegmentGroup(g, group[0].base_offset, tuple(s.base_offset for s in group), tuple(s.size for s in group),
              group[-1].mtime_ms, tuple(Aborted(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                                        for t in decided.txn_index.get(g, [])))
        for g, group in enumerate(decided.groups)
    )
    return base.but(batches=plans.tobytes(), groups=groups, latest_offset=decided.latest_offset,
                    seconds=time.monotonic() - started)
