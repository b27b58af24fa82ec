"""A cleaning task is sent its own share of the partitions and no other's: what a task's function
holds goes whole to every task, so a job of 20,000 partitions in 16 tasks once cost each task the
unpickling of every partition's groups (``compaction.pipeline.tasks.shipped``)."""

from types import SimpleNamespace

import pyarrow as pa
from pyspark import cloudpickle

from kcompact.compaction.pipeline import whole
from kcompact.compaction.pipeline.tasks import shipped, unshipped
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
