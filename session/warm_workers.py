"""Python workers started and ready while the driver does its own first work.

A job's first task on a fresh embedded session waits for Spark to start the workers' daemon, for
the daemon to import what the tasks' functions name (``prepare``: the planner, the cleaning
pipeline, pyarrow's pandas, numba's registries loaded by a kernel's first call; once, before it
forks the workers, ``session.worker_daemon``) and for a worker's fork: over a second before the
first task can begin. Meanwhile the driver is busy on its own: recovery, listing the log dirs,
the configuration of their topics. Spark keeps a worker for the tasks that follow
(``spark.python.worker.reuse``), so a job of one task per core started on a thread of its own as
soon as the session is up pays that start while the driver works, and the command's jobs find
their workers ready. Its tasks call ``prepare`` too: a worker whose daemon could not prepare it
imports there.

Only on an embedded session (a ``local`` master): a cluster's executors come and go, and a
Spark Connect server's workers are the server's. What the job meets (a failure, a session
stopped under it) is nobody's concern: the command's own jobs meet it again and say so.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator

GROUP = "kcompact-warm-workers"  # the job's group: the console's progress leaves it out
# What the command's tasks import, the first ones first
MODULES = ("kcompact.planner.build", "kcompact.compaction.pipeline.batch_plans", "kcompact.compaction.pipeline.whole",
           "kcompact.compaction.pipeline.shared")


def start(spark) -> threading.Thread | None:
    """The job started on a daemon thread of its own (None: not an embedded session)."""
    from kcompact.session import kinds

    if kinds.is_connect(spark) or not spark.sparkContext.master.startswith("local"):
        return None
    thread = threading.Thread(target=_run, args=(spark, kinds.parallelism(spark)), name=GROUP, daemon=True)
    thread.start()
    return thread


def _run(spark, tasks: int) -> None:
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = pa.schema([("id", pa.int64())])
    with contextlib.suppress(Exception):
        spark.sparkContext.setJobGroup(GROUP, "Python workers started while the driver works")
        spark.range(0, tasks, 1, tasks).mapInArrow(_ready, from_arrow_schema(schema)).collect()


def prepare() -> None:
    """What a worker's first task would otherwise wait for: the imports, pyarrow's first
    conversion of Python values (it imports pandas), one call of a kernel (numba loads its
    registries)."""
    import numpy as np
    import pyarrow as pa

    for name in MODULES:
        importlib.import_module(name)
    from kcompact.readers import scan

    pa.array([0])
    scan.scan_records(np.zeros(0, np.uint8), 0, 0, 0)


def _ready(batches: Iterator) -> Iterator:
    """A task's work: ``prepare`` (nothing left to do in a worker its daemon prepared)."""
    prepare()
    for _ in batches:
        pass
    return iter(())
