"""A throttled object store: moto's S3 server answering ``503 SlowDown`` to a share of the requests
(tests/s3server.py, a server of this module's own so the throttling reaches no other test). kcompact
must go slower and lose nothing: ``kcompact compact`` on s3:// ends as it would unthrottled, and
``kcompact plan`` gives the same plan.

Truth comes from outside the code under test: the same compaction on local disk (Kafka's swap
protocol, whose result tests/e2e/test_compaction_fixture.py checks against Kafka's own cleaner), read
back with kafka-python, as in tests/e2e/test_s3_commit.py, whose helpers this module reuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from kcompact.jobs import cli
from kcompact.logdir import commits
from kcompact.operations import last_run
from kcompact.readers.checkpoint import parse as parse_checkpoint
from kcompact.storage import probe
from tests.e2e.test_s3_commit import NOW, compacted_copy, local_records, partition_dirs, records
from tests.s3server import CountingS3

BUCKET = "kc-throttle"
KCOMPACT = [sys.executable, "-m", "kcompact.jobs.cli"]
CHECKPOINT = "cleaner-offset-checkpoint"


@pytest.fixture(scope="module")
def store():
    server = CountingS3(seed=7).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fs(store):
    """The test's own view of the bucket: never throttled when it looks, never cached."""
    import s3fs

    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": store.endpoint},
                           use_listings_cache=False, skip_instance_cache=True)
    fs.mkdir(BUCKET)
    return fs


@pytest.fixture(scope="module")
def child_env(store):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KCOMPACT_", "FSSPEC_"))}
    env.update(FSSPEC_S3=json.dumps({"client_kwargs": {"endpoint_url": store.endpoint}}),
               AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, KCOMPACT_SPARK_LOG_LEVEL="ERROR")
    return env


@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "logs"
    assert cli.main(["gen", "--out", str(out), "--seed", "7"]) == 0
    return out


def upload(fs, local: Path, prefix: str) -> str:
    fs.put(f"{local}/", f"{BUCKET}/{prefix}/", recursive=True)
    return f"s3://{BUCKET}/{prefix}"


def files(fs, prefix: str) -> set[str]:
    return {p.removeprefix(f"{BUCKET}/{prefix}/") for p in fs.find(f"{BUCKET}/{prefix}")}


@contextmanager
def throttled(store, share: float):
    """``share`` of the requests refused meanwhile; the counts start from zero."""
    store.reset()
    store.throttle = share
    try:
        yield
    finally:
        store.throttle = 0.0


def run(args: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    return done, time.monotonic() - began


def test_compact_under_slowdown_equals_local_compaction(store, fs, gen, child_env, spark, tmp_path):
    """A fifth of the requests refused: the job ends 0 and the log dir is the local compaction's,
    file by file, with nothing of the job left behind but its applied commit records."""
    truth = compacted_copy(spark, gen, tmp_path / "local")
    log_dir = upload(fs, gen, "logs")
    report = tmp_path / "report.json"
    with throttled(store, 0.2):
        done, seconds = run([*KCOMPACT, "compact", log_dir, "--now", NOW, "--report", str(report)], child_env)
        seen = store.snapshot()
    print(f"compact under throttle 0.2: exit {done.returncode} in {seconds:.0f} s, {seen}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert seen["refused"] >= 20, seen
    cleaned = sorted(f"{p['topic']}-{p['partition']}" for p in json.loads(report.read_text())["partitions"]
                     if p["committed"])
    assert cleaned == ["orders-0", "orders-3", "users-1"]

    compared = 0
    for name in partition_dirs(truth):  # every record, as kafka-python reads it
        logs = sorted(p.name for p in (truth / name).glob("*.log"))
        assert sorted(n for n in files(fs, f"logs/{name}") if n.endswith(".log")) == logs, name
        kept = records(fs.cat(f"{BUCKET}/logs/{name}/{n}") for n in logs)
        assert kept == local_records(truth / name), name
        compared += len(kept)
    assert compared > 5000

    local = {str(p.relative_to(truth)) for p in truth.rglob("*") if p.is_file()}
    ours = files(fs, "logs")
    records_left = sorted(n for n in ours if n.startswith("kcompact-commit."))
    assert records_left == sorted(commits.record_name(t, int(n), 1) for t, n in (p.rsplit("-", 1) for p in cleaned))
    assert all(commits.CommitRecord.parse(n, fs.cat(f"{BUCKET}/logs/{n}")).applied for n in records_left)
    assert [n for n in ours if n.endswith(commits.STAGED)] == []
    assert [n for n in ours if n.startswith("kcompact-state.")] == []  # no lease left: every partition idle
    assert ours - set(records_left) - {probe.PROBE} == local  # the same files as local disk (and the probe's) ...
    for name in sorted(local - {CHECKPOINT, last_run.FILE}):  # ... with the same bytes
        assert fs.cat(f"{BUCKET}/logs/{name}") == (truth / name).read_bytes(), name
    assert (parse_checkpoint("s3", fs.cat(f"{BUCKET}/logs/{CHECKPOINT}"))
            == parse_checkpoint("local", (truth / CHECKPOINT).read_bytes()))


def test_plan_under_heavy_slowdown_is_the_same_plan(store, fs, gen, child_env, tmp_path):
    """Half of the requests refused: ``kcompact plan`` still ends 0 with the unthrottled plan."""
    log_dir = upload(fs, gen, "plan")
    plans = {}
    for share in (0.0, 0.5):
        out = tmp_path / f"plan-{share}.json"
        with throttled(store, share):
            done, seconds = run([*KCOMPACT, "plan", log_dir, "--now", NOW, "--output", str(out)], child_env)
            seen = store.snapshot()
        print(f"plan under throttle {share}: exit {done.returncode} in {seconds:.0f} s, {seen}")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        plans[share] = json.loads(out.read_text())
    assert seen["refused"] >= 20, seen
    assert len(plans[0.0]) > 0
    assert plans[0.5] == plans[0.0]
