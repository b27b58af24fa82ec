"""kcompact from a Spark Connect client, against a real Spark Connect server started from the
installed PySpark (its ``spark-connect`` jar), on ports the OS chose.

What it proves:
- the server's Python workers can import every dependency but not our package (the cluster
  test's ``executor_python``): the client ships ``make dist``'s ``kcompact-py.zip`` with
  ``spark.addArtifacts(..., pyfile=True)``, so each task and the ``kafka-log`` source's planner
  find it only there;
- the example notebook's steps (generate, plan, plot, compact dry-run and real, retain, run,
  recover, the ``kafka-log`` reads), a Connect client in a subprocess, give what a classic
  session gives: the same plan rows, byte-identical compacted files, the same reads; the memory
  model sees the server's settings, the ticker the server's progress;
- Ctrl-C or SIGTERM of the client while an executor writes a ``.cleaned`` file interrupts the
  server's jobs (none left running; none still writing) and leaves the segments as they were, no
  lease and no ``.lock`` held; a compaction after it cleans them;
- a client whose environment alone names an object store (SeaweedFS, its endpoint and keys) plans
  and compacts an ``s3://`` log dir through a server that knows no object store: the server's
  tasks reach the store with the client's settings, the bucket ends as the same compaction on
  local disk (whose result the Kafka fixture tests check), in the requests' budgets of
  tests/e2e/test_s3_requests.py, counted at the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from kcompact.jobs import cli
from tests.e2e.connect_client import NOW
from tests.e2e.test_cluster import PYTHON, SPARK_HOME, _env, _free_port, _tail, dist, executor_python  # noqa: F401
from tests.e2e.test_s3_requests import MERGING
from tests.e2e.test_signals import assert_no_lease, digests, local_files, lock_is_free, make_log_dir

pytestmark = pytest.mark.slow
CLIENT = Path(__file__).with_name("connect_client.py")
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# The server's Python workers load this first (PYTHONPATH): once ``kcompact.storage`` is imported
# (from the client's artifact), the first ``create_file`` of a ``.cleaned`` file under a
# ``slow-logs`` dir writes its worker's pid to ``KCOMPACT_TEST_MARKER``'s file, then takes two
# minutes.
HOOK = '''
import importlib.abc, importlib.util, os, sys, time


def _patch(storage):
    real = storage.create_file

    def slow(path, *args, **kwargs):
        marker = os.environ["KCOMPACT_TEST_MARKER"]
        if "slow-logs" in str(path) and ".cleaned" in str(path) and not os.path.exists(marker):
            with open(marker + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            time.sleep(120)
        return real(path, *args, **kwargs)

    storage.create_file = slow


class _Loader(importlib.abc.Loader):
    """The module's own loader (a zip's serves every module in it), then the patch."""

    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "kcompact.storage":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
'''


class Server:
    """``SparkConnectServer`` under spark-submit, local[2], in its own session, logging to a file."""

    def __init__(self, root: Path, python: str):
        self.root, self.port, self.ui_port = root, _free_port(), _free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        self.marker = root / "writing"
        (root / "hook").mkdir()
        (root / "hook" / "sitecustomize.py").write_text(HOOK)
        self.env = _env(PYSPARK_PYTHON=python, PYTHONPATH=str(root / "hook"), KCOMPACT_TEST_MARKER=str(self.marker),
                        SPARK_LOCAL_DIRS=str(root / "local"), SPARK_CONF_DIR=str(root / "conf"))
        # a server that knows no object store: what its tasks know of one, a client told them
        self.env = {k: v for k, v in self.env.items() if not k.startswith(("AWS_", "FSSPEC_"))}
        (root / "conf").mkdir()
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> None:
        conf = {"spark.connect.grpc.binding.port": self.port, "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.ui.port": self.ui_port, "spark.executor.pyspark.memory": "4g",
                "spark.driver.extraJavaOptions": JVM_OPTS, "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "4", "spark.python.task.killTimeout": "2s",
                # progress reports to the client every 0.1 s, not 2: a short test job's stages show
                "spark.connect.progress.reportInterval": "100ms"}
        args = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[2]", "--driver-memory", "1g",
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([*args, "spark-internal"], stdout=out, stderr=subprocess.STDOUT,
                                         env=self.env, cwd=self.root, start_new_session=True)
        deadline = time.monotonic() + timeout
        while b"Spark Connect server started" not in self.log.read_bytes():
            assert self.proc.poll() is None, f"the server exited {self.proc.returncode}:\n{_tail(self.log)}"
            assert time.monotonic() < deadline, f"the server did not start:\n{_tail(self.log)}"
            time.sleep(0.5)

    def running_jobs(self) -> list[int]:
        base = f"http://127.0.0.1:{self.ui_port}/api/v1/applications"
        with urllib.request.urlopen(base, timeout=10) as r:
            app = json.load(r)[0]["id"]
        with urllib.request.urlopen(f"{base}/{app}/jobs?status=running", timeout=10) as r:
            return [job["jobId"] for job in json.load(r)]

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def server(request, tmp_path_factory, executor_python):  # noqa: F811
    s = Server(tmp_path_factory.mktemp("connect"), executor_python)
    failed = request.session.testsfailed
    try:
        s.start()
        yield s
    finally:
        s.stop()
        if request.session.testsfailed > failed:
            print(f"\n--- the Spark Connect server's log ({s.log}):\n{_tail(s.log, 80)}")


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, killed and not yet reaped by its daemon, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _settled(log_dir: Path, deadline: float) -> dict[str, bytes]:
    """The log dir's files once two listings three seconds apart agree."""
    files = local_files(log_dir)
    while True:
        time.sleep(3)
        now = local_files(log_dir)
        if now == files:
            return now
        assert time.monotonic() < deadline, "the log dir still changes after the server's jobs ended"
        files = now


def client(what: str, work: Path, *extra: str, **kwargs) -> subprocess.CompletedProcess | subprocess.Popen:
    """``connect_client.py`` in its own process, from the repository (no PYTHONPATH: the venv's
    kcompact is the client's, the artifact the server's)."""
    args = [PYTHON, str(CLIENT), what, "--work", str(work), *extra]
    env = _env(PYSPARK_PYTHON=PYTHON)
    if kwargs.pop("background", False):
        return subprocess.Popen(args, env=env, cwd=Path(__file__).parents[2], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    return subprocess.run(args, env=env, cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=900)


def test_the_notebook_steps_give_a_classic_sessions_answers(tmp_path, server, dist):  # noqa: F811
    remote = client("steps", tmp_path / "connect", "--remote", server.url, "--artifact", str(dist / "kcompact-py.zip"))
    assert remote.returncode == 0, remote.stdout[-3000:] + remote.stderr[-5000:]
    classic = client("steps", tmp_path / "classic")
    assert classic.returncode == 0, classic.stdout[-3000:] + classic.stderr[-5000:]
    got, want = json.loads(remote.stdout.splitlines()[-1]), json.loads(classic.stdout.splitlines()[-1])
    assert got.pop("connect") is True and want.pop("connect") is False
    ticks, classic_ticks = got.pop("ticker"), want.pop("ticker")
    assert ticks and all(t.split("/")[1] == "8" for t in ticks), ticks  # the probe job's 8 tasks, from the server
    assert classic_ticks
    # a compaction's progress moves while its cleaning stage runs, with bytes and an ETA, both ways
    for cleaning in (got.pop("cleaning_ticks"), want.pop("cleaning_ticks")):
        assert cleaning and all(mb > 0 and 0 < done < total for done, total, mb in cleaning), cleaning
    assert got["plan"] and any(row["selected"] for row in got["plan"])
    assert got["compacted"]["cleaned"] > 0 and got["compacted_files"] != got["before"]
    assert got["dry_run_left_files"] and got["plot_bytes"]
    assert got["records"][1] < got["records"][0] and got["latest"][0] and got["window"]
    # the memory model's sizing: the server's settings (local[2], a 4 GiB worker cap), as classic's
    assert (got["parallelism"], got["worker_cap"], got["map_memory"]) == (2, 4 << 30, 1 << 30)
    differ = [(i, key) for i, (a, b) in enumerate(zip(got["plan"], want["plan"])) for key in a if a[key] != b.get(key)]
    assert not differ and len(got["plan"]) == len(want["plan"]), differ
    assert got == want


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_client_interrupts_the_servers_jobs(tmp_path, server, dist, signum):  # noqa: F811
    log_dir = make_log_dir(tmp_path / "slow-logs" / "logs")
    work = log_dir.parent
    before = digests(local_files(log_dir))
    server.marker.unlink(missing_ok=True)
    artifact = ["--remote", server.url, "--artifact", str(dist / "kcompact-py.zip")]
    proc = client("compact", work, *artifact, background=True)
    try:
        deadline = time.monotonic() + 300
        while not server.marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and out.splitlines()[-1] == "interrupted", (out, err)
    # the worker sleeping in create_file was killed and no job runs; the other partition's task,
    # killed with it (spark.python.task.killTimeout), may have staged its .cleaned files: the log
    # dir then stays as it is
    sleeper, deadline = int(server.marker.read_text()), time.monotonic() + 30
    while server.running_jobs() or _alive(sleeper):
        assert time.monotonic() < deadline, "a job or the sleeping worker still runs after the client stopped"
        time.sleep(0.5)
    settled = _settled(log_dir, deadline + 30)
    assert {k: v for k, v in digests(settled).items() if ".cleaned" not in k and k != ".lock"
            and not k.startswith("kcompact-state.")} == {k: v for k, v in before.items() if k != ".lock"}
    assert_no_lease({k: v for k, v in settled.items() if k.startswith("kcompact-state.")})
    assert lock_is_free(log_dir)
    # a compaction after it cleans the partitions (the marker file now exists: no more sleeping)
    again = client("compact", work, *artifact)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert not [k for k in local_files(log_dir) if k.endswith((".cleaned", ".swap", ".deleted"))]
    assert digests(local_files(log_dir)) != before


def test_a_client_plans_and_compacts_a_log_dir_on_seaweedfs(tmp_path, server, dist, seaweedfs):  # noqa: F811
    from tests.seaweedfs import ACCESS_KEY, SECRET_KEY
    from tests.stores import Store

    store = Store("seaweedfs", seaweedfs.proxy, seaweedfs.proxy.endpoint, ACCESS_KEY, SECRET_KEY)
    from kcompact.tools.generator.spec import DEMO_SPEC

    orders, clicks = DEMO_SPEC["topics"][:2]  # cleaned partitions enough that a job's fixed requests are shared
    (tmp_path / "spec.json").write_text(json.dumps(DEMO_SPEC | {"topics": [orders | {"partitions": 6}, clicks]}))
    local = tmp_path / "local" / "logs"
    local.parent.mkdir()  # gen makes only the dir it is given
    assert cli.main(["gen", "--out", str(local), "--spec", str(tmp_path / "spec.json"), "--seed", "7", "-q"]) == 0
    fs = store.fs()
    fs.mkdir("kc-connect")
    fs.put(f"{local}/", "kc-connect/logs/", recursive=True)
    url = "s3://kc-connect/logs"
    env = _env(PYSPARK_PYTHON=PYTHON) | {k: v for k, v in store.env().items() if k.startswith(("AWS_", "FSSPEC_"))}
    store.counter.reset()
    proc = subprocess.Popen([PYTHON, str(CLIENT), "store", "--work", str(tmp_path), "--url", url, "--remote",
                             server.url, "--artifact", str(dist / "kcompact-py.zip")], env=env,
                            cwd=Path(__file__).parents[2], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # truth meanwhile: the same compaction on local disk
        assert cli.main(["compact", str(local), "--now", str(NOW), *MERGING]) == 0
        said = proc.stdout.readline()
        assert said == "planned\n", said + proc.communicate(timeout=60)[1][-5000:]
        planning = store.counter.snapshot()["requests"]
        store.counter.reset()
        out, err = proc.communicate("go\n", timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    got = json.loads(out.splitlines()[-1])
    compacting, by_key = store.counter.snapshot()["requests"], dict(store.counter.by_key)
    cleaned = got["compacted"]["cleaned"]
    assert got["failed"] == [] and cleaned >= 1 and cleaned == len(got["selected"]), got
    # the budgets of test_s3_requests.py: a plan lists once and reads what the rules need, a
    # compaction sends at most 40 requests a cleaned partition and one checkpoint write
    assert sum(planning.values()) <= 5 * got["partitions"], planning
    assert planning.get("LIST", 0) <= 12 and planning.get("HEAD", 0) <= 1, planning
    assert sum(compacting.values()) <= 40 * cleaned, (compacting, sorted(by_key.items()))
    assert compacting.get("LIST", 0) <= 20 and compacting.get("HEAD", 0) <= 2, compacting
    assert sum(n for (op, key), n in by_key.items() if op == "PUT" and key.endswith("/cleaner-offset-checkpoint")) == 1
    # the bucket as the local compaction left its partitions, file by file
    for pdir in sorted(p for p in local.iterdir() if p.is_dir()):
        for f in sorted(pdir.iterdir()):
            assert fs.cat_file(f"kc-connect/logs/{pdir.name}/{f.name}") == f.read_bytes(), f
        assert sorted(n.rsplit("/", 1)[-1] for n in fs.find(f"kc-connect/logs/{pdir.name}")) == \
            sorted(f.name for f in pdir.iterdir())
