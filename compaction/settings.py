"""The Spark settings the compaction job reads besides Spark's own, and their checks: a bad value
is refused, naming the setting, before the job writes anything (the command line checks its
``--spark-conf``; spark-submit's ``--conf`` and a notebook's are checked when the job starts)."""

from __future__ import annotations

from kcompact.compaction.routing import MAP_MEMORY, MIN_WORKER_MEMORY, THREADS, WORKER_IMPORTS
from kcompact.conf.units import spark_size

# Whether the rewrite writes its .log files past the page cache (``storage.DirectFile``), "true" by
# default; "false" writes them through it, as Kafka's cleaner does, leaving them in the cache.
DIRECT_WRITES = "spark.kcompact.write.direct"
# Spark's cap on a Python worker's address space: below MIN_WORKER_MEMORY a worker cannot clean a partition
WORKER_MEMORY = "spark.executor.pyspark.memory"


def check_settings(spark) -> None:
    """The session's values of this job's settings, checked as ``check_setting`` checks one (the
    command line checks its own ``--spark-conf``; spark-submit's ``--conf`` and a notebook's come
    unchecked)."""
    for key in (MAP_MEMORY, THREADS, DIRECT_WRITES, WORKER_MEMORY):
        value = spark.conf.get(key, None)
        if value is not None:
            check_setting(key, value)


def check_setting(key: str, value: str) -> None:
    """A ValueError naming the setting unless ``value`` suits ``key`` (any key but this job's passes)."""
    if key == MAP_MEMORY:
        try:
            spark_size(value)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    if key == THREADS and not (value.isdigit() and int(value) >= 1):
        raise ValueError(f"{key}={value!r}: the threads of a task are a whole number of at least 1")
    if key == DIRECT_WRITES and value.strip().lower() not in ("true", "false"):
        raise ValueError(f"{key}={value!r}: true or false")
    if key == WORKER_MEMORY:
        try:
            cap = spark_size(value)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
        if cap < MIN_WORKER_MEMORY:
            raise ValueError(f"{key}={value}: a Python worker so capped cannot clean a partition: its imports take "
                             f"{WORKER_IMPORTS >> 20} MiB, cleaning one on a thread {MIN_WORKER_MEMORY >> 20} MiB in all "
                             f"(measured): give it at least {MIN_WORKER_MEMORY >> 20}m, or leave it unset")
