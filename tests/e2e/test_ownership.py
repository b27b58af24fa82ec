"""A log dir that belongs to the broker's user stays the broker's: files kcompact replaces keep
their owner, group and bits, the files it adds get the dir's owner and group and no wider bits,
and the broker's user can open every file read-write afterwards (Kafka opens segments, indexes
and ``.lock`` read-write on start). The commands run as root, as an operator's ``sudo`` does;
a run as another unprivileged user is refused before it writes anything.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kcompact.tools import generator

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")

ROOT = Path(__file__).resolve().parents[2]
KCOMPACT = [sys.executable, "-m", "kcompact.jobs.cli"]
NOW = "1720001000000"
BROKER = 1000  # the broker's user and group
OPERATOR = 1001  # an operator without root, in the broker's group
FILE_MODE, DIR_MODE = 0o640, 0o750


@pytest.fixture
def scratch():
    """A directory every uid can traverse (pytest's own temp dirs are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="kcompact-owners-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def broker_owned(root: Path, file_mode: int = FILE_MODE, dir_mode: int = DIR_MODE) -> Path:
    """A generated log dir handed to the broker's user: files ``file_mode``, dirs ``dir_mode``."""
    log_dir = root / "kafka-logs"
    generator.generate(str(log_dir), generator.load_spec(None), seed=7)
    for path in [log_dir, *log_dir.rglob("*")]:
        os.chown(path, BROKER, BROKER)
        path.chmod(dir_mode if path.is_dir() else file_mode)
    return log_dir


def owners(log_dir: Path) -> dict[str, tuple[int, int, int]]:
    return {str(p.relative_to(log_dir)): (p.stat().st_uid, p.stat().st_gid, stat.S_IMODE(p.stat().st_mode))
            for p in [log_dir, *log_dir.rglob("*")]}


def kcompact(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The command in a session of its own (a crash point kills its whole session)."""
    environ = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, **env)
    return subprocess.run([*KCOMPACT, *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600,
                          start_new_session=True)


def as_user(uid: int, gid: int, work) -> tuple[int, str]:
    """``work()``'s exit code and what it wrote to stderr, run in a child process that dropped root
    for ``uid`` in group ``gid`` (a fork: this interpreter lies where only root may run it)."""
    err = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.dup2(err.fileno(), 2)
            sys.stderr = open(2, "w", closefd=False)  # not pytest's capture: the parent reads fd 2's file
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            code = work()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - reported to the parent through stderr
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    err.seek(0)
    return os.waitstatus_to_exitcode(status), err.read().decode()


def open_read_write(files: list[str]) -> int:
    for path in files:
        os.close(os.open(path, os.O_RDWR))
    return 0


def assert_broker_owned(log_dir: Path, before: dict[str, tuple[int, int, int]]) -> None:
    """Every path that was there keeps its owner, group and bits; every new one is the broker's
    with the log dir's bits; and the broker's user opens every file read-write."""
    after = owners(log_dir)
    changed = {p: (before[p], after[p]) for p in after if p in before and before[p] != after[p]}
    assert not changed, f"owner or mode changed: {changed}"
    for path, (uid, gid, mode) in after.items():
        if path in before:
            continue
        wanted = DIR_MODE if (log_dir / path).is_dir() else FILE_MODE
        assert (uid, gid, mode) == (BROKER, BROKER, wanted), f"{path}: {uid}:{gid} {mode:o}"
    files = [str(p) for p in log_dir.rglob("*") if p.is_file()]
    code, err = as_user(BROKER, BROKER, lambda: open_read_write(files))
    assert code == 0, err


def test_every_command_leaves_the_log_dir_the_brokers(scratch):
    log_dir = broker_owned(scratch)
    before = owners(log_dir)
    steps = [("pause", str(log_dir), "orders-0"), ("resume", str(log_dir), "orders-0"),
             ("compact", str(log_dir), "--now", NOW), ("retain", str(log_dir), "--now", NOW),
             ("run", str(log_dir), "--now", str(int(NOW) + 86_400_000)), ("recover", str(log_dir))]
    for step in steps:
        done = kcompact(*step, "-q")
        assert done.returncode == 0, (step, done.stdout, done.stderr)
        assert_broker_owned(log_dir, before)
        before = owners(log_dir)
    assert any(p.endswith(".log") and before[p][0] == BROKER for p in before)


def test_a_crash_in_the_middle_of_a_swap_then_recover(scratch):
    log_dir = broker_owned(scratch)
    before = owners(log_dir)
    crashed = kcompact("compact", str(log_dir), "--now", NOW, "-q", KCOMPACT_CRASH_AT="rename:.swap:2:after",
                       KCOMPACT_CRASH_COUNTER=str(scratch / "crash-count"), PYTHONPATH=str(ROOT / "tests" / "faults"))
    assert crashed.returncode != 0
    assert any(p.endswith((".swap", ".deleted", ".cleaned")) for p in owners(log_dir)), (
        "the crash left a swap half done"
    )
    assert_broker_owned(log_dir, before)
    done = kcompact("recover", str(log_dir), "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_broker_owned(log_dir, before)


def test_files_a_broker_keeps_from_others_stay_so(scratch):
    """0600 files and 0700 dirs: the new files are 0600 too, never readable by the group."""
    log_dir = broker_owned(scratch, file_mode=0o600, dir_mode=0o700)
    done = kcompact("compact", str(log_dir), "--now", NOW, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    after = owners(log_dir)
    assert {mode for path, (_, _, mode) in after.items() if (log_dir / path).is_file()} == {0o600}


def test_another_user_is_refused_before_anything_is_written(scratch):
    """An operator in the broker's group could write the group-writable log dir, but its files
    would be its own: refused, one line naming the owner, nothing written (not even ``.lock``)."""
    log_dir = broker_owned(scratch, file_mode=0o660, dir_mode=0o770)
    before = owners(log_dir)
    from kcompact.jobs import cli

    for command in (["compact", str(log_dir), "--now", NOW], ["run", str(log_dir), "--now", NOW],
                    ["retain", str(log_dir), "--now", NOW], ["recover", str(log_dir)],
                    ["pause", str(log_dir), "orders-0"]):
        code, err = as_user(OPERATOR, BROKER, lambda command=command: cli.main(command))
        assert code == 2, (command, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"uid {BROKER}" in lines[0] and "sudo -u" in lines[0], err
        assert owners(log_dir) == before


def test_a_log_dir_another_user_may_not_read_names_its_owner(scratch):
    """A user outside the broker's group (``nobody`` on ``kafka:kafka 0750``) cannot even list the
    log dir. Was: 'error: DIR: permission denied'; now the line that names the owner, as when the
    dir is readable, for the commands that only read as for those that write."""
    log_dir = broker_owned(scratch)
    before = owners(log_dir)
    from kcompact.jobs import cli

    for command in (["verify", str(log_dir)], ["plan", str(log_dir), "--now", NOW], ["status", str(log_dir)],
                    ["run", str(log_dir), "--now", NOW], ["pause", str(log_dir), "orders-0"]):
        code, err = as_user(OPERATOR, OPERATOR, lambda command=command: cli.main(command))
        assert code == 2, (command, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert f"{log_dir} belongs to " in lines[0] and f"uid {BROKER}" in lines[0] and "0750" in lines[0], err
        assert f"uid {OPERATOR}" in lines[0] and "sudo -u" in lines[0] and "permission denied" not in lines[0], err
        assert owners(log_dir) == before
