"""Capped workers: which partitions are read whole, and what a run that runs out of memory says.

``spark.executor.pyspark.memory`` caps a Python worker's address space. A partition read whole
holds its map, two segment groups' output and its ranges in flight; a worker that cannot hold
them fails with MemoryError (or an mmap refused with ENOMEM). The figures below are the measured
peaks the job's rule was drawn from (compaction.pipeline.routing, at WORKER_IMPORTS): the rule must send the
cases that failed down the shared path and keep the ones that fitted whole, and a failure of
memory must say so, without calling the log uncleanable or the failure transient.
"""

from __future__ import annotations

import pytest
from pyspark.errors import PythonException

from kcompact import errors
from kcompact.compaction.cleaning.results import IO_ERROR, OUT_OF_MEMORY, failure_of, reason
from kcompact.compaction.pipeline import job, routing
from kcompact.compaction.pipeline.job_result import JobResult
from kcompact.compaction.reports.report import Report
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors import FormatError
from kcompact.jobs import cli

MiB, GiB = 1 << 20, 1 << 30
# the bench's corpora (tests/bench/compact.py): bytes, the records that feed the map, largest group
SINGLE = (938_000_000, 2_791_457, 64 * MiB)
KEYS = (1_079_000_000, 11_940_963, 256 * MiB)


def whole(corpus: tuple[int, int, int], cap: int | None, threads: int = 2, budget: int | None = None) -> bool:
    size, keys, group = corpus
    budget = budget if budget is not None else (cap // 4 if cap else routing.DEFAULT_MAP_MEMORY)
    return routing.reads_whole(size, keys, group, budget, cap, threads)


@pytest.mark.parametrize(("corpus", "cap", "threads", "expected", "why"), [
    (SINGLE, None, 2, True, "uncapped: its map fits the default budget"),
    (KEYS, None, 2, True, "uncapped: 12 M keys fit the default budget (measured: 2682 MiB)"),
    (SINGLE, 1 * GiB, 2, False, "failed whole under 1 GiB on two threads (measured need: 1324 MiB)"),
    (SINGLE, 1 * GiB, 1, False, "failed whole under 1 GiB on one thread (measured need: 1183 MiB)"),
    (SINGLE, 2 * GiB, 2, True, "fits whole under 2 GiB (measured need: 1324 MiB)"),
    (SINGLE, 1500 * MiB, 2, False, "fitted whole (peak 1312 MiB), but the rule keeps a margin"),
    (KEYS, 4 * GiB, 2, False, "its map exceeds a quarter of the cap"),
    (KEYS, 6 * GiB, 2, True, "fits whole (measured need: 2682 MiB)"),
    ((200 * MiB, 2_000_000, 200 * MiB), 1 * GiB, 2, True, "small partitions are always read whole"),
])
def test_a_capped_worker_reads_whole_only_what_it_can_hold(corpus, cap, threads, expected, why):
    assert whole(corpus, cap, threads) == expected, why


def test_what_reading_whole_holds_grows_with_keys_threads_and_groups():
    base = routing.whole_bytes(1_000_000, 64 * MiB, 1)
    assert routing.whole_bytes(2_000_000, 64 * MiB, 1) > base
    assert routing.whole_bytes(1_000_000, 64 * MiB, 2) > base
    assert routing.whole_bytes(1_000_000, 128 * MiB, 1) > base
    # a group's output past OUTPUT_MEMORY goes to a temporary file, not memory
    assert routing.whole_bytes(1_000_000, 1 * GiB, 1) == routing.whole_bytes(1_000_000, 128 * MiB, 1)


@pytest.mark.parametrize(("exc", "error", "uncleanable"), [
    (MemoryError("Unable to allocate 10.9 MiB"), f"{OUT_OF_MEMORY}Unable to allocate 10.9 MiB", False),
    (OSError(5, "Input/output error"), f"{IO_ERROR}[Errno 5] Input/output error", False),
    (FormatError("/logs/t-0/00000000000000000000.log", 4096, "CRC mismatch"),
     "/logs/t-0/00000000000000000000.log: byte 4096: CRC mismatch", True),
])
def test_only_a_fault_of_the_log_marks_it_uncleanable(exc, error, uncleanable):
    result = JobResult(Report(now=0, dry_run=False))
    row = PlanRow(path="/logs/t-0", log_dir="/logs", topic="t", partition=0, first_dirty_offset=0)
    result.fail(row, reason(exc), failure_of(exc))
    assert ("/logs/t-0" in result.uncleanable) == uncleanable
    assert result.report.partitions[0].error == error


def test_a_spark_task_out_of_memory_is_a_configuration_error(tmp_path, monkeypatch, capsys):
    """A task's MemoryError reaches the command as Spark's exception, its text the worker's
    traceback: the step raises it as OutOfMemory, and the operator is told what ran out and which
    settings give more, not 'internal error'."""
    def run(*args, **kwargs):
        raise PythonException("An exception was thrown from the Python worker:\n  File \"map_pass.py\"\n"
                              "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 10.9 MiB")

    monkeypatch.setattr(job, "run", run)
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(b"")
    code = cli.main(["compact", str(tmp_path), "--now", "1720000000000", "--topic-config", "t:cleanup.policy=compact"])
    err = capsys.readouterr().err
    assert code == errors.EXIT_USAGE
    assert "ran out of memory" in err and "spark.executor.pyspark.memory" in err and "internal error" not in err


# A kcompact command whose JVM is made to run out of heap once stage 1 is done: a JVM array
# larger than its heap, asked for through py4j (as Spark's scheduler ran out at 100,000 partitions)
_OUT_OF_HEAP = """
import sys
from kcompact.compaction.pipeline import job
from kcompact.jobs import cli

real = job._group_jobs

def group_jobs(*args, **kwargs):
    from pyspark import SparkContext
    jvm = SparkContext._jvm
    jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Long.TYPE, 1 << 30)
    return real(*args, **kwargs)

job._group_jobs = group_jobs
sys.argv = ["kcompact", *sys.argv[1:]]
sys.exit(cli.command())
"""


def test_a_jvm_out_of_heap_ends_the_command_with_its_reason(tmp_path):
    """Out of heap, Spark's scheduler threads die and a job would wait for ever: the embedded JVM
    exits instead, and the command says why in one line, with the usage exit status, its segments
    as they were."""
    import hashlib
    import os
    import subprocess
    import sys

    from tests.e2e.test_operator_inputs import dirty

    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (log_dir / "orders-0").iterdir()}
    script = tmp_path / "out_of_heap.py"
    script.write_text(_OUT_OF_HEAP)
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "KCOMPACT_SPARK_LOG": str(tmp_path / "spark.log")}
    done = subprocess.run([sys.executable, str(script), "compact", str(log_dir), "--now", "1720300000000",
                           "--topic-config", "*:cleanup.policy=compact"], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == errors.EXIT_USAGE, done.stderr
    line = [ln for ln in done.stderr.splitlines() if ln.startswith("kcompact:")]
    assert len(line) == 1 and "Spark's JVM ran out of heap and ended" in line[0], done.stderr
    assert "Traceback" not in done.stderr
    assert "java.lang.OutOfMemoryError" in done.stdout + (tmp_path / "spark.log").read_text()
    left = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (log_dir / "orders-0").iterdir()
            if not p.name.endswith(".cleaned")}
    assert left == before


_JVM_KILLED = """
import logging, os, sys
import py4j
from kcompact.jobs import spark

session = spark.session("test")
from pyspark import SparkContext
proc = SparkContext._gateway.proc
proc.kill()
proc.wait()
where = os.path.join(os.path.dirname(py4j.__file__), "java_gateway.py")
for path, message in ((where, "py4j: Exception while sending command."), (__file__, "not py4j's")):
    logging.getLogger().handle(logging.LogRecord("root", logging.ERROR, path, 1, message, None, None))
"""


def test_py4j_s_own_error_records_are_not_printed_once_the_jvm_has_ended(tmp_path):
    """py4j logs a call the JVM's end broke, traceback and all, on the root logger; the command's own
    line says why instead. Every other record of the root logger is printed as before."""
    import os
    import subprocess
    import sys

    script = tmp_path / "killed.py"
    script.write_text(_JVM_KILLED)
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "KCOMPACT_SPARK_LOG": str(tmp_path / "spark.log")}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "not py4j's" in done.stderr and "Exception while sending command" not in done.stderr, done.stderr
