"""The log dir's ``.lock`` (issue 43 item 8): a job that had to create it removes it when it lets
go, as Kafka's broker removes its own at shutdown (FileLock.destroy), so a failed or finished
command leaves the log dir as it found it; a ``.lock`` that was there stays, bytes and bits."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import stat

import pytest

from kcompact.errors import LogDirBusy
from kcompact.storage import lock as lock_module
from kcompact.storage.lock import LogDirLock


def _try_lock(path, answer):
    """In another process, as a broker's tryLock: whether the lock on ``path`` is free."""
    with open(path, "r+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            answer.put(False)
        else:
            answer.put(True)


def free_elsewhere(path) -> bool:
    answer = multiprocessing.Queue()
    other = multiprocessing.Process(target=_try_lock, args=(str(path), answer))
    other.start()
    other.join(30)
    return answer.get(timeout=5)


def test_a_lock_file_the_job_created_is_removed_when_it_lets_go(tmp_path):
    with LogDirLock(str(tmp_path)):
        assert (tmp_path / ".lock").is_file()
        assert not free_elsewhere(tmp_path / ".lock")
    assert not (tmp_path / ".lock").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_that_was_there_stays_as_it_was(tmp_path):
    (tmp_path / ".lock").write_bytes(b"")
    os.chmod(tmp_path / ".lock", 0o600)
    before = os.stat(tmp_path / ".lock")
    with LogDirLock(str(tmp_path)):
        assert not free_elsewhere(tmp_path / ".lock")
    after = os.stat(tmp_path / ".lock")
    assert (after.st_ino, stat.S_IMODE(after.st_mode), after.st_size) == (before.st_ino, 0o600, 0)
    assert free_elsewhere(tmp_path / ".lock")


def test_the_outermost_holder_removes_it(tmp_path):
    with LogDirLock(str(tmp_path)):
        with LogDirLock(str(tmp_path)):
            pass
        assert (tmp_path / ".lock").is_file() and not free_elsewhere(tmp_path / ".lock")
    assert not (tmp_path / ".lock").exists()


def test_a_dry_run_creates_none(tmp_path):
    with LogDirLock(str(tmp_path), create=False):
        assert not (tmp_path / ".lock").exists()


def test_a_refused_job_leaves_the_holders_file(tmp_path):
    with LogDirLock(str(tmp_path)):
        inode = os.stat(tmp_path / ".lock").st_ino
        other = multiprocessing.get_context("fork").Process(target=_refused, args=(str(tmp_path),))
        other.start()
        other.join(30)
        assert other.exitcode == 0
        assert os.stat(tmp_path / ".lock").st_ino == inode


def _refused(log_dir):
    lock_module._HELD.clear()  # the forked child holds nothing of its parent's
    try:
        with LogDirLock(log_dir):
            os._exit(1)
    except LogDirBusy:
        os._exit(0)


def test_a_lock_on_a_file_removed_meanwhile_is_taken_again(tmp_path, monkeypatch):
    """Another job let go of the ``.lock`` it had created between this job's open and its lock:
    the lock taken on the removed file keeps nobody out, so the job opens the name again."""
    (tmp_path / ".lock").write_bytes(b"")
    real_lockf, calls = fcntl.lockf, []

    def lockf(fd, how):
        calls.append(os.fstat(fd).st_ino)
        if len(calls) == 1:
            os.unlink(tmp_path / ".lock")
        return real_lockf(fd, how)

    monkeypatch.setattr(lock_module.fcntl, "lockf", lockf)
    with LogDirLock(str(tmp_path)):
        named = os.stat(tmp_path / ".lock").st_ino
        assert len(calls) == 2 and calls[1] == named
        monkeypatch.setattr(lock_module.fcntl, "lockf", real_lockf)
        assert not free_elsewhere(tmp_path / ".lock")
    assert not (tmp_path / ".lock").exists()  # the second file was this job's own


@pytest.mark.parametrize("create", [True, False])
def test_object_stores_take_no_lock(create):
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.pipe("/kc-lock-test/logs/orders-0/00000000000000000000.log", b"")
    with LogDirLock("memory://kc-lock-test/logs", create=create):
        assert not memory.exists("/kc-lock-test/logs/.lock")
    memory.rm("/kc-lock-test", recursive=True)


def _hold(path, locked, done):
    with open(path, "w") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        locked.set()
        done.wait(30)


def test_a_command_takes_every_lock_once_or_leaves_the_busy_ones(tmp_path):
    """``held_locks``, the one way a command takes its log dirs' locks: by default a log dir another
    process holds refuses the command, the locks taken so far let go; with ``leave_busy`` that log
    dir is left alone, named with its holder, and the others are held."""
    free, busy = tmp_path / "free", tmp_path / "busy"
    free.mkdir()
    busy.mkdir()
    locked, done = multiprocessing.Event(), multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(str(busy / ".lock"), locked, done))
    holder.start()
    try:
        assert locked.wait(30)
        with pytest.raises(LogDirBusy, match=f"locked by process {holder.pid}"), \
                lock_module.held_locks([str(free), str(busy)]):
            pass
        assert not (free / ".lock").exists() and not lock_module.holds_lock(str(free))  # let go
        with lock_module.held_locks([str(busy), str(free)], leave_busy=True) as held:
            assert held.free == [str(free)] and lock_module.holds_lock(str(free))
            assert list(held.busy) == [str(busy)] and f"locked by process {holder.pid}" in held.busy[str(busy)]
            assert not lock_module.holds_lock(str(busy)) and not free_elsewhere(free / ".lock")
        assert not lock_module.holds_lock(str(free)) and not (free / ".lock").exists()
    finally:
        done.set()
        holder.join(30)
