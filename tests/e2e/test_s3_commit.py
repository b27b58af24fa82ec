"""The object-store commit protocol (operations/s3commit.py) against moto's S3 server: a whole job
on s3:// equals the same job on local disk, a SIGKILL at every store mutation of one partition's
commit leaves readers the old or the new partition and recovery the one the record decides, two
writers of one generation cannot both win, two jobs at once never clean the same partition.

Truth comes from outside the code under test: the same compaction on local disk (Kafka's swap
protocol, whose result tests/e2e/test_compaction_fixture.py checks against Kafka's own cleaner), read
back with kafka-python. Subprocesses reach moto through FSSPEC_S3 and the AWS_* variables, with a
secret key that must never appear in their output. The listing cache of s3fs is off everywhere:
``storage`` must read what the store holds now (see docs/protocols.md, "Object-store commit protocol").
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kcompact import errors
from kcompact.jobs import cli
from kcompact.logdir import commits
from kcompact.logdir import names as log_dir_names
from kcompact.logdir.listing import SEGMENT_KINDS, scan_partition, segment_name
from kcompact.operations import last_run, s3commit
from kcompact.readers.checkpoint import parse as parse_checkpoint
from kcompact.storage import probe
from kcompact.tools.dump import dump_path
from tests.support import FAULTY, failing_s3, kp_batches, kp_record

NOW = "1720001000000"
BUCKET = "kc-commit"
SECRET = f"kcompact-secret-{uuid.uuid4().hex}"
FAULTS = Path(__file__).resolve().parents[1] / "faults_s3"
KCOMPACT = [sys.executable, "-m", "kcompact.jobs.cli"]
MERGING = [
    "--topic-config",
    "orders:internal.segment.bytes=1000000",
]  # orders-0's first three segments become one group
TARGET = "orders-0"  # the partition whose commit the faults hit
JOB_LEASE_MS = "30000"  # killed jobs' leases lapse this soon (the default is 120 s)


# -- the store, and how subprocesses reach it --------------------------------------------------------
@pytest.fixture(scope="module")
def s3(s3_endpoint):
    """s3fs on the session's moto server. The product runs with s3fs's default configuration (its
    listing cache on): ``storage`` itself asks for no listing cache."""
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)  # the test's own view of the bucket, always fresh
    fs.mkdir(BUCKET)
    yield fs


@pytest.fixture(scope="module")
def child_env(s3_endpoint):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KCOMPACT_"))}
    env.update(FSSPEC_S3=json.dumps({"client_kwargs": {"endpoint_url": s3_endpoint}}),
               AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, KCOMPACT_SPARK_LOG_LEVEL="ERROR")
    return env


def faults_env(env: dict, **settings: str) -> dict:
    return env | {"PYTHONPATH": os.pathsep.join([str(FAULTS), env.get("PYTHONPATH", "")]), "KCOMPACT_S3_FAULTS": "1",
                  "KCOMPACT_S3_CRASH_PARTITION": TARGET} | settings


def url(prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}"


def upload(fs, local: Path, prefix: str) -> str:
    fs.put(f"{local}/", f"{BUCKET}/{prefix}/", recursive=True)
    return url(prefix)


def run(args: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def start(args: list[str], env: dict) -> subprocess.Popen:
    """A subprocess in a session (and process group) of its own, as the fault injection kills it."""
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, timeout: int = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the kill left of its group (Spark's JVM)
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


# -- truth: the same compaction on local disk, read by kafka-python -----------------------------------
@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "logs"
    assert cli.main(["gen", "--out", str(out), "--seed", "7"]) == 0
    return out


def compacted_copy(spark, gen: Path, out: Path, *options: str) -> Path:
    shutil.copytree(gen, out)
    assert cli.main(["compact", str(out), "--now", NOW, *options]) == 0
    assert not (out / ".lock").exists()  # the .lock it created, removed as it let go
    return out


@pytest.fixture(scope="module")
def local_truth(spark, gen, tmp_path_factory) -> Path:
    return compacted_copy(spark, gen, tmp_path_factory.mktemp("local") / "logs")


@pytest.fixture(scope="module")
def merged_truth(spark, gen, tmp_path_factory) -> Path:
    return compacted_copy(spark, gen, tmp_path_factory.mktemp("merged") / "logs", *MERGING)


def records(chunks) -> list:
    """Every record of the given .log byte strings, in order, as kafka-python decodes them."""
    return [kp_record(r) for data in chunks for batch in kp_batches(data) for r in batch]


def local_records(part: Path) -> list:
    return records(p.read_bytes() for p in sorted(part.glob("*.log")))


def partition_dirs(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.is_dir() and not p.name.startswith("__"))


def seen_records(partition_url: str) -> list:
    """What a reader sees of an s3:// partition now: our listing (commit records followed), each
    .log read from the file it names, decoded by kafka-python."""
    from kcompact import storage
    topic, _, number = posixpath.basename(partition_url).rpartition("-")
    part = scan_partition(partition_url, topic, int(number))
    assert not part.problems, part.problems
    return records(storage.read_bytes(seg.log.path) for seg in part.segments)


def object_names(fs, prefix: str) -> set[str]:
    return {p.removeprefix(f"{BUCKET}/{prefix}/") for p in fs.find(f"{BUCKET}/{prefix}")}


def staged_left(fs, prefix: str) -> list[str]:
    return sorted(n for n in object_names(fs, prefix) if n.endswith(commits.STAGED))


def checkpoint_entries(fs, prefix: str) -> dict:
    path = f"{BUCKET}/{prefix}/cleaner-offset-checkpoint"
    return parse_checkpoint(path, fs.cat(path))


def dump_lines(path: str) -> list[dict]:
    """``kcompact dump --json --print-data`` of a partition, file paths left out."""
    out = io.StringIO()
    assert dump_path(path, print_data=True, as_json=True, out=out) == 0
    return [{k: v for k, v in json.loads(line).items() if k != "file"} for line in out.getvalue().splitlines()]


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text


# -- the whole jobs, run in the background --------------------------------------------------------------
# orders-0's commit killed before its Nth store mutation: its record; the checkpoint write of the
# wave of applies that holds it (after its copies and the replaced files' batched delete)
KILLS = {"kill-before-record": 1, "kill-mid-apply": 5}


class Jobs:
    """This module's whole-job subprocesses, started together before the in-process tests, which
    run meanwhile: each job spends most of its time starting a JVM and waiting for moto."""

    def __init__(self, out: Path):
        self.out = out
        self.procs: dict[str, subprocess.Popen] = {}
        self.ends: dict[str, tuple[int, str, str]] = {}

    def start(self, name: str, args: list[str], env: dict) -> None:
        self.procs[name] = start(args, env)

    def end(self, name: str) -> tuple[int, str, str]:
        if name not in self.ends:
            self.ends[name] = finish(self.procs.pop(name))
        return self.ends[name]

    def stop(self) -> None:
        """Jobs no test waited for (it failed first): killed with their process groups."""
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()


@pytest.fixture(scope="module")
def jobs(s3, gen, child_env, tmp_path_factory):
    """``kcompact compact s3://.../full`` uninjected, counting the store mutations of orders-0's
    commit; the same job killed at each of KILLS (leases short, so they lapse soon); and two jobs
    started at the same moment on one log dir."""
    out = tmp_path_factory.mktemp("jobs")
    running = Jobs(out)
    compact = [*KCOMPACT, "compact", "--now", NOW]
    running.start("full", [*compact, upload(s3, gen, "full"), "--report", str(out / "full.json")],
                  faults_env(child_env, KCOMPACT_S3_COUNT_FILE=str(out / "count")))
    for name, n in KILLS.items():
        running.start(name, [*compact, upload(s3, gen, name)],
                      faults_env(child_env, KCOMPACT_S3_CRASH_AT=str(n), KCOMPACT_S3_LEASE_MS=JOB_LEASE_MS))
    prefix = upload(s3, gen, "leases")
    for i in range(2):
        running.start(f"leases-{i}", [*compact, prefix, "--report", str(out / f"leases-{i}.json")], child_env)
    yield running
    running.stop()


# -- 1. a SIGKILL at every store mutation of one commit --------------------------------------------
def commit_fixture(s3, gen: Path, merged_truth: Path):
    """orders-0 before and after the merging compaction, and ``prepare(point)``: a fresh copy of
    the log dir under sweep/<point> with the cleaned files already staged, and the arguments of
    the commit that publishes them."""
    old, new = gen / TARGET, merged_truth / TARGET
    old_records, new_records = local_records(old), local_records(new)
    assert old_records != new_records
    end = parse_checkpoint("c", (merged_truth / "cleaner-offset-checkpoint").read_bytes())[("orders", 0)]
    replaced_bases = [int(p.stem) for p in old.glob("*.log") if int(p.stem) < end]
    new_files = sorted(p for p in new.iterdir() if p.suffix[1:] in SEGMENT_KINDS and int(p.stem) < end)
    assert len(replaced_bases) == 3 and [p.name for p in new_files if p.suffix == ".log"] == [segment_name(0, "log")]
    owner = "kcompact-sweep"
    root_files = [p for p in gen.iterdir() if p.is_file()]

    def prepare(point: str) -> dict:
        prefix = f"sweep/{point}"
        local = [*root_files, *(p for p in old.iterdir()), *(gen / "__cluster_metadata-0").iterdir()]
        remote = [f"{BUCKET}/{prefix}/{p.relative_to(gen)}" for p in local]
        staged = [f"{BUCKET}/{prefix}/{TARGET}/{commits.staged_name(p.name, owner)}" for p in new_files]
        s3.put([str(p) for p in local + new_files], remote + staged)
        return {"owner": owner, "log_dir": url(prefix), "partition_dir": url(f"{prefix}/{TARGET}"),
                "staged": [f"s3://{p}" for p in staged], "checkpoint": end,
                "replaced": [segment_name(b, k) for b in replaced_bases for k in SEGMENT_KINDS]}

    return old_records, new_records, end, prepare


COMMIT_ONE = """
import json, sys
from kcompact.operations import last_run, s3commit
from kcompact.logdir import commits
args = json.loads(sys.argv[1])
record = s3commit.plan_record("orders", 0, 1, args["owner"], args["staged"], args["replaced"], args["checkpoint"])
s3commit.commit_partition(args["log_dir"], args["partition_dir"], record)
"""


@pytest.mark.slow  # more than 20 s (make test-fast leaves it out)
@pytest.mark.usefixtures("jobs")  # the whole jobs run meanwhile
def test_every_crash_point_of_a_commit(s3, gen, merged_truth, child_env, spark_s3, tmp_path):
    """orders-0's commit, the three first segments cleaned into one group (so replaced files that
    are no final name get deleted), driven directly on pre-staged objects: killed before each of
    its store mutations in turn, then read, recovered, compacted again."""
    old_records, new_records, end, prepare = commit_fixture(s3, gen, merged_truth)
    old = gen / TARGET

    def commit(point: str, **settings: str) -> tuple[int, str, str]:
        args = prepare(point)
        return finish(start([sys.executable, "-c", COMMIT_ONE, json.dumps(args)], faults_env(child_env, **settings)))

    code, _out, err = commit("uninjected", KCOMPACT_S3_COUNT_FILE=str(tmp_path / "count"))
    assert code == 0, err
    mutations = int((tmp_path / "count").read_text())
    # the record, the 4 copies (sent at once), copied, one batched delete of the 8 replaced files, the
    # checkpoint, one of the 4 staged files, applied. Copies sent at once, or a batched delete, end each
    # on its own: a failure stops the apply as a kill between two single requests would, a state the
    # test of a failing filesystem below reaches request by request
    assert mutations == 1 + 1 + 1 + 1 + 1 + 1 + 1
    assert seen_records(url(f"sweep/uninjected/{TARGET}")) == new_records
    points = [f"p{n:02d}" for n in range(1, mutations + 1)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        killed = dict(zip(points, pool.map(lambda n: commit(f"p{n:02d}", KCOMPACT_S3_CRASH_AT=str(n)),
                                           range(1, mutations + 1))))
    committed = {}
    for n, point in enumerate(points, 1):
        code, _out, err = killed[point]
        assert code == -signal.SIGKILL, (point, err)
        committed[point] = s3.exists(f"{BUCKET}/sweep/{point}/{commits.record_name('orders', 0, 1)}")
        assert committed[point] == (n > 1)
        seen = seen_records(url(f"sweep/{point}/{TARGET}"))  # before any recovery
        assert log_dir_names.unknown(object_names(s3, f"sweep/{point}")) == [], point
        assert seen == (new_records if committed[point] else old_records), point
    recovered = run([*KCOMPACT, "recover", *(url(f"sweep/{p}") for p in points), "--allow-duplicate-partitions"],
                    child_env)  # copies of one log dir, each at its own crash point
    assert recovered.returncode == 0, recovered.stdout[-3000:] + recovered.stderr[-3000:]
    assert_no_secret(recovered.stdout, recovered.stderr)
    uninjected = {
        n: s3.cat(f"{BUCKET}/sweep/uninjected/{TARGET}/{n}") for n in object_names(s3, f"sweep/uninjected/{TARGET}")
    }
    for point in points:
        assert staged_left(s3, f"sweep/{point}") == [], point
        files = object_names(s3, f"sweep/{point}/{TARGET}")
        if committed[point]:
            assert files == set(uninjected), point
            assert checkpoint_entries(s3, f"sweep/{point}")[("orders", 0)] == end
        else:
            assert files == {p.name for p in old.iterdir()}, point
            assert ("orders", 0) not in checkpoint_entries(s3, f"sweep/{point}")
        assert seen_records(url(f"sweep/{point}/{TARGET}")) == (new_records if committed[point] else old_records)
    # a second compaction takes the points left old to the uninjected result, and leaves a new one as it is
    again = [p for p in points if not committed[p]] + [points[1]]
    assert cli.main(["compact", *(url(f"sweep/{p}") for p in again), "--allow-duplicate-partitions", "--now", NOW,
                     *MERGING]) == 0
    for point in again:
        assert {n: s3.cat(f"{BUCKET}/sweep/{point}/{TARGET}/{n}") for n in uninjected} == uninjected, point
        assert object_names(s3, f"sweep/{point}/{TARGET}") == set(uninjected), point


# -- 2. two writers, one generation ------------------------------------------------------------------
@pytest.mark.parametrize("round_", range(3))
def test_two_writers_race_for_one_generation(s3, gen, local_truth, merged_truth, round_):
    """Two writers stage different results for orders-0 and commit generation 1 at the same
    moment: one wins, the other's staged files are gone, and the partition is the winner's."""
    prefix = f"race-{round_}"
    old = gen / TARGET
    local = [*(p for p in gen.iterdir() if p.is_file()), *old.iterdir()]
    s3.put([str(p) for p in local], [f"{BUCKET}/{prefix}/{p.relative_to(gen)}" for p in local])
    end = 2417
    results = {"kcompact-merged": merged_truth / TARGET, "kcompact-split": local_truth / TARGET}
    records = {}
    for owner, truth in results.items():
        files = [p for p in truth.iterdir() if p.suffix[1:] in SEGMENT_KINDS and int(p.stem) < end]
        staged = [f"{BUCKET}/{prefix}/{TARGET}/{commits.staged_name(p.name, owner)}" for p in files]
        s3.put([str(p) for p in files], staged)
        replaced = [segment_name(int(p.stem), k) for p in old.glob("*.log") if int(p.stem) < end for k in SEGMENT_KINDS]
        records[owner] = s3commit.plan_record("orders", 0, 1, owner, [f"s3://{p}" for p in staged], replaced, end)
    barrier, outcome = threading.Barrier(len(records)), {}

    def commit(owner: str) -> None:
        barrier.wait()
        try:
            s3commit.commit_partition(url(prefix), url(f"{prefix}/{TARGET}"), records[owner])
            outcome[owner] = "won"
        except errors.CommitLost:
            outcome[owner] = "lost"

    threads = [threading.Thread(target=commit, args=(owner,)) for owner in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcome.values()) == ["lost", "won"]
    (winner,) = [owner for owner, what in outcome.items() if what == "won"]
    assert staged_left(s3, prefix) == []
    truth = results[winner]
    assert seen_records(url(f"{prefix}/{TARGET}")) == local_records(truth)
    assert {n for n in object_names(s3, f"{prefix}/{TARGET}") if n.endswith(".log")} == {
        p.name for p in truth.glob("*.log")
    }
    for p in truth.glob("*.log"):
        assert s3.cat(f"{BUCKET}/{prefix}/{TARGET}/{p.name}") == p.read_bytes()
    name = commits.record_name("orders", 0, 1)
    stored = commits.CommitRecord.parse(name, s3.cat(f"{BUCKET}/{prefix}/{name}"))
    assert stored.owner == winner and stored.applied


# -- 3. a whole job on s3:// ------------------------------------------------------------------------
def test_compact_on_s3_equals_local_compaction(jobs, local_truth, gen, s3, child_env):
    code, stdout, stderr = jobs.end("full")
    assert code == 0, stderr[-3000:]
    report = json.loads((jobs.out / "full.json").read_text())
    cleaned = sorted(f"{p['topic']}-{p['partition']}" for p in report["partitions"] if p["committed"])
    assert cleaned == ["orders-0", "orders-3", "users-1"]
    compared = 0
    for name in partition_dirs(local_truth):
        ours = [n for n in sorted(object_names(s3, f"full/{name}")) if n.endswith(".log")]
        theirs = sorted(p.name for p in (local_truth / name).glob("*.log"))
        assert ours == theirs, name
        kept = records(s3.cat(f"{BUCKET}/full/{name}/{n}") for n in ours)
        assert kept == local_records(local_truth / name), name
        assert kept == seen_records(url(f"full/{name}"))
        for kind in SEGMENT_KINDS:  # every file of the partition, byte for byte
            for p in (local_truth / name).glob(f"*.{kind}"):
                assert s3.cat(f"{BUCKET}/full/{name}/{p.name}") == p.read_bytes(), p.name
        compared += len(kept)
    assert compared > 5000
    assert checkpoint_entries(s3, "full") == parse_checkpoint(
        "local", (local_truth / "cleaner-offset-checkpoint").read_bytes()
    )
    assert staged_left(s3, "full") == []
    names = object_names(s3, "full")
    assert last_run.FILE in names  # when this run began choosing: the next run's time-since-last-run-ms
    assert probe.PROBE in names  # the conditional-write probe's object, kept
    at_root = sorted(n for n in names if n.startswith("kcompact-") and n not in (last_run.FILE, probe.PROBE))  # idle
    assert at_root == sorted(commits.record_name(t, int(n), 1) for t, n in (p.rsplit("-", 1) for p in cleaned))
    assert all(commits.CommitRecord.parse(n, s3.cat(f"{BUCKET}/full/{n}")).applied for n in at_root)
    assert int((jobs.out / "count").read_text()) > max(KILLS.values())  # orders-0's commit: those kills hit it
    verified = run([*KCOMPACT, "verify", url("full")], child_env)
    assert verified.returncode == 0, verified.stdout[-3000:]
    assert_no_secret(stdout, stderr, (jobs.out / "full.json").read_text(), verified.stdout, verified.stderr)


# -- 4. whole jobs killed in the middle of a commit ---------------------------------------------------
def lapse(log_dirs: list[str], partitions: list[str], timeout: float = 120) -> None:
    """Wait until the killed jobs' leases have lapsed (their heartbeats stopped with them)."""
    from kcompact.operations import states

    deadline = time.monotonic() + timeout
    for log_dir in log_dirs:
        for name in partitions:
            while not (state := states.read(f"{log_dir}/{name}")[0]).expired() and state.state != states.IDLE:
                assert time.monotonic() < deadline, state
                time.sleep(0.5)


@pytest.mark.slow  # more than 20 s (make test-fast leaves it out)
def test_killed_jobs_show_old_or_new_then_recover_and_converge(jobs, s3, gen, local_truth, child_env, spark_s3):
    """Whole jobs killed during orders-0's commit: before its record, and in the middle of the apply
    of its wave of commits (every partition committed before it as unfinished as orders-0). Every partition
    reads whole (old or new) before any recovery; `kcompact recover` leaves
    orders-0 as its record says; a second job reaches the uninjected result."""
    points = KILLS
    for name in points:
        code, out, err = jobs.end(name)
        assert code == -signal.SIGKILL, (name, err[-3000:])
        assert_no_secret(out, err)
    names = partition_dirs(gen)
    old = {p: dump_lines(str(gen / p)) for p in names}
    new = {p: dump_lines(str(local_truth / p)) for p in names}
    assert old[TARGET] != new[TARGET]
    record = commits.record_name("orders", 0, 1)
    for name, n in points.items():
        written = s3.exists(f"{BUCKET}/{name}/{record}")
        assert written == (n > 1), name
        assert log_dir_names.unknown(object_names(s3, name)) == [], name  # before any recovery
        for p in names:  # before any recovery: each partition whole, old or new
            shown = dump_lines(url(f"{name}/{p}"))
            assert shown in (old[p], new[p]), (name, p)
        assert dump_lines(url(f"{name}/{TARGET}")) == (new if written else old)[TARGET]
        dumped = run([*KCOMPACT, "dump", url(f"{name}/{TARGET}"), "--json", "--print-data"], child_env)
        assert dumped.returncode == 0, dumped.stdout[-2000:]
        lines = [{k: v for k, v in json.loads(line).items() if k != "file"} for line in dumped.stdout.splitlines()]
        assert lines == (new if written else old)[TARGET]
    lapse([url(name) for name in points], names)
    recovered = run([*KCOMPACT, "recover", *(url(name) for name in points), "--allow-duplicate-partitions"], child_env)
    assert recovered.returncode == 0, recovered.stdout[-3000:] + recovered.stderr[-3000:]
    assert_no_secret(recovered.stdout, recovered.stderr)
    for name, n in points.items():
        assert staged_left(s3, name) == [], name
        assert not [f for f in object_names(s3, name) if f.startswith("kcompact-state.")], name
        assert dump_lines(url(f"{name}/{TARGET}")) == (new if n > 1 else old)[TARGET], name
    assert cli.main(["compact", *(url(name) for name in points), "--allow-duplicate-partitions", "--now", NOW]) == 0
    for name in points:
        for p in names:
            assert dump_lines(url(f"{name}/{p}")) == new[p], (name, p)
            assert seen_records(url(f"{name}/{p}")) == local_records(local_truth / p), (name, p)
        assert staged_left(s3, name) == []


# -- 5. leases: two jobs at once --------------------------------------------------------------------
def test_two_jobs_at_once_never_clean_the_same_partition(jobs, s3, gen, local_truth):
    """Two `kcompact compact` processes started at the same moment on one s3:// log dir: each
    partition is cleaned by exactly one of them (leases; a plan overtaken by the other job's
    commit is noticed), and the result is the single job's. A job that found a partition under the
    other's lease says so, with the holder and the lease's end, and ends partial (4), not 0."""
    for i in range(2):
        code, out, err = jobs.end(f"leases-{i}")
        held = json.loads((jobs.out / f"leases-{i}.json").read_text())["held"]
        assert code == (4 if held else 0), err[-3000:]
        for h in held:
            assert h["owner"].startswith("kcompact-") and h["until"], h
            assert "held by another job: " in out and f"(owner {h['owner']}, host {h['host']}, pid {h['pid']}, " in out
        assert_no_secret(out, err)
    reports = [json.loads((jobs.out / f"leases-{i}.json").read_text())["partitions"] for i in range(2)]
    cleaned = [{f"{p['topic']}-{p['partition']}" for p in r if p["committed"]} for r in reports]
    assert cleaned[0].isdisjoint(cleaned[1])
    assert cleaned[0] | cleaned[1] == {"orders-0", "orders-3", "users-1"}
    for report in reports:
        assert all(p["committed"] or p["skipped"] for p in report), report
    for p in partition_dirs(gen):
        assert seen_records(url(f"leases/{p}")) == local_records(local_truth / p), p
    assert staged_left(s3, "leases") == []
    assert [n for n in object_names(s3, "leases") if n.startswith("kcompact-state.")] == []


# -- 5. write failures through a failing fsspec filesystem -------------------------------------------

@pytest.mark.slow  # more than 20 s (make test-fast leaves it out)
def test_write_failures_through_a_failing_filesystem(s3, gen, merged_truth):
    """The commit of orders-0 through a failing fsspec filesystem, an EIO at each of its writes in
    turn: the commit raises, readers see the old or the new partition whole, ``kcompact recover``
    (through the sound filesystem) ends in the state the record decides, nothing staged is left."""
    old_records, new_records, end, prepare = commit_fixture(s3, gen, merged_truth)
    failing = failing_s3()

    def commit_through_failing(point: str, fail_at: int) -> None:
        args = {k: (v.replace("s3://", f"{FAULTY}://") if isinstance(v, str) else
                    [x.replace("s3://", f"{FAULTY}://") for x in v] if k == "staged" else v)
                for k, v in prepare(point).items()}
        failing.calls, failing.fail_at = 0, fail_at
        record = s3commit.plan_record("orders", 0, 1, args["owner"], args["staged"], args["replaced"], end)
        s3commit.commit_partition(args["log_dir"], args["partition_dir"], record)

    commit_through_failing("fail-none", 0)
    writes = failing.calls
    assert writes == 10 and seen_records(url(f"sweep/fail-none/{TARGET}")) == new_records  # as the sweep above counts
    outcomes = {}
    for n in range(1, writes + 1):
        point = f"fail{n:02d}"
        with pytest.raises(OSError, match=f"injected I/O error at write {n}"):
            commit_through_failing(point, n)
        committed = s3.exists(f"{BUCKET}/sweep/{point}/{commits.record_name('orders', 0, 1)}")
        assert seen_records(url(f"sweep/{point}/{TARGET}")) == (new_records if committed else old_records), point
        assert cli.main(["recover", url(f"sweep/{point}")]) == 0
        assert seen_records(url(f"sweep/{point}/{TARGET}")) == (new_records if committed else old_records), point
        assert staged_left(s3, f"sweep/{point}") == [], point
        assert (checkpoint_entries(s3, f"sweep/{point}").get(("orders", 0)) == end) == committed, point
        outcomes[point] = committed
    assert not outcomes["fail01"] and all(list(outcomes.values())[1:])  # the record's PUT is the commit point
