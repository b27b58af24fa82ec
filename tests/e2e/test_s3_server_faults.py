"""Faults only a real S3 server gives, on SeaweedFS (tests/seaweedfs.py): the server SIGKILLed at
each step of a commit and started again, stopped for a whole run, restarted between a plan and
its compaction. Nothing is lost and nothing is mixed: a reader sees a partition old or new, never
a mix, and the next ``kcompact run`` ends where the uninjected commit does.

The kill comes from the counting proxy in front of the server, just before it forwards the
request that begins the chosen step (the step's request never reaches the server; what the server
acknowledged before must survive its restart). A step is one of the commit's mutating requests,
or one batch of copies sent at once (operations/s3commit.py sends a partition's copies together).
The commit is driven in this process on pre-staged objects (as tests/e2e/test_s3_commit.py's
sweep), so each kill point costs a restart, not a JVM; its client gives up at the first dropped
connection (the default's retries would only wait longer for a server that is not there).

Truth comes from outside the code under test: the same compaction on local disk (Kafka's swap
protocol), records read back with kafka-python.
"""

from __future__ import annotations

import shutil
import time

import pytest

from kcompact import errors
from kcompact.jobs import cli
from kcompact.logdir import commits
from kcompact.logdir import names as log_dir_names
from kcompact.operations import s3commit
from kcompact.readers.checkpoint import parse as parse_checkpoint
from kcompact.storage import probe
from tests.e2e.test_s3_commit import (
    BUCKET,
    MERGING,
    NOW,
    TARGET,
    checkpoint_entries,
    commit_fixture,
    compacted_copy,
    local_records,
    object_names,
    records,
    seen_records,
    staged_left,
    url,
)
from tests.seaweedfs import ACCESS_KEY, SECRET_KEY
from tests.stores import Store

MUTATIONS = ("PUT", "COPY", "DELETE", "DELETE_BATCH", "MULTIPART")


class Steps:
    """The proxy's hook: counts the steps of the commit under way (``armed``), and kills the server
    just before the request that begins step ``kill_at``."""

    def __init__(self, server):
        self.server, self.kill_at, self.steps, self.last, self.armed = server, 0, 0, "", False
        self.killed_at: str | None = None

    def arm(self, kill_at: int = 0) -> None:
        self.kill_at, self.steps, self.last, self.armed, self.killed_at = kill_at, 0, "", True, None

    def __call__(self, op: str, key: str) -> None:
        if not self.armed or op not in MUTATIONS:
            return
        if not (op == "COPY" and self.last == "COPY"):  # copies sent at once: one step
            self.steps += 1
            if self.steps == self.kill_at:
                self.killed_at = f"{op} {key}"
                self.server.kill()
        self.last = op


@pytest.fixture(scope="module")
def seaweed(seaweedfs, spark):
    """The session's SeaweedFS as every ``s3://`` path of this module's commands (and Spark's
    workers) reaches it, a bucket of test_s3_commit.py's name on it, the proxy's hook set."""
    store = Store("seaweedfs", seaweedfs.proxy, seaweedfs.proxy.endpoint, ACCESS_KEY, SECRET_KEY)
    fs = store.fs()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    steps = Steps(seaweedfs)
    seaweedfs.proxy.before = steps
    with store.installed(spark):
        yield store, fs, steps
    seaweedfs.proxy.before = None
    if seaweedfs.proc is None:
        seaweedfs.start()


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "logs"
    assert cli.main(["gen", "--out", str(out), "--seed", "7", "-q"]) == 0
    return out


@pytest.fixture(scope="module")
def merged_truth(spark, gen, tmp_path_factory):
    return compacted_copy(spark, gen, tmp_path_factory.mktemp("merged") / "logs", *MERGING)


def commit(args: dict) -> None:
    """orders-0's commit of the staged files ``args`` names, in this process."""
    record = s3commit.plan_record("orders", 0, 1, args["owner"], args["staged"], args["replaced"], args["checkpoint"])
    s3commit.commit_partition(args["log_dir"], args["partition_dir"], record)


@pytest.mark.slow  # more than 20 s (make test-fast leaves it out)
def test_the_server_killed_at_each_step_of_a_commit_loses_nothing(seaweed, seaweedfs, gen, merged_truth,
                                                                  monkeypatch):
    """orders-0's commit (three segments cleaned into one group), the server SIGKILLed before each
    of its steps in turn and started again: readers see the old or the new partition, whole; one
    ``kcompact run`` over every killed copy brings each to the uninjected result."""
    store, fs, steps = seaweed
    old_records, new_records, end, prepare = commit_fixture(fs, gen, merged_truth)
    args = prepare("uninjected")
    steps.arm()
    commit(args)
    steps.armed = False
    # the record, the copies (at once), copied, the replaced files' batched delete, the checkpoint,
    # the staged files' delete, applied
    total = steps.steps
    assert total == 7, total
    assert seen_records(url(f"sweep/uninjected/{TARGET}")) == new_records
    uninjected = {n: fs.cat(f"{BUCKET}/sweep/uninjected/{TARGET}/{n}")
                  for n in object_names(fs, f"sweep/uninjected/{TARGET}")}
    points = [f"kill{n:02d}" for n in range(1, total + 1)]
    # the committer gives up at the first dropped connection: the default's 5 x 5 attempts
    # (botocore's, s3fs's) would only wait longer for a server that is not there
    failing_fast = Store("seaweedfs", store.counter, store.endpoint, ACCESS_KEY, SECRET_KEY,
                         config_kwargs={"retries": {"max_attempts": 1}})
    committed, restart_s = {}, []
    for n, point in enumerate(points, 1):
        args = prepare(point)
        steps.arm(n)
        try:
            with monkeypatch.context() as m, failing_fast.installed(), pytest.raises(errors.StorageError):
                m.setattr("s3fs.S3FileSystem.retries", 1)  # s3fs's own 5 tries: a class attribute
                commit(args)  # the store went away under it
            assert steps.killed_at is not None and seaweedfs.proc is None, point
        finally:
            steps.armed = False
            began = time.monotonic()
            if seaweedfs.proc is None:
                seaweedfs.start()
            restart_s.append(time.monotonic() - began)
        committed[point] = fs.exists(f"{BUCKET}/sweep/{point}/{commits.record_name('orders', 0, 1)}")
        assert committed[point] == (n > 1), (point, steps.killed_at)  # the record's PUT is the commit point
        assert log_dir_names.unknown(object_names(fs, f"sweep/{point}")) == [], point
        seen = seen_records(url(f"sweep/{point}/{TARGET}"))  # after the restart, before any recovery
        assert seen == (new_records if committed[point] else old_records), (point, steps.killed_at)
    print(f"restarts: {', '.join(f'{s:.1f}' for s in restart_s)} s")
    probe._answers.clear()
    assert cli.main(["run", *(url(f"sweep/{p}") for p in ["uninjected", *points]), "--allow-duplicate-partitions",
                     "--now", NOW, *MERGING]) == 0
    for point in points:
        assert staged_left(fs, f"sweep/{point}") == [], point
        assert not [f for f in object_names(fs, f"sweep/{point}") if f.startswith("kcompact-state.")], point
        assert seen_records(url(f"sweep/{point}/{TARGET}")) == new_records, point  # 0 lost, 0 mixed
        assert {n: fs.cat(f"{BUCKET}/sweep/{point}/{TARGET}/{n}") for n in uninjected} == uninjected, point
        assert object_names(fs, f"sweep/{point}/{TARGET}") == set(uninjected), point
        assert checkpoint_entries(fs, f"sweep/{point}")[("orders", 0)] == end, point


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A log dir of three partitions (one a topic) and its compaction on local disk."""
    out = tmp_path_factory.mktemp("small") / "logs"
    assert cli.main(["gen", "--out", str(out), "--seed", "7", "--partitions", "1", "-q"]) == 0
    return out


def test_a_run_with_the_server_down_ends_2_before_anything_is_written(seaweed, seaweedfs, small, capsys):
    """The server stopped for the whole run: exit 2 with one line naming the endpoint, and once it
    is back the log dir is as it was (no lock, no state, no record)."""
    _, fs, _ = seaweed
    fs.put(f"{small}/", f"{BUCKET}/down/", recursive=True)
    before = {p: fs.cat(p) for p in fs.find(f"{BUCKET}/down")}
    # straight to its port (refused connections, not a proxy's dropped ones); botocore's attempts
    # cut to one (s3fs still retries 5 times), which only make the same answer come later
    direct = Store("seaweedfs, no proxy", None, seaweedfs.endpoint, ACCESS_KEY, SECRET_KEY,
                   config_kwargs={"retries": {"max_attempts": 1}})
    seaweedfs.stop()
    try:
        with direct.installed():
            probe._answers.clear()
            began = time.monotonic()
            code = cli.main(["run", url("down"), "--now", NOW])
            seconds = time.monotonic() - began
    finally:
        seaweedfs.start()
    err = capsys.readouterr().err
    print(f"refused in {seconds:.1f} s")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"kcompact: error: s3://{BUCKET}: cannot connect to the object store at "
                           f"{seaweedfs.endpoint} (could not connect)"), line
    assert {p: fs.cat(p) for p in fs.find(f"{BUCKET}/down")} == before


def test_the_server_restarted_between_the_plan_and_the_compaction(seaweed, seaweedfs, small, spark, tmp_path):
    """``kcompact plan``, the server SIGKILLed and started again, ``kcompact compact --plan``: the
    result is the local compaction's, record for record and byte for byte."""
    _, fs, _ = seaweed
    truth = compacted_copy(spark, small, tmp_path / "local")
    fs.put(f"{small}/", f"{BUCKET}/restart/", recursive=True)
    plan = tmp_path / "plan.json"
    assert cli.main(["plan", url("restart"), "--now", NOW, "--output", str(plan)]) == 0
    seaweedfs.kill()
    seaweedfs.start()
    probe._answers.clear()
    assert cli.main(["compact", url("restart"), "--plan", str(plan), "--now", NOW]) == 0
    compared = 0
    for part in sorted(p for p in truth.iterdir() if p.is_dir() and not p.name.startswith("__")):
        logs = sorted(p.name for p in part.glob("*.log"))
        assert sorted(n for n in object_names(fs, f"restart/{part.name}") if n.endswith(".log")) == logs, part.name
        kept = records(fs.cat(f"{BUCKET}/restart/{part.name}/{n}") for n in logs)
        assert kept == local_records(part) == seen_records(url(f"restart/{part.name}")), part.name
        for p in part.iterdir():
            assert fs.cat(f"{BUCKET}/restart/{part.name}/{p.name}") == p.read_bytes(), p
        compared += len(kept)
    assert compared > 1000
    assert checkpoint_entries(fs, "restart") == parse_checkpoint(
        "local", (truth / "cleaner-offset-checkpoint").read_bytes())
    assert staged_left(fs, "restart") == []
    shutil.rmtree(truth)
