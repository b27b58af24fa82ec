"""spark-submit on a real Spark standalone cluster: a master and two one-core workers on this
machine, started from the installed PySpark, running ``make dist``'s compaction entry script.

What it proves, beyond the embedded local Spark of the other tests:
- the entry script runs under spark-submit with our packages shipped only by ``--py-files``:
  executors run a Python that can import every dependency but none of our packages (checked
  here), so a task could only find ``readers`` & co. in the archive;
- the job's tasks run in executors of both workers, whose work dirs are not the driver's cwd;
- the records kept are those embedded local Spark keeps on an identical copy of the log dir,
  listed by kafka-python (an independent decoder), and the log dir verifies clean;
- the driver's event log names the job groups of the compaction stages.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pyspark
import pytest

from kcompact.kernels import cache
from tests.support import kp_batches, layers

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
PYTHON = sys.executable  # the project's venv: the driver's Python
KCOMPACT = str(Path(PYTHON).parent / "kcompact")
NOW = "1720001000000"
# Short-lived JVMs on two shared cores: C1 only and one GC thread save most of the JIT's CPU.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without PYTHONPATH (nothing may leak our packages to Spark)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS")}
    return env | {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"} | extra


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)


# -- what spark-submit ships ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """``make dist`` into a tmp dir: the wheel, kcompact-py.zip and the entry scripts."""
    out = tmp_path_factory.mktemp("dist")
    # -o: the venv running this test is the installed one; a test never reinstalls it
    done = _run(["make", "--no-print-directory", "-o", ".venv/.installed", "dist", f"DIST={out}"], cwd=REPO,
                env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "compact.py", "kcompact-0.1.0-py3-none-any.whl", "kcompact-py.zip", "plan.py", "recover.py", "retain.py",
        "run.py"]
    with zipfile.ZipFile(out / "kcompact-py.zip") as archive:
        names = set(archive.namelist())
    assert {f"kcompact/{layer}/__init__.py" for layer in layers()} | {
        "kcompact/__init__.py", "kcompact/conf/log4j2.properties", "kcompact/readers/scan.py"} <= names
    assert {name.split("/")[0] for name in names} == {"kcompact"}
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    return out


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> str:
    """A venv whose only path to packages is a ``.pth`` line naming the project venv's
    site-packages. Python adds that directory without reading the ``.pth`` files inside it, so
    the editable install's finder is never installed: our packages are not importable there."""
    root = tmp_path_factory.mktemp("executor-venv")
    done = _run([PYTHON, "-m", "venv", "--without-pip", str(root)])
    assert done.returncode == 0, done.stderr
    python = str(root / "bin" / "python")
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = """
import importlib
import pyspark, pyarrow, numba, cramjam, crc32c, fsspec, s3fs  # the dependencies: importable
try:  # our package: not importable
    importlib.import_module("kcompact.readers")
except ImportError as exc:
    print(type(exc).__name__, exc.name)
"""
    done = _run([python, "-c", probe], env=_env(), cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["ModuleNotFoundError kcompact"]
    return python


# -- the cluster ----------------------------------------------------------------------------------
class Cluster:
    """A master and two one-core workers (``spark-class``), each in its own session, logging to
    files under ``root``; every port the OS's choice."""

    def __init__(self, root: Path, executor_python: str):
        self.root = root
        self.port, self.ui_port = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.work_dirs = [root / "worker-1", root / "worker-2"]
        self.procs: list[tuple[subprocess.Popen, Path]] = []
        # Executors inherit the workers' environment: their only Python is ``executor_python``.
        self.env = _env(SPARK_CONF_DIR=str(root / "conf"), SPARK_LOCAL_DIRS=str(root / "local"),
                        SPARK_DAEMON_JAVA_OPTS=f"{JVM_OPTS} -Dspark.master.rest.enabled=false",
                        SPARK_DAEMON_MEMORY="512m", PYSPARK_PYTHON=executor_python)
        (root / "conf").mkdir()

    def _start(self, name: str, *args: str) -> None:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:  # own session: the finalizer ends the daemon with its executors
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out,
                                    stderr=subprocess.STDOUT, env=self.env, cwd=self.root, start_new_session=True)
        self.procs.append((proc, log))

    def start(self) -> None:
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i, work in enumerate(self.work_dirs, 1):
            work.mkdir()
            self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "1g",
                        "--work-dir", str(work), self.url)

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def wait_for_workers(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc, log in self.procs:
                assert proc.poll() is None, f"{log.name} exited {proc.returncode}:\n{_tail(log)}"
            try:
                if self.state()["aliveworkers"] == len(self.work_dirs):
                    return
            except (OSError, ValueError):  # the master's UI is not up yet, or not serving JSON yet
                pass
            time.sleep(0.5)
        pytest.fail("workers did not register:\n" + "\n".join(_tail(log) for _, log in self.procs))

    def stop(self) -> None:
        for proc, _ in reversed(self.procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, executor_python):
    """The daemons, starting: the test waits for the workers once it has built its inputs."""
    c = Cluster(tmp_path_factory.mktemp("cluster"), executor_python)
    try:
        c.start()
        yield c
    finally:
        c.stop()


# -- independent truth ----------------------------------------------------------------------------
def listing(log_dir: Path) -> dict[str, list[tuple]]:
    """Per partition dir, every record of its live segments in offset order, as kafka-python
    decodes them (CRCs checked): offset, timestamp, key, value, headers, control flag."""
    out = {}
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        rows = []
        for segment in sorted(part.glob("*.log")):
            for batch in kp_batches(segment.read_bytes()):
                rows += [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers), batch.is_control_batch)
                         for r in batch]
        out[part.name] = rows
    return out


def files(log_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(log_dir)) for p in log_dir.rglob("*") if p.is_file())


def events(event_dir: Path) -> list[dict]:
    """The driver's event log (rolling: ``eventlog_v2_<app>/events_<n>_<app>``), one JSON event a line."""
    logs = sorted(event_dir.glob("eventlog_v2_*/events_*"), key=lambda p: int(p.name.split("_")[1]))
    assert logs, f"no event log in {event_dir}"
    return [json.loads(line) for log in logs for line in log.read_text().splitlines()]


# -- the test -------------------------------------------------------------------------------------
@pytest.mark.slow  # more than 20 s (make test-fast leaves it out)
def test_compact_on_standalone_cluster(tmp_path, executor_python, cluster, dist):
    logs, local, pristine = tmp_path / "logs", tmp_path / "logs-local", tmp_path / "logs-pristine"
    done = _run([KCOMPACT, "gen", "--out", str(logs), "--seed", "7"])
    assert done.returncode == 0, done.stderr
    shutil.copytree(logs, local)
    shutil.copytree(logs, pristine)

    # the same job on embedded local Spark, on an identical copy, while the cluster works
    local_run = subprocess.Popen([KCOMPACT, "compact", str(local), "--now", NOW, "--report", str(tmp_path / "L.json")],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=_env(JAVA_TOOL_OPTIONS=JVM_OPTS))
    cluster.wait_for_workers()

    driver_cwd, event_dir = tmp_path / "driver", tmp_path / "events"
    driver_cwd.mkdir()
    event_dir.mkdir()
    confs = {
        "spark.pyspark.python": executor_python,
        "spark.pyspark.driver.python": PYTHON,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_dir.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "true",
        # both executors registered before the first job, so both get tasks
        "spark.cores.max": "2",  # what "all resources" means to minRegisteredResourcesRatio
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.executor.extraJavaOptions": JVM_OPTS,
        # numba caches what it compiles from the archive under XDG_CACHE_HOME: here, not in ~/.cache
        "spark.executorEnv.XDG_CACHE_HOME": str(tmp_path / "executor-cache"),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
    }
    submit = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url,
              "--py-files", str(dist / "kcompact-py.zip"), "--driver-java-options", JVM_OPTS]
    for key, value in confs.items():
        submit += ["--conf", f"{key}={value}"]
    submit += [str(dist / "compact.py"), str(logs), "--now", NOW, "--report", str(tmp_path / "R.json")]
    done = _run(submit, cwd=driver_cwd, env=_env(PYSPARK_PYTHON=executor_python, PYSPARK_DRIVER_PYTHON=PYTHON,
                                                 SPARK_LOCAL_DIRS=str(tmp_path / "driver-local")))
    local_out = local_run.communicate(timeout=300)[0]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert local_run.returncode == 0, local_out
    # spark-submit's JVM starts with Spark's INFO profile: the session's log level (WARN) holds from
    # the context's first lines on, not after its 44 INFO lines of start-up
    info = [line for line in done.stderr.splitlines() if " INFO " in line]
    assert len(info) <= 3 and all(" INFO SparkContext: " in line for line in info), info

    # ran on the cluster: the application's executors lived in the workers' work dirs
    log = events(event_dir)
    (app,) = [e["App ID"] for e in log if e["Event"] == "SparkListenerApplicationStart"]
    assert app.startswith("app-"), f"the driver ran {app}, not an application of {cluster.url}: --master ignored"
    props = next(e for e in log if e["Event"] == "SparkListenerEnvironmentUpdate")["Spark Properties"]
    assert props["spark.master"] == cluster.url and props["spark.pyspark.python"] == executor_python
    # the executors that joined the application: as it ends, a master may launch a replacement for
    # one the driver stopped, killed before it registers (seen in CI: an executor dir with no archive)
    joined = {e["Executor ID"] for e in log if e["Event"] == "SparkListenerExecutorAdded"}
    executor_dirs = {work: [d for d in (work / app).iterdir() if (d / "stderr").is_file() and d.name in joined]
                     for work in cluster.work_dirs}
    for work, dirs in executor_dirs.items():
        assert dirs, f"no executor of {app} ran on {work.name}"
        for d in dirs:  # each executor fetched the archive into its own work dir
            assert (d / "kcompact-py.zip").is_file()
    ran_tasks = {e["Task Info"]["Executor ID"] for e in log
                 if e["Event"] == "SparkListenerTaskEnd" and e["Task End Reason"]["Reason"] == "Success"}
    for work, dirs in executor_dirs.items():
        assert ran_tasks & {d.name for d in dirs}, f"no task ran on {work.name} (tasks ran on executors {ran_tasks})"

    # the job groups of the compaction stages reach Spark
    groups = {e["Properties"].get("spark.jobGroup.id") for e in log if e["Event"] == "SparkListenerJobStart"}
    assert {"kcompact-batch-plans", "kcompact-clean"} <= groups

    # same result as embedded local Spark, record by record, and a log dir a broker accepts
    verified = _run([KCOMPACT, "verify", str(logs)])
    assert verified.returncode == 0, verified.stdout + verified.stderr
    cleaned, expected, before = listing(logs), listing(local), listing(pristine)
    assert cleaned.keys() == expected.keys() == before.keys()
    for part in expected:
        assert cleaned[part] == expected[part], f"{part}: records kept differ from local mode's"
    assert files(logs) == files(local)
    assert (logs / "cleaner-offset-checkpoint").read_bytes() == (local / "cleaner-offset-checkpoint").read_bytes()
    changed = sorted(part for part in before if cleaned[part] != before[part])
    assert changed and all(part.startswith(("orders-", "users-")) for part in changed)  # compacted topics only
    report = json.loads((tmp_path / "R.json").read_text())
    local_report = json.loads((tmp_path / "L.json").read_text())
    assert report["totals"]["failed"] == 0
    kept = sorted((p["topic"], p["partition"], p["records_kept"]) for p in report["partitions"])
    assert kept == sorted((p["topic"], p["partition"], p["records_kept"]) for p in local_report["partitions"])

    # the executors compiled no kernel: numba's cache of the archive's code (under XDG_CACHE_HOME,
    # new) holds the indexes shipped in it (kernels.cache), copied as they are, and no other
    shipped = REPO / "kernels" / cache.SHIPPED
    indexes = sorted((tmp_path / "executor-cache").rglob("*.nbi"))
    assert indexes, "no kernel cache on the executors"
    for index in indexes:  # <cache>/numba/<package's last folder>_<hash of its path>/kcompact-<digest>/<index>
        folder = index.parent.parent.name.rsplit("_", 1)[0]
        assert index.parent.name.startswith("kcompact-"), f"{index}: compiled on an executor"
        (ours,) = [p for p in shipped.rglob(index.name) if p.parent.name == folder]  # compaction/cleaning: cleaning
        assert index.read_bytes() == ours.read_bytes(), f"{index}: compiled on an executor"


@pytest.mark.parametrize("script", ["plan", "compact", "retain", "run", "recover"])
def test_entry_scripts_run_from_the_archive(dist, executor_python, script):
    """Each entry script, run as a file by the executors' Python with only the archive on its
    path (as spark-submit runs the driver), reaches its own subcommand's argument parsing."""
    done = _run([executor_python, str(dist / f"{script}.py"), "--help"],
                env=_env(PYTHONPATH=str(dist / "kcompact-py.zip")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: kcompact {script} [-h]")
    assert "LOGDIR" in done.stdout


def test_the_wheel_adds_one_name_to_site_packages(dist, tmp_path):
    """Installed into a fresh venv, the wheel adds the package ``kcompact`` and its metadata, and no
    other top-level name (a DAG folder's or another distribution's ``tools``, ``conf`` or ``jobs``
    neither shadows ours nor is shadowed by it)."""
    venv = tmp_path / "venv"
    assert _run([PYTHON, "-m", "venv", str(venv)]).returncode == 0
    python = str(venv / "bin" / "python")
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    before = {p.name for p in purelib.iterdir()}
    done = _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(dist / "kcompact-0.1.0-py3-none-any.whl"),
        ]
    )
    assert done.returncode == 0, done.stderr
    added = {p.name for p in purelib.iterdir()} - before
    assert added == {"kcompact", "kcompact-0.1.0.dist-info"}, added
    assert {p.name for p in (purelib / "kcompact").iterdir() if (p / "__init__.py").is_file()} == set(layers())
