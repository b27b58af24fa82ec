"""What differs between a classic Spark session and a Spark Connect client's, in one place.

A Connect client has no SparkContext: no job groups, no status tracker, no SparkConf, no
``defaultParallelism``. Everything else the product asks of Spark (DataFrames, ``mapInArrow``,
Python data sources, ``spark.conf``, tags and ``interruptTag``) works on both kinds, so the
other layers call Spark directly and come here only for these. Nothing here starts a session.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

PROBE_ROWS = 1 << 16  # rows of the one-off job that counts a Connect session's default partitions
_parallelism: dict[str, int] = {}  # Connect session id -> what its probe counted


def is_connect(spark) -> bool:
    """A Spark Connect client's session (``pyspark.sql.connect``), not a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def setting(spark, key: str, default: str | None = None) -> str | None:
    """A Spark setting as the session sees it: the SQL conf, which starts from the application's
    SparkConf (``--conf``, ``spark-defaults.conf``) on both kinds."""
    return spark.conf.get(key, default)


def parallelism(spark) -> int:
    """How many tasks keep the cores busy: classic, ``SparkContext.defaultParallelism``; Connect,
    ``spark.default.parallelism`` when set, else the partitions the server gives a
    ``spark.range`` with no count (its default parallelism, what the classic figure is), counted
    once per session by a one-stage job."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    chosen = setting(spark, "spark.default.parallelism")
    if chosen:
        return int(chosen)
    if spark.session_id not in _parallelism:
        probe = (spark.range(0, PROBE_ROWS).selectExpr("spark_partition_id() AS p")
                 .selectExpr("max(p) + 1 AS n").first())
        _parallelism[spark.session_id] = int(probe["n"])
    return _parallelism[spark.session_id]


def carrying(spark, task):
    """``task``, a ``mapInArrow`` function, as the session's executors must run it to reach the
    object stores: as it is on a classic session (its executors were given their settings where
    the application was submitted); over Connect, with the client's settings, which the server's
    executors were never given (``storage.carried``)."""
    if not is_connect(spark):
        return task
    from kcompact.storage import carried

    return carried.carrying(task, carried.settings())


def name_jobs(spark, group: str, description: str) -> None:
    """Name the Spark jobs this thread starts from now on (Spark's UI, the event log). A job group
    on a classic session; a Connect client has none: its jobs carry ``cancellable``'s tag."""
    if not is_connect(spark):
        spark.sparkContext.setJobGroup(group, description)


@contextlib.contextmanager
def cancellable(spark, step: str) -> Iterator[str]:
    """Tag the Spark jobs this thread starts inside the block (``kcompact-<step>-<id>``) and, when
    the block ends by an exception (a Ctrl-C or SIGTERM raised as ``KeyboardInterrupt`` among
    them), interrupt those still running, so that no task goes on writing ``.cleaned`` files
    for a driver that has given up. One path for both kinds (``addTag``, ``interruptTag``)."""
    tag = f"kcompact-{step}-{uuid.uuid4().hex[:12]}"
    spark.addTag(tag)
    try:
        yield tag
    except BaseException:
        with contextlib.suppress(Exception):  # a session already gone has no jobs left
            spark.interruptTag(tag)
        raise
    finally:
        with contextlib.suppress(Exception):
            spark.removeTag(tag)


@contextlib.contextmanager
def status(spark) -> Iterator[object]:
    """The running jobs' task counts, with the methods of Spark's status tracker that
    ``jobs.progress.Ticker`` reads: classic, the SparkContext's; Connect, the server's progress
    reports of this client's operations (``spark.registerProgressHandler``)."""
    if not is_connect(spark):
        yield spark.sparkContext.statusTracker()
        return
    tracker = _ConnectStatus()
    spark.registerProgressHandler(tracker)
    try:
        yield tracker
    finally:
        spark.removeProgressHandler(tracker)


class _ConnectStatus:
    """A Connect operation stands for a job; its stages are the server's latest report of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}  # operation id -> the job id shown for it
        self._stages: dict[int, list] = {}  # job id of a running operation -> its stages

    def __call__(self, stages, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        with self._lock:
            job = self._ids.setdefault(operation_id or "", len(self._ids))
            if done:
                self._stages.pop(job, None)
            else:
                self._stages[job] = list(stages or [])

    def getActiveJobsIds(self) -> list[int]:  # the status tracker's names
        with self._lock:
            return list(self._stages)

    def getJobInfo(self, job: int):
        with self._lock:
            stages = self._stages.get(job)
        if stages is None:
            return None
        return SimpleNamespace(jobId=job, stageIds=[(job, i) for i in range(len(stages))])

    def getStageInfo(self, key: tuple[int, int]):
        job, i = key
        with self._lock:
            stages = self._stages.get(job) or []
        if i >= len(stages):
            return None
        return SimpleNamespace(numTasks=stages[i].num_tasks, numCompletedTasks=stages[i].num_completed_tasks)


def wait_for_jobs(spark, seconds: float) -> bool:
    """Wait until no Spark job of this session runs (cancelled ones ending with their tasks), for at
    most ``seconds``; whether none runs. A Connect server's jobs are its own to end: not waited for."""
    if is_connect(spark):
        return True
    deadline = time.monotonic() + seconds
    while True:
        try:
            active = spark.sparkContext.statusTracker().getActiveJobsIds()
        except Exception:  # noqa: BLE001 - a JVM the same signal ended runs nothing
            return True
        if not active:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)

