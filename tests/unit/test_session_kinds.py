"""``session.kinds``: what differs between a classic session and a Spark Connect client's, on
stand-ins of each kind (the real ones: tests/e2e/test_connect.py)."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

from kcompact.operations import critical
from kcompact.session import kinds


class Conf:
    def __init__(self, values: dict):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class Session:
    """What both kinds share: conf, tags, ranges (counting the jobs run)."""

    def __init__(self, conf: dict | None = None, partitions: int = 3):
        self.conf, self.partitions = Conf(conf or {}), partitions
        self.tags: list[str] = []
        self.interrupted: list[str] = []
        self.jobs = 0
        self.session_id = str(id(self))

    def addTag(self, tag):  # Spark's names
        self.tags.append(tag)

    def removeTag(self, tag):
        self.tags.remove(tag)

    def interruptTag(self, tag):
        self.interrupted.append(tag)

    def range(self, start, end):
        session = self

        class Frame:
            def selectExpr(self, expr):
                return self

            def first(self):
                session.jobs += 1
                return {"n": session.partitions}

        return Frame()


# The module path is the only thing that tells the kinds apart.
ConnectSession = type("SparkSession", (Session,), {"__module__": "pyspark.sql.connect.session"})
ClassicSession = type("SparkSession", (Session,), {"__module__": "pyspark.sql.session"})


def test_the_kind_is_told_by_the_session_class():
    assert kinds.is_connect(ConnectSession()) and not kinds.is_connect(ClassicSession())


def test_classic_parallelism_is_the_contexts():
    spark = ClassicSession()
    spark.sparkContext = SimpleNamespace(defaultParallelism=7)
    assert kinds.parallelism(spark) == 7 and spark.jobs == 0


def test_connect_parallelism_is_the_setting_when_set():
    spark = ConnectSession({"spark.default.parallelism": "12"})
    assert kinds.parallelism(spark) == 12 and spark.jobs == 0


def test_connect_parallelism_is_counted_once_per_session():
    spark = ConnectSession(partitions=5)
    assert [kinds.parallelism(spark), kinds.parallelism(spark)] == [5, 5] and spark.jobs == 1
    other = ConnectSession(partitions=2)
    assert kinds.parallelism(other) == 2 and other.jobs == 1


def test_job_names_are_a_classic_job_group_and_nothing_over_connect():
    groups = []
    classic = ClassicSession()
    classic.sparkContext = SimpleNamespace(setJobGroup=lambda *a: groups.append(a))
    kinds.name_jobs(classic, "kcompact-clean", "cleaning")
    kinds.name_jobs(ConnectSession(), "kcompact-clean", "cleaning")  # no SparkContext: no error
    assert groups == [("kcompact-clean", "cleaning")]


@pytest.mark.parametrize("kind", [ClassicSession, ConnectSession])
def test_a_step_ended_by_an_interrupt_interrupts_its_tag(kind):
    spark = kind()
    with pytest.raises(KeyboardInterrupt), kinds.cancellable(spark, "compact") as tag:
        assert spark.tags == [tag] and tag.startswith("kcompact-compact-")
        raise KeyboardInterrupt
    assert spark.interrupted == [tag] and spark.tags == []
    with kinds.cancellable(spark, "plan"):
        pass
    assert spark.interrupted == [tag] and spark.tags == []


def test_connect_progress_reports_read_as_a_status_tracker():
    handlers = []
    spark = ConnectSession()
    spark.registerProgressHandler = handlers.append
    spark.removeProgressHandler = handlers.remove
    stage = SimpleNamespace
    with kinds.status(spark) as tracker:
        assert handlers == [tracker] and tracker.getActiveJobsIds() == []
        tracker(stages=[stage(num_tasks=4, num_completed_tasks=1), stage(num_tasks=2, num_completed_tasks=0)],
                inflight_tasks=3, operation_id="op-a", done=False)
        tracker(stages=[stage(num_tasks=8, num_completed_tasks=8)], inflight_tasks=0, operation_id="op-b", done=False)
        assert tracker.getActiveJobsIds() == [0, 1]
        job = tracker.getJobInfo(0)
        counts = [(s.numCompletedTasks, s.numTasks) for s in map(tracker.getStageInfo, job.stageIds)]
        assert job.jobId == 0 and counts == [(1, 4), (0, 2)]
        tracker(stages=[], inflight_tasks=0, operation_id="op-b", done=True)
        assert tracker.getActiveJobsIds() == [0] and tracker.getJobInfo(1) is None
    assert handlers == []


@pytest.fixture
def default_sigterm():
    """SIGTERM's default disposition, as a process starts with it (a command line's main, run in
    this process by an earlier test, leaves its own handler)."""
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_stops_a_step_as_ctrl_c_and_waits_for_a_commit(default_sigterm):
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    with pytest.raises(KeyboardInterrupt), critical.stops_as_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    done = []
    with pytest.raises(KeyboardInterrupt), critical.stops_as_interrupts(), critical.section():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
        done.append("commit")
    assert done == ["commit"]


def test_an_applications_own_sigterm_handler_is_kept():
    mine = signal.signal(signal.SIGTERM, lambda *a: None)
    try:
        own = signal.getsignal(signal.SIGTERM)
        with critical.stops_as_interrupts():
            assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, mine)
