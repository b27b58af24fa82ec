"""A cleaning task is sent its own share of the partitions and no other's: what a task's function
holds goes whole to every task, so a job of 20,000 partitions in 16 tasks once cost each task the
unpickling of every partition's groups (``compaction.pipeline.tasks.shipped``)."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
from pyspark import cloudpickle

from kcompact.compaction.pipeline import shared, whole
from kcompact.compaction.pipeline.job import Batches
from kcompact.compaction.pipeline.tasks import JOB_CONF, blob_table, shipped, sql_conf, unshipped
from kcompact.compaction.rules.decisions import PLAN_FLAGS
from kcompact.session import kinds

SCHEMA = "partition long, items array<string>"


def _seen(ids):
    from pyspark import TaskContext

    for share in unshipped(ids):
        yield pa.RecordBatch.from_pydict({"partition": [TaskContext.get().partitionId()], "items": [share]})


def test_each_task_gets_its_own_share_in_order(spark):
    shares = [[f"s{n}-{i}" for i in range(n + 1)] for n in range(7)]
    rows = shipped(spark, shares).mapInArrow(_seen, SCHEMA).collect()
    assert sorted((r.partition, r["items"]) for r in rows) == list(enumerate(shares))


def test_the_driver_sends_each_share_apart(spark):
    """Above the session's local-relation threshold (here 0) a DataFrame made from Arrow is a
    partition per batch: each share its own batch, so the stage that places the rows serializes
    one share a task, not every share in one task (100,000 partitions' 200 MB had run the driver's
    JVM out of heap there, and the job hung)."""
    shares = [[f"s{n}-{i}" for i in range(3)] for n in range(5)]
    assert [b.num_rows for b in blob_table(shares).to_batches(max_chunksize=16)] == [1] * 5
    with sql_conf(spark, {**JOB_CONF, "spark.sql.execution.arrow.localRelationThreshold": "0"}):
        source = spark.createDataFrame(blob_table(shares))
        assert source._jdf.rdd().getNumPartitions() == 5
        rows = shipped(spark, shares).mapInArrow(_seen, SCHEMA).collect()
    assert sorted((r.partition, r["items"]) for r in rows) == list(enumerate(shares))


def test_no_shares_make_no_rows(spark):
    assert shipped(spark, []).mapInArrow(_seen, SCHEMA).collect() == []


def test_the_whole_paths_task_function_does_not_grow_with_the_partitions(spark, monkeypatch):
    functions = []
    monkeypatch.setattr(kinds, "carrying", lambda session, function: functions.append(function) or function)
    settings = SimpleNamespace(task_threads=lambda tasks: 1, step_bytes=1 << 20)
    for partitions in (10, 1000):
        pids = list(range(partitions))
        jobs = {pid: ("a group's job and plans", bytes(2000)) for pid in pids}  # one group each
        whole.clean(spark, pids, [1 << 20] * partitions, [100] * partitions, jobs, {pid: [pid] for pid in pids},
                    dry_run=True, owner="test", settings=settings)
    small, large = (len(cloudpickle.dumps(f)) for f in functions)
    assert large < small + 1000  # the groups' 2 MB travel as rows, one share to a task


def _batches(partitions: int, per_partition: int = 40, groups: int = 3) -> Batches:
    """The batch plans of ``partitions`` partitions as the job holds them: ``per_partition`` batches
    each, over 4 segments and ``groups`` groups."""
    n = partitions * per_partition
    local = np.arange(n) % per_partition
    pid = np.arange(n) // per_partition
    return Batches(starts=np.arange(partitions + 1) * per_partition, sizes=np.full(n, 1500, np.int64),
                   records=np.full(n, 12, np.int64), first_dirty=np.zeros(partitions, np.int64),
                   latest_offset=np.full(partitions, 10_000, np.int64), segment=(local // 10 * 1000).astype(np.int64),
                   position=(local % 10 * 1500).astype(np.int64), gid=(pid * groups + local * groups // per_partition),
                   feeds_map=np.ones(n, bool), flags=np.zeros((n, len(PLAN_FLAGS)), bool),
                   pid_of_gid=np.repeat(np.arange(partitions), groups))


def test_the_shared_paths_map_function_holds_its_own_partitions_plans(spark, monkeypatch):
    functions = []
    monkeypatch.setattr(kinds, "carrying", lambda session, function: functions.append(function) or function)
    monkeypatch.setattr(shared, "scan_partition", lambda *args: None)
    monkeypatch.setattr(shared, "partition_ranges", lambda part, offsets: [
        SimpleNamespace(path="p/00000000000000000000.log", start=0, end=60_000, segment_base=0, file_size=60_000)])
    for partitions in (10, 1000):
        batches = _batches(partitions)
        rows = [SimpleNamespace(path=f"/logs/t-{pid}", topic="t", partition=pid, latest_offset=9_999)
                for pid in range(partitions)]
        jobs = {gid: ("a group's job", SimpleNamespace(size=np.full(13, 1500))) for gid in range(3)}
        shared.clean(spark, [0], rows, batches, jobs, {0: [0, 1, 2]}, dry_run=True, owner="test",
                     map_bytes=1 << 20, budget=1 << 30, step_bytes=1 << 20)
    small, large = (len(cloudpickle.dumps(f)) for f in functions[0::2])  # each call's map function
    # every group's partition number stays (8 bytes a group: its keys' buckets go by it); every
    # partition's batch plans (39,600 more batches here) no longer do
    assert large < small + 16 * 3 * 990
