"""Running it every night (issue 13, items 4 and 7): what the console says, and when.

In this process (the session's Spark): --version, --quiet, each step's summary printed once and
as the step ends, a dry run saying what it would clean, no "committing" when every partition
failed, the progress line of a long stage. In a process of its own (its own JVM, as an operator
runs it): Spark's start-up noise kept off the console, embedded Spark sized by flags (read back
from the running SparkContext), and Ctrl-C in the middle of a job ending in "interrupted", exit
130, with the data as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kcompact.jobs.cli import main
from kcompact.jobs.progress import Ticker
from kcompact.readers import codecs
from tests.e2e.test_legacy_rebuild import NOW as LEGACY_NOW
from tests.e2e.test_legacy_rebuild import TOPIC_ARGS as LEGACY_ARGS
from tests.e2e.test_legacy_rebuild import X, recs, wrapped, write_part
from tests.support import kp_keyed, write_partition

NOW = 1_720_300_000_000
TS = NOW - 3_600_000
HOUR = 3_600_000
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]
ROOT = Path(__file__).resolve().parents[2]


def dirty(part: Path, ts: int = TS) -> Path:
    """0..2 a a b | active 3 c."""
    return write_partition(part, [(0, [kp_keyed(0, [b"a", b"a", b"b"], ts)]), (3, [kp_keyed(3, [b"c"], ts)])])


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"kcompact {version('kcompact')}\n"


def test_quiet_keeps_the_summary_only(spark, tmp_path, capsys):
    dirty(tmp_path / "orders-0")
    assert main(["compact", str(tmp_path), "--now", str(NOW), "--quiet", *COMPACT]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not [line for line in out if line.startswith(("stage", "  committed", "compaction:"))], out
    assert not [line for line in out if "orders-0" in line], out  # no partition's stats message (issue 43)
    assert out[-1].startswith("1 partition: 1 cleaned, 0 failed, 0 skipped;")


def test_quiet_plan_keeps_the_totals_only(spark, tmp_path, capsys):
    dirty(tmp_path / "orders-0")
    assert main(["plan", str(tmp_path), "--now", str(NOW), "--quiet", *COMPACT]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not [line for line in out if "orders-0" in line or line.startswith(("rank", "partition"))], out
    assert out[0].startswith("1 partition, 1 selected, 0.0 MB to clean;"), out
    assert "0 partitions with 0 segments (0.0 MB) to delete, 0 skipped" in out


def test_quiet_run_keeps_every_steps_summary(spark, tmp_path, capsys):
    """--quiet drops progress lines, not what recovery and retention did (their summaries)."""
    dirty(tmp_path / "orders-0")
    assert main(["run", str(tmp_path), "--now", str(NOW), "--quiet", *COMPACT]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not [line for line in out if line.startswith(("stage", "  committed", "compaction:"))], out
    assert [line for line in out if line.startswith("retention: 0 partitions (0 skipped, 0 failed)")], out
    assert "recovery: 1 partition checked, 0 recovered, 0 skipped, 0 with problems" in out
    assert out[-1].startswith("1 partition: 1 cleaned, 0 failed, 0 skipped;")


def test_dry_run_says_what_it_would_clean(spark, tmp_path, capsys):
    dirty(tmp_path / "orders-0")
    dirty(tmp_path / "orders-1")
    assert main(["compact", str(tmp_path), "--now", str(NOW), "--dry-run", *COMPACT]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "stage 1/5: batch plans of 2 partitions" in out
    assert out[-1].startswith("2 partitions: would clean 2, 0 failed, 0 skipped;")


def test_no_commit_stage_when_every_partition_failed(spark, tmp_path, capsys):
    # the round's last batch is a legacy wrapper that loses every record: Kafka's cleaner fails the
    # partition while rewriting (empty batches exist only from magic 2 on), so nothing is left to commit
    write_part(tmp_path / "lg-end-0", {0: [recs(0, [b"a"]), wrapped(1, codecs.GZIP, [(1, None, X), (2, None, X)])],
                                       3: [recs(3, [b"z"])]})
    args = ["compact", str(tmp_path), "--now", str(LEGACY_NOW), "--allow-unknown-topics"]  # LEGACY_ARGS: every case's
    for arg in LEGACY_ARGS:
        args += ["--topic-config", arg]
    assert main(args) == 5
    out = capsys.readouterr().out.splitlines()
    assert (
        "stage 1/5: batch plans of 1 partition" in out
        and "stages 2-4 offset map, keep flags, rewrite (1 segment group)" in out
    )
    assert "stage 5/5: nothing to commit: every partition failed" in out
    assert not [line for line in out if "committing" in line]


@pytest.fixture(scope="module")
def retention_dir(tmp_path_factory) -> Path:
    """clicks-0 (delete, retention.ms 1 h): segments 0 and 10 are 3 h old, 20 is active; orders-0 compacted."""
    root = tmp_path_factory.mktemp("nightly")
    write_partition(root / "clicks-0", [(0, [kp_keyed(0, [b"k"] * 10, NOW - 3 * HOUR)]),
                                        (10, [kp_keyed(10, [b"k"] * 10, NOW - 3 * HOUR)]),
                                        (20, [kp_keyed(20, [b"k"] * 5, NOW - 60_000)])])
    dirty(root / "orders-0")
    return root


NIGHTLY = ["--now", str(NOW), "--topic-config", "clicks:retention.ms=3600000", "--topic-config",
           "orders:cleanup.policy=compact"]


def test_retain_says_each_deletion_once(spark, retention_dir, tmp_path, capsys):
    import shutil

    copy = tmp_path / "logs"
    shutil.copytree(retention_dir, copy)
    assert main(["retain", str(copy), *NIGHTLY]) == 0
    out = capsys.readouterr().out.splitlines()
    said = [line for line in out if "clicks-0" in line]
    assert len(said) == 1 and said[0].strip().startswith("deleted 2 segments") and "log start 0 -> 20" in said[0]


def test_run_says_each_step_as_it_ends(spark, retention_dir, tmp_path, capsys):
    import shutil

    copy = tmp_path / "logs"
    shutil.copytree(retention_dir, copy)
    assert main(["run", str(copy), *NIGHTLY]) == 0
    out = capsys.readouterr().out.splitlines()

    def at(prefix: str) -> list[int]:
        return [i for i, line in enumerate(out) if line.strip().startswith(prefix)]

    # recovery, then retention, then compaction, each summary once, in that order
    assert len(at("recovery: ")) == 1 and len(at("retention: 1 partition")) == 1
    assert len([line for line in out if "clicks-0" in line]) == 1 and len(at("deleted 2 segments (")) == 1
    assert at("recovery: ")[0] < at("retention: 1 partition")[0] < at("stage 1/5")[0] < at("Log cleaner thread 0")[0]
    assert out[-1].startswith("1 partition: 1 cleaned")


# -- the progress line of a long stage --------------------------------------------------------------
class FakeTracker:
    """What Spark's status tracker answers, scripted: job ids, their stages, the stages' tasks."""

    def __init__(self):
        self.jobs: dict[int, list[int]] = {}
        self.stages: dict[int, tuple[int, int]] = {}  # stage -> (tasks, completed)

    def getActiveJobsIds(self):
        return list(self.jobs)

    def getJobInfo(self, job):
        return SimpleNamespace(jobId=job, stageIds=self.jobs[job], status="RUNNING") if job in self.jobs else None

    def getStageInfo(self, stage):
        if stage not in self.stages:
            return None
        tasks, done = self.stages[stage]
        return SimpleNamespace(stageId=stage, numTasks=tasks, numCompletedTasks=done, numActiveTasks=tasks - done)


def test_ticker_says_tasks_bytes_and_eta():
    tracker, clock = FakeTracker(), [100.0]
    ticker = Ticker(tracker, print, "cleaning", total_bytes=80 << 20, clock=lambda: clock[0])
    clock[0] = 110.0
    assert ticker.line() is None  # no Spark job running: nothing to say
    tracker.jobs[7] = [1, 2]
    tracker.stages.update({1: (4, 4), 2: (4, 0)})
    clock[0] = 120.0  # the job began after the look at 110
    assert ticker.line() == "  cleaning: 4/8 tasks done, about 40.0 of 80.0 MB, 10 s, ETA 10 s"
    tracker.stages[2] = (4, 2)
    clock[0] = 140.0
    assert ticker.line() == "  cleaning: 6/8 tasks done, about 60.0 of 80.0 MB, 30 s, ETA 10 s"


def test_ticker_leaves_out_the_warm_up_job():
    """The job that starts the Python workers (``session.warm_workers``) is not the stage's work."""
    from kcompact.session import warm_workers

    tracker = FakeTracker()
    tracker.getJobIdsForGroup = lambda group: [3] if group == warm_workers.GROUP else []
    ticker = Ticker(tracker, print, "planning", clock=lambda: 100.0)
    tracker.jobs.update({3: [5], 4: [6]})
    tracker.stages.update({5: (2, 0), 6: (10, 5)})
    assert ticker.line() == "  planning: 5/10 tasks done, 0 s, ETA 0 s"
    del tracker.jobs[4]
    assert ticker.line() is None


def test_ticker_prints_while_a_job_runs():
    tracker, said = FakeTracker(), []
    tracker.jobs[1] = [1]
    tracker.stages[1] = (10, 5)
    with Ticker(tracker, said.append, "planning", every=0.05):
        time.sleep(0.3)
    assert said and all(line.startswith("  planning: 5/10 tasks done, ") for line in said)


def ticks_of_cleaning(said: list[str]) -> list[tuple[int, int, float]]:
    """(tasks done, tasks, MB done) of each ticker line said between the cleaning stage's start and
    its commit, when it gave an ETA (a share of the work done, some left)."""
    start = next(i for i, line in enumerate(said) if line.startswith("stages 2-4"))
    end = next(i for i, line in enumerate(said) if line.startswith("stage 5/5"))
    found = []
    for line in said[start:end]:
        m = re.fullmatch(r"  cleaning: (\d+)/(\d+) tasks done, about ([\d.]+) of [\d.]+ MB, \d+ s, ETA \d+ s", line)
        if m:
            found.append((int(m[1]), int(m[2]), float(m[3])))
    return found


def test_progress_moves_while_the_cleaning_stage_runs(spark, tmp_path):
    """A generated log dir cleaned on 2 cores: its cleaning stage is cut into more tasks than
    cores, so the ticker's share of bytes done moves several times, with an ETA, before the
    stage ends (one task per core moved it once at most: 0/2 until the end)."""
    import kcompact
    from kcompact.compaction.pipeline.settings import STEP
    from kcompact.compaction.pipeline.tasks import sql_conf
    from kcompact.tools import generator

    logs = str(tmp_path / "logs")
    generator.generate(logs, generator.override(generator.load_spec(None), partitions=8), seed=5)
    said: list[str] = []

    class Ticking(kcompact.Observer):
        def watch(self, what, total_bytes=None):
            return Ticker(spark.sparkContext.statusTracker(), said.append, what, total_bytes, every=0.05)

    with sql_conf(spark, {STEP: "1k"}):  # a few KB of log: cut as megabytes of it would be
        kcompact.compact(spark, [logs], now=NOW, topic_config={"*": {"cleanup.policy": "compact"}},
                         progress=said.append, observer=Ticking())
    ticks = ticks_of_cleaning(said)
    assert len({done for done, _, _ in ticks}) >= 3, said
    assert all(mb > 0 and 0 < done < total for done, total, mb in ticks), ticks


# -- an operator's shell: a process of its own ----------------------------------------------------
def kcompact(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kcompact.jobs.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, **kw)


def test_console_is_quiet_and_spark_is_sized_by_flags(tmp_path):
    dirty(tmp_path / "logs" / "orders-0")
    log = tmp_path / "spark.log"
    report = tmp_path / "r.json"
    proc = kcompact("compact", str(tmp_path / "logs"), "--now", str(NOW), "--dry-run", "--report", str(report),
                    "--cores", "1", "--driver-memory", "700m", "--spark-conf", "spark.sql.shuffle.partitions=3",
                    *COMPACT, env={"KCOMPACT_SPARK_LOG": str(log)})
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert err == "", err  # no "Using incubator modules", no "SparkUI could not bind", no WARN lines
    assert "WARNING: Using incubator modules" in log.read_text()  # the JVM's own output went to its log
    run = json.loads(report.read_text())["run"]
    assert run["spark_master"] == "local[1]"
    assert run["spark_conf"] == {"spark.driver.memory": "700m", "spark.ui.enabled": "false",
                                 "spark.sql.shuffle.partitions": "3"}


SLOW_WORKER = '''
import os, time
from kcompact import storage
_create = storage.create_file


def slow(path, *args, **kwargs):
    """The first .cleaned file a worker writes: say so, then take a long time (a large segment)."""
    if os.environ.get("KCOMPACT_TEST_SLOW"):
        open(os.environ["KCOMPACT_TEST_SLOW"], "a").close()
        time.sleep(120)
    return _create(path, *args, **kwargs)


storage.create_file = slow
'''


def test_ctrl_c_says_interrupted_and_leaves_the_data_as_it_was(tmp_path):
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    before = files(log_dir)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_WORKER)
    marker = tmp_path / "writing"
    proc = kcompact("compact", str(log_dir), "--now", str(NOW), *COMPACT, start_new_session=True,
                    env={"PYTHONPATH": str(hook), "KCOMPACT_TEST_SLOW": str(marker)})
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole foreground group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kcompact: interrupted"), err
    assert "Py4J" not in err and "Traceback" not in err and "at org.apache" not in err
    # the old segments untouched, no lease left; an unfinished .cleaned file is what recovery removes
    assert {k: v for k, v in files(log_dir).items() if ".cleaned" not in k} == before
    assert main(["recover", str(log_dir)]) == 0
    assert files(log_dir) == before


# -- the end of a command: Spark stopped once it is needed no more ------------------------------------
def test_a_command_run_in_process_leaves_the_session_running(spark, tmp_path):
    """A test or a notebook calls ``main`` and goes on: its session must survive the command."""
    dirty(tmp_path / "logs" / "orders-0")
    report = tmp_path / "r.json"
    assert main(["compact", str(tmp_path / "logs"), "--now", str(NOW), "--report", str(report), *COMPACT]) == 0
    assert report.exists() and spark.range(3).count() == 3


LET_GO = '''
import faulthandler, json, os, signal, time
faulthandler.dump_traceback_later(240, exit=True)  # a hang: each thread's stack on stderr, before the timeout
import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql.pandas.types import from_arrow_schema
from kcompact.jobs import spark as js


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:  # a thread or a process that ended meanwhile
        return "" if mode == "r" else b""


def daemons(pid):
    """PySpark's worker daemons among the JVM's children (it may run other commands too): the
    session's daemon module, given the worker module as its argument."""
    children = [c for t in os.listdir(f"/proc/{pid}/task") for c in read(f"/proc/{pid}/task/{t}/children").split()]
    started = [b"-m", js.WORKER_DAEMON.encode(), b"pyspark.worker"]
    return [int(c) for c in children if read(f"/proc/{c}/cmdline", "rb").split(b"\\0")[1:4] == started]


session = js.session("let-go test")
schema = from_arrow_schema(pa.schema([("id", pa.int64())]))
session.range(0, 2, 1, 2).mapInArrow(lambda batches: batches, schema).collect()
jvm = SparkContext._gateway.proc
workers = daemons(jvm.pid)  # which forked the workers
js.let_go()
js.let_go()  # once is enough
deadline = time.monotonic() + 30
while daemons(jvm.pid) and time.monotonic() < deadline:
    time.sleep(0.1)
try:
    signal.raise_signal(signal.SIGINT)  # Ctrl-C now: no Spark job to cancel, nothing to say
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
print(json.dumps({"jvm": jvm.pid, "jvm_alive": jvm.poll() is None, "workers_before": workers,
                  "workers_after": daemons(jvm.pid), "interrupted": interrupted}))
'''


def test_let_go_stops_spark_and_the_jvm_ends_with_the_process(tmp_path):
    """``jobs.spark.let_go`` (what a command does once Spark is needed no more) stops Spark in the
    JVM at once, its Python workers included; the JVM itself lives until the process ends (its
    loss would make Spark's accumulator server print a traceback), then exits; a Ctrl-C after it
    is a plain KeyboardInterrupt. Nothing reaches stderr."""
    proc = subprocess.run([sys.executable, "-c", LET_GO], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KCOMPACT_SPARK_LOG": str(tmp_path / "spark.log")})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["workers_before"] and seen["workers_after"] == [], seen
    assert seen["jvm_alive"] and seen["interrupted"], seen
    deadline = time.monotonic() + 60
    while _running(seen["jvm"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(seen["jvm"]), "the JVM outlived its process by a minute"


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
