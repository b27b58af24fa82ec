"""Python workers started while the driver works (``session.warm_workers``): the job runs and
succeeds in its own group, its task imports what the command's tasks import, and a session
that is not embedded gets no job."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

from kcompact.session import warm_workers


def test_the_warm_up_job_succeeds_in_its_own_group(spark):
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(warm_workers.GROUP))
    thread = warm_workers.start(spark)
    assert thread is not None
    thread.join(120)
    assert not thread.is_alive()
    ran = set(tracker.getJobIdsForGroup(warm_workers.GROUP)) - before
    assert len(ran) == 1, ran
    info = tracker.getJobInfo(ran.pop())
    assert info.status == "SUCCEEDED"  # a failure would go unsaid: the command's own jobs say theirs
    assert sum(tracker.getStageInfo(s).numTasks for s in info.stageIds) == spark.sparkContext.defaultParallelism


def test_the_task_imports_what_the_commands_tasks_import():
    """In a fresh interpreter, as a new worker: the modules, and numba's registries loaded by a
    kernel's first call (what the command's first task would otherwise wait for)."""
    code = textwrap.dedent("""
        import sys
        from numba.core.registry import cpu_target
        registries = cpu_target.target_context._registries
        before = [len(registries), "pandas" in sys.modules]
        from kcompact.session import warm_workers
        assert list(warm_workers._ready(iter([]))) == []
        missing = [m for m in warm_workers.MODULES if m not in sys.modules]
        print(before, missing, len(registries) > 0, "pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[0, False] [] True True"


def test_no_job_on_a_cluster_or_a_connect_session():
    cluster = SimpleNamespace(sparkContext=SimpleNamespace(master="yarn"))
    assert warm_workers.start(cluster) is None
    connect = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    assert warm_workers.start(connect) is None
