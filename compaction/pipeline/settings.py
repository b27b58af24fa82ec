"""The Spark settings the compaction job reads besides Spark's own, and their checks: a bad value
is refused, naming the setting, before the job writes anything (the command line checks its
``--spark-conf``; spark-submit's ``--conf`` and a notebook's are checked when the job starts).
The job reads them once, as it starts (``JobSettings.of``), and passes them down."""

from __future__ import annotations

from dataclasses import dataclass

from kcompact import errors
from kcompact.compaction.pipeline.routing import (
    DEFAULT_MAP_MEMORY,
    MIN_WORKER_MEMORY,
    WHOLE_BYTES,
    WHOLE_PER_THREAD,
    WORKER_IMPORTS,
    Limits,
)
from kcompact.compaction.pipeline.tasks import STEP_BYTES
from kcompact.conf.units import spark_size
from kcompact.session import kinds

# The bytes a task may give one partition's offset map (``routing``: by default a quarter of the
# worker's cap, uncapped DEFAULT_MAP_MEMORY).
MAP_MEMORY = "spark.kcompact.map.memory"
# Threads a task of batch plans or of whole partitions uses (rounded down to a power of two: the
# map's key shards); by default the cores its job leaves idle (one large partition: all of them).
THREADS = "spark.kcompact.threads"
# A partition of at most these bytes is read whole by one task whatever its keys (``routing``);
# 0 sends every partition whose map exceeds a task's map memory down the shared path.
WHOLE = "spark.kcompact.whole.bytes"
# The smallest task a cleaning stage is cut into for its progress's sake (``tasks.task_count``)
STEP = "spark.kcompact.step.bytes"
# Whether the rewrite writes its .log files past the page cache (``storage.DirectFile``), "true" by
# default; "false" writes them through it, as Kafka's cleaner does, leaving them in the cache.
DIRECT_WRITES = "spark.kcompact.write.direct"
# Threads of the driver that rename and fsync in a local commit wave (``operations.commit.commit_wave``)
COMMIT_THREADS = "spark.kcompact.commit.threads"
DEFAULT_COMMIT_THREADS = 4
# Spark's cap on a Python worker's address space: below MIN_WORKER_MEMORY a worker cannot clean a partition
WORKER_MEMORY = "spark.executor.pyspark.memory"


@dataclass(frozen=True, slots=True)
class JobSettings:
    """This job's settings as the session had them when the job started."""

    map_memory: int  # the bytes a task may give one partition's offset map (MAP_MEMORY)
    worker_cap: int | None  # the address space a Python worker may take (WORKER_MEMORY), None: uncapped
    threads: int | None  # threads per task (THREADS), None: the cores the job's tasks leave idle
    cores: int  # Spark's default parallelism
    direct_writes: bool  # DIRECT_WRITES
    whole_bytes: int = WHOLE_BYTES  # WHOLE
    step_bytes: int = STEP_BYTES  # STEP
    commit_threads: int = DEFAULT_COMMIT_THREADS  # COMMIT_THREADS

    @classmethod
    def of(cls, spark) -> JobSettings:
        """The session's settings, checked (``check_settings``)."""
        check_settings(spark)
        cap = kinds.setting(spark, WORKER_MEMORY)
        cap = spark_size(cap) if cap else None
        chosen = spark.conf.get(MAP_MEMORY, None)
        budget = spark_size(chosen) if chosen is not None else cap // 4 if cap else DEFAULT_MAP_MEMORY
        threads = spark.conf.get(THREADS, None)
        whole = spark.conf.get(WHOLE, None)
        step = spark.conf.get(STEP, None)
        return cls(map_memory=budget, worker_cap=cap, threads=int(threads) if threads else None,
                   cores=kinds.parallelism(spark),
                   direct_writes=spark.conf.get(DIRECT_WRITES, "true").strip().lower() == "true",
                   whole_bytes=spark_size(whole) if whole is not None else WHOLE_BYTES,
                   step_bytes=spark_size(step) if step is not None else STEP_BYTES,
                   commit_threads=int(spark.conf.get(COMMIT_THREADS, str(DEFAULT_COMMIT_THREADS))))

    @property
    def limits(self) -> Limits:
        """What the routing of partitions asks of these settings."""
        return Limits(self.whole_bytes, self.map_memory, self.worker_cap, self.task_threads(1))

    def task_threads(self, tasks: int) -> int:
        """Threads per task when ``tasks`` tasks share the cores: batch plans and whole partitions;
        under a worker cap no more than it holds (``MIN_WORKER_MEMORY``), whatever was asked."""
        wanted = self.threads or self.cores // tasks
        if self.worker_cap is not None:
            wanted = min(wanted, 1 + max(0, self.worker_cap - MIN_WORKER_MEMORY) // WHOLE_PER_THREAD)
        return 1 << (max(1, wanted).bit_length() - 1)


def check_settings(spark) -> None:
    """The session's values of this job's settings, checked as ``check_setting`` checks one (the
    command line checks its own ``--spark-conf``; spark-submit's ``--conf`` and a notebook's come
    unchecked)."""
    for key in (MAP_MEMORY, THREADS, WHOLE, STEP, DIRECT_WRITES, WORKER_MEMORY, COMMIT_THREADS):
        value = spark.conf.get(key, None)
        if value is not None:
            check_setting(key, value)


def check_setting(key: str, value: str) -> None:
    """A ValueError naming the setting unless ``value`` suits ``key`` (any key but this job's passes)."""
    if key in (MAP_MEMORY, WHOLE, STEP):
        try:
            size = spark_size(value)
        except ValueError as exc:
            raise errors.SettingError(f"{key}: {exc}") from None
        if key == STEP and size < 1:
            raise errors.SettingError(
                f"{key}={value!r}: a task of the cleaning stages holds at least 1 byte (for example 1k)")
    if key == THREADS and not (value.isdigit() and int(value) >= 1):
        raise errors.SettingError(f"{key}={value!r}: the threads of a task are a whole number of at least 1")
    if key == COMMIT_THREADS and not (value.strip().isdigit() and int(value) >= 1):
        raise errors.SettingError(f"{key}={value!r}: the threads of a commit are a whole number of at least 1")
    if key == DIRECT_WRITES and value.strip().lower() not in ("true", "false"):
        raise errors.SettingError(f"{key}={value!r}: true or false")
    if key == WORKER_MEMORY:
        try:
            cap = spark_size(value)
        except ValueError as exc:
            raise errors.SettingError(f"{key}: {exc}") from None
        if cap < MIN_WORKER_MEMORY:
            raise errors.SettingError(
                f"{key}={value}: a Python worker so capped cannot clean a partition: its imports take "
                f"{WORKER_IMPORTS >> 20} MiB, cleaning one on a thread {MIN_WORKER_MEMORY >> 20} MiB in all "
                f"(measured): give it at least {MIN_WORKER_MEMORY >> 20}m, or leave it unset"
            )
