"""Cutting work into Spark tasks: how many, which items each takes, and which row lands where.

A Python task costs Spark a fixed amount of work, so a task takes a share of the work rather than
one partition, split or group: one task per core, each of at most ``TASK_BYTES`` (a failed task's
share is read again), shares balanced by bytes, largest first. The shared path's tasks take
``SHARED_TASK_BYTES``, two per core: a map task's key table is sized for the records it reads, and
a capped worker holds it only for shares that small (``compaction.pipeline.routing``). Rows meet in the
task meant for them by slots (``slots``), so every shuffle has its partition count set.

The cleaning stages cut large work finer (``step_bytes``): up to ``STEPS`` tasks per core, none
under ``STEP_BYTES`` by default (the job's setting ``spark.kcompact.step.bytes``), in a multiple of
the cores: tasks of equal bytes take about equal time, so a seventh on two cores would run alone
while the other core idles. Nothing a
running Python task counts reaches the driver before the task ends (accumulators, ``observe``
and the server's progress reports over Connect alike), so progress
moves, with an honest ETA, only as tasks end: a few more tasks cost a few tenths of a second
on work long enough to need progress, and nothing on small work.
"""

from __future__ import annotations

import contextlib
import heapq
import pickle
from collections.abc import Iterator

import pyarrow as pa

from kcompact.session import kinds

TASK_BYTES = 1 << 30
SHARED_TASK_BYTES = 256 << 20
STEPS = 8  # tasks per core at most for progress's sake: each one that ends moves it
STEP_BYTES = 16 << 20  # no task cut smaller than this for progress's sake
# Every shuffle here has its partition count set, so adaptive execution has nothing to adapt; it
# would only split the job at each shuffle and plan again in between. Blob rows are megabytes:
# Arrow batches of a few of them, not thousands.
JOB_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.execution.arrow.maxRecordsPerBatch": "16"}

# A task's row: a slot that places it (``slots``) and one pickled or Arrow-encoded payload
BLOB_SCHEMA = pa.schema([("slot", pa.int32()), ("blob", pa.binary())])


def task_count(spark, total_bytes: int, items: int, task_bytes: int = TASK_BYTES, per_core: int = 1,
               step_bytes: int | None = None) -> int:
    """How many tasks take ``items`` of ``total_bytes``; ``step_bytes``: a cleaning stage, whose
    progress the console shows, cut finer when it is large (``STEPS``, none under ``step_bytes``)."""
    cores = kinds.parallelism(spark)
    wanted = max(per_core * cores, -(-total_bytes // task_bytes))
    if step_bytes is not None:
        steps = min(STEPS * cores, total_bytes // step_bytes)
        wanted = max(wanted, steps - steps % cores)  # whole rounds: no last task left to run alone
    return max(1, min(items, wanted))


def bins(sizes: list[int], n: int) -> list[list[int]]:
    """Indexes of ``sizes`` in at most ``n`` bins of nearly equal sums: largest first, each into
    the lightest bin; the heaviest bin first (Spark starts tasks in order)."""
    heap = [(0, b) for b in range(n)]
    out: list[list[int]] = [[] for _ in range(n)]
    loads = [0] * n
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        load, b = heapq.heappop(heap)
        out[b].append(i)
        loads[b] = load + sizes[i]
        heapq.heappush(heap, (loads[b], b))
    return [out[b] for b in sorted(range(n), key=lambda b: -loads[b]) if out[b]]


def ranged(spark, n: int):
    """Rows 0..n-1, one per Spark partition: task i knows its share by its row."""
    return spark.range(0, n, 1, max(n, 1))


def shipped(spark, shares: list[list]):
    """One row per share, ``blob`` its items pickled, each row in a Spark partition of its own (by
    ``slots``, in order): a task unpickles its own share alone (``unshipped``). What a task's
    function holds goes whole to every task, so shares carried that way cost each task the
    whole job's items: a stage of several tasks per core pays that many times over. The shuffle
    that places the rows costs more than a stage of one task per core saves, so stage 1 and the
    plan carry their items in the function."""
    return spark.createDataFrame(blob_table(shares)).repartition(max(len(shares), 1), "slot")


def blob_table(shares: list[list]) -> pa.Table:
    """``shipped``'s rows, each share an Arrow batch of its own. A session makes a partition of
    each batch of a table it is given; in one batch, every share went to the one task of the
    stage that places the rows, serialized whole by the driver's JVM (at 100,000 partitions over
    200 MB, past a 1 GiB heap)."""
    batches = [pa.record_batch([pa.array([slot], pa.int32()), pa.array([pickle.dumps(share, pickle.HIGHEST_PROTOCOL)],
                                                                          pa.binary())], schema=BLOB_SCHEMA)
               for slot, share in zip(slots(len(shares)), shares, strict=True)]
    return pa.Table.from_batches(batches, schema=BLOB_SCHEMA)


def unshipped(batches) -> Iterator[list]:
    """The shares of ``shipped`` rows a task was given, each as it was pickled."""
    for rb in batches:
        for blob in rb.column("blob"):
            yield pickle.loads(blob.as_buffer())


def slots(n: int) -> list[int]:
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


@contextlib.contextmanager
def sql_conf(spark, values: dict[str, str]) -> Iterator[None]:
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
