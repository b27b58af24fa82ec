"""Requests per partition on an object store, counted where they arrive (moto's server,
tests/s3server.py, and the proxy in front of SeaweedFS, tests/seaweedfs.py: ``store``), for whole
commands on a log dir of many small partitions: what the work needs (docs/protocols.md, "Requests
to an object store"), not a listing per partition, a HEAD per read or a checkpoint write per commit.

Truth: the budgets come from the work itself (one GET per segment read, one PUT and one COPY per
file written, the log dir listed once per stage), the plan's own segments and dirty offsets say
what a plan must read, and the bucket's result is compared byte for byte with the same command on
local disk (whose result the Kafka fixture tests check against Kafka's cleaner).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kcompact.jobs import cli

BUCKET = "kc-requests"
NOW = "1720001000000"
PARTITIONS = 20
MERGING = ["--topic-config", "orders:internal.segment.bytes=1000000"]  # about 4 segments, their dirty part into one


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    spec = json.loads(subprocess.run([sys.executable, "-m", "kcompact.jobs.cli", "gen", "--print-spec"], check=True,
                                     capture_output=True, text=True).stdout)
    orders, clicks = spec["topics"][:2]
    spec["topics"] = [orders | {"partitions": PARTITIONS}, clicks | {"partitions": 2}]
    folder = tmp_path_factory.mktemp("requests")
    (folder / "spec.json").write_text(json.dumps(spec))
    assert cli.main(["gen", "--out", str(folder / "logs"), "--spec", str(folder / "spec.json"), "--seed", "7",
                     "-q"]) == 0
    return folder / "logs"


@pytest.fixture(scope="module")
def env(store) -> dict:
    return store.env()


@pytest.fixture(scope="module")
def s3(store):
    fs = store.fs()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    return fs


@pytest.fixture(scope="module")
def counter(store):
    """The requests' counter of the store under test (moto's, or the proxy in front of SeaweedFS)."""
    return store.counter


def upload(fs, local: Path, prefix: str) -> str:
    fs.put(f"{local}/", f"{BUCKET}/{prefix}/", recursive=True)
    return f"s3://{BUCKET}/{prefix}"


def counted(server, args: list[str], env: dict) -> tuple[subprocess.CompletedProcess, dict, dict]:
    """Run ``kcompact <args>``; its requests by operation, and by (operation, object)."""
    server.reset()
    done = subprocess.run([sys.executable, "-m", "kcompact.jobs.cli", *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done, server.snapshot()["requests"], dict(server.by_key)


def test_a_plan_reads_what_the_rules_need_and_lists_once(s3, counter, log_dir, env, tmp_path):
    url = upload(s3, log_dir, "plan")
    _, requests, _ = counted(counter, ["plan", url, "--now", NOW, "--output", str(tmp_path / "plan.json")], env)
    rows = json.loads((tmp_path / "plan.json").read_text())
    rows = rows["partitions"] if isinstance(rows, dict) else rows
    assert len(rows) == PARTITIONS + 2
    total = sum(requests.values())
    assert total <= 5 * len(rows), requests
    # in general: 3 a partition plus one a dirty segment (the segments from the first dirty offset on, the
    # active one aside)
    dirty = sum(sum(1 for s in r["segments"][:-1] if r["first_dirty_offset"] is not None
                    and s["base_offset"] >= r["first_dirty_offset"]) for r in rows)
    assert total <= 3 * len(rows) + dirty, requests
    assert requests.get("LIST", 0) <= 12 and requests.get("HEAD", 0) <= 1, (
        requests
    )  # the arguments' checks and one stage


@pytest.fixture(scope="module")
def local_compaction(log_dir, tmp_path_factory) -> Path:
    """The log dir compacted on local disk, once for both stores."""
    local = tmp_path_factory.mktemp("local") / "logs"
    shutil.copytree(log_dir, local)
    assert cli.main(["compact", str(local), "--now", NOW, *MERGING]) == 0
    return local


def test_a_compaction_sends_at_most_40_requests_a_cleaned_partition(s3, counter, log_dir, env, local_compaction):
    url = upload(s3, log_dir, "compact")
    done, requests, by_key = counted(counter, ["compact", url, "--now", NOW, *MERGING], env)
    summary = re.search(r"^\d+ partitions?: (\d+) cleaned", done.stdout, re.M)
    cleaned = int(summary[1]) if summary else 0
    assert cleaned >= PARTITIONS - 3, done.stdout[-2000:]
    assert sum(requests.values()) <= 40 * cleaned, requests
    assert requests.get("LIST", 0) <= 20 and requests.get("HEAD", 0) <= 2, requests
    checkpoint_puts = sum(
        n for (op, key), n in by_key.items() if op == "PUT" and key.endswith("/cleaner-offset-checkpoint")
    )
    assert checkpoint_puts == 1  # one wave of commits, one log dir
    assert requests.get("DELETE_BATCH", 0) <= 2 and requests.get("DELETE", 0) <= cleaned, requests
    # the same result as on local disk, file by file
    local = local_compaction
    for pdir in sorted(p for p in local.iterdir() if p.is_dir()):
        for f in sorted(pdir.iterdir()):
            assert s3.cat_file(f"{BUCKET}/compact/{pdir.name}/{f.name}") == f.read_bytes(), f
        assert sorted(n.rsplit("/", 1)[-1] for n in s3.find(f"{BUCKET}/compact/{pdir.name}")) == \
            sorted(f.name for f in pdir.iterdir())


@pytest.fixture
def shared_path(spark_s3):
    """The job's shared path for every partition (``tests.support.use_job_path``'s "shared")."""
    from kcompact.compaction.pipeline import settings

    spark_s3.conf.set(settings.WHOLE, "0")
    spark_s3.conf.set(settings.MAP_MEMORY, "0")
    yield spark_s3
    spark_s3.conf.unset(settings.WHOLE)
    spark_s3.conf.unset(settings.MAP_MEMORY)


def test_the_shared_path_reads_by_listed_sizes_too(s3_server, shared_path, tmp_path):
    """A partition too big for one task (its map made by many, its segments cut into byte ranges)
    sends no HEAD either, and ends as on local disk. In this process, on the session's moto (not
    ``store``: the path's requests are the client's, whatever the server)."""
    import s3fs

    import kcompact

    s3 = s3fs.S3FileSystem(use_listings_cache=False)
    if not s3.exists(BUCKET):
        s3.mkdir(BUCKET)
    small = tmp_path / "logs"
    assert cli.main(["gen", "--out", str(small), "--seed", "7", "-q"]) == 0
    url = upload(s3, small, "shared")
    s3_server.reset()
    kcompact.compact(shared_path, [url], now=int(NOW), progress=lambda line: None)
    assert "HEAD" not in s3_server.snapshot()["requests"], s3_server.snapshot()["requests"]
    kcompact.compact(shared_path, [str(small)], now=int(NOW), progress=lambda line: None)
    for pdir in sorted(p for p in small.iterdir() if p.is_dir()):
        for f in sorted(pdir.iterdir()):
            assert s3.cat_file(f"{BUCKET}/shared/{pdir.name}/{f.name}") == f.read_bytes(), f
