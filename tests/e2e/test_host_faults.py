"""What the host does to a run (issue 33 items 3 and 4): a disk with no space at all, a host name
that does not resolve, and Spark's log named on every exit but 0 when it says something (removed
otherwise, and on exit 0; issue 43 item 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_operator_cases import tmpfs
from tests.e2e.test_operator_inputs import dirty

NOW = 1_720_300_000_000
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]
ROOT = Path(__file__).resolve().parents[2]


def kcompact(args: list[str], env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KCOMPACT_")}
    base |= {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-m", "kcompact.jobs.cli", *args], cwd=ROOT, env=base | (env or {}),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def full_disk(tmp_path):
    """A tmpfs with a log dir of two dirty partitions, then filled to its last byte."""
    for mount in tmpfs(tmp_path / "disk", "size=1m"):
        log_dir = mount / "logs"
        for n in range(2):
            dirty(log_dir / f"orders-{n}")
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        assert os.statvfs(mount).f_bavail == 0
        yield log_dir


@pytest.mark.parametrize("command", ["compact", "run"])
def test_a_disk_without_space_is_a_transient_failure_and_leaves_nothing(full_disk, command):
    before = {p.name for p in full_disk.iterdir()}
    done = kcompact([command, str(full_disk), "--now", str(NOW), *COMPACT])
    assert done.returncode == 5, (done.stdout, done.stderr)
    mount = full_disk.parent
    for n in range(2):
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"orders-{n}: NOT cleaned"))
        assert "I/O error (transient, retried next run): " in line, line
        assert f"no space left on {mount} (writing logs/kcompact-state.orders-{n}.json, up to " in line, line
        assert "MB needed)" in line, line
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    after = {p.name for p in full_disk.iterdir()}
    assert after == before, after ^ before  # the .lock it created removed, as a broker removes its own
    assert not list(full_disk.rglob("*.tmp")) and not list(full_disk.rglob("*.cleaned"))
    assert not list(full_disk.glob("kcompact-state.*"))


def test_a_later_command_of_the_process_names_no_spark_log(tmp_path):
    """Two commands in one process (a notebook's, an Airflow PythonOperator's): the first starts
    the JVM, whose log then says something; the second's error is its own and names no log (was:
    every later error of the process ended in ``(Spark's log: ...)``)."""
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    log = tmp_path / "spark.log"
    (tmp_path / "p.json").write_text("{}")
    script = ("import sys; from kcompact.jobs.cli import main; "
              f"assert main(['plan', {str(log_dir)!r}, '--now', '{NOW}']) == 0; "
              f"open({str(log)!r}, 'a').write('ERROR something the JVM said\\n' * 3); "
              f"sys.exit(main(['compact', {str(log_dir)!r}, '--plan', {str(tmp_path / 'p.json')!r}]))")
    base = {k: v for k, v in os.environ.items() if not k.startswith("KCOMPACT_")}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=base | {"PYSPARK_PYTHON": sys.executable, "KCOMPACT_SPARK_LOG": str(log)})
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("kcompact:")]
    assert "p.json" in line and "Spark's log" not in line, line


def test_a_host_name_that_does_not_resolve_is_said_in_one_line(tmp_path):
    """Spark's driver looks up a name that does not resolve (here SPARK_LOCAL_IP's; on a renamed
    host without /etc/hosts, InetAddress.getLocalHost's): the JVM exits as it starts. Was:
    ``internal error: ... JAVA_GATEWAY_EXITED``, the cause only in Spark's log."""
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    log = tmp_path / "spark.log"
    done = kcompact(["plan", str(log_dir), "--now", str(NOW)],
                    env={"SPARK_LOCAL_IP": "kc-nowhere.invalid", "KCOMPACT_SPARK_LOG": str(log)})
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("kcompact: error: Spark cannot start: java.net.UnknownHostException"), lines[0]
    assert "SPARK_LOCAL_HOSTNAME" in lines[0] and "/etc/hosts" in lines[0], lines[0]
    assert lines[0].endswith(f"(Spark's log: {log})"), lines[0]
    assert log.exists()


def test_the_spark_log_is_named_when_nothing_was_done_and_removed_on_success(tmp_path):
    """Exit 5 (the log dir in use) names the log, which stays, when it says more than the JVM's
    start-up lines (else it is removed, unnamed); exit 0 removes its own."""
    import fcntl

    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    (log_dir / ".lock").touch()
    temp = tmp_path / "temp"
    temp.mkdir()
    with open(log_dir / ".lock", "r+b") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = kcompact(["compact", str(log_dir), "--now", str(NOW), *COMPACT], env={"TMPDIR": str(temp)})
    assert held.returncode == 5, (held.stdout, held.stderr)
    logs = list(temp.glob("kcompact-spark-*.log"))
    named = [line for line in held.stderr.splitlines() if "Spark's log" in line]
    if logs:
        assert named == [f"kcompact: Spark's log: {logs[0]}"], held.stderr
        said = [line for line in logs[0].read_text().splitlines() if line.strip()]
        assert any(not line.startswith("WARNING: Using incubator modules") for line in said), said
        logs[0].unlink()
    else:
        assert named == [], held.stderr
    ok = kcompact(["compact", str(log_dir), "--now", str(NOW), *COMPACT], env={"TMPDIR": str(temp)})
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    assert not list(temp.glob("kcompact-spark-*.log"))
