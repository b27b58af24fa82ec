"""Kafka's log-dir lock: the ``.lock`` file a broker holds while it runs."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import posixpath
import struct
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kcompact.errors import LogDirBusy
from kcompact.storage import ownership
from kcompact.storage.failures import typed
from kcompact.storage.paths import is_local, resolve

BROKER_LOCK = ".lock"


def _lock_holder(fd: int) -> int | None:
    """The pid holding a conflicting POSIX lock on ``fd`` (F_GETLK), None if unknown."""
    request = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        l_type, _, _, _, pid = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, request))
    except OSError:
        return None
    return pid if l_type != fcntl.F_UNLCK and pid > 0 else None


def _describe_pid(pid: int | None) -> str:
    """``process 1234 (command line: java ... kafka.Kafka ...)``: cut with an ellipsis when long, so
    no cut-off bracket of the command reads as the end of the sentence."""
    if pid is None:
        return "another process"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())
    except OSError:
        command = ""
    if len(command) > 120:
        command = command[:119] + "\u2026"
    return f"process {pid}" + (f" (command line: {command})" if command else "")


# POSIX record locks belong to the process, and closing any descriptor of the file drops them
# all: one descriptor per locked file, shared by every holder in this process.
_HELD: dict[str, list] = {}  # lock file -> [fd, holders, created by this process]
_HELD_GUARD = threading.Lock()


def holder(log_dir: str) -> str | None:
    """Who holds ``log_dir``'s ``.lock`` now (a broker, a kcompact job): ``process N (command line:
    ...)``, or ``this process``; None when nobody does, and on object stores. Asked with F_GETLK on
    a descriptor of its own, never one this process locks with (closing that would drop the lock)."""
    fs, fs_path = resolve(log_dir)
    if not is_local(fs):
        return None
    path = os.path.realpath(posixpath.join(fs_path, BROKER_LOCK))
    with _HELD_GUARD:
        if path in _HELD:
            return f"this process ({os.getpid()})"
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            pid = _lock_holder(fd)
        finally:
            os.close(fd)
    return _describe_pid(pid) if pid is not None else None


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


class LogDirLock:
    """The OS lock a Kafka broker takes on ``<log dir>/.lock`` (Java's FileChannel.tryLock: a
    POSIX record lock), held by a job for as long as it may change the log dir, so a broker
    cannot start on it meanwhile and a second job cannot touch it. Taken through ``held_locks``
    by the function that opens a command. Re-entrant within a process: a record lock is the
    process's, so a second hold here (a notebook's second thread) shares the first's descriptor
    instead of dropping its lock when it closes its own. A ``.lock`` the job had to create is
    removed when it lets go, as a broker removes its own at shutdown (Kafka's FileLock.destroy):
    the log dir is left as the job found it. A no-op on object stores, where no broker runs and
    leases alone keep jobs apart."""

    def __init__(self, log_dir: str, create: bool = True):
        self.log_dir = log_dir
        self.create = create  # False (a dry run): a missing .lock is not created, nothing is held
        self._path: str | None = None

    @typed
    def __enter__(self) -> LogDirLock:
        fs, fs_path = resolve(self.log_dir)
        if not is_local(fs):
            return self
        path = os.path.realpath(posixpath.join(fs_path, BROKER_LOCK))
        with _HELD_GUARD:
            if path in _HELD:
                _HELD[path][1] += 1
                self._path = path
                return self
            locked = self._locked(path)
            if locked is None:
                return self
            fd, created = locked
            _HELD[path] = [fd, 1, created]
            self._path = path
        return self

    def _locked(self, path: str) -> tuple[int, bool] | None:
        """A descriptor of ``path`` holding its lock, and whether this job created the file (None:
        a dry run found none). The lock counts only while ``path`` still names the locked file: a
        job that lets go of a ``.lock`` it created removes it, and one that opened it just before
        must open it again."""
        while True:
            created = False
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                if not self.create:
                    return None
                owner = ownership.for_file(path)
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    continue
                created = True
                ownership.give(fd, owner)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _lock_holder(fd)
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise LogDirBusy(errno.EBUSY, f"log dir in use: {path} is locked by {_describe_pid(holder)}; "
                                     "a Kafka broker or another kcompact job is using it (stop the broker, or "
                                     "wait for the job and see 'kcompact status')", self.log_dir) from None
                raise
            if _names(path, fd):
                return fd, created
            os.close(fd)

    def __exit__(self, *exc) -> None:
        if self._path is None:
            return
        with _HELD_GUARD:
            entry = _HELD[self._path]
            entry[1] -= 1
            if entry[1] == 0:
                fd, _, created = entry
                if created:  # removed while still locked, so no other job locks it meanwhile
                    with contextlib.suppress(OSError):  # else left, as after a broker's crash: harmless
                        os.unlink(self._path)
                os.close(fd)  # closing releases the lock
                del _HELD[self._path]
        self._path = None


@dataclass(frozen=True, slots=True)
class HeldLogDirs:
    """The log dirs a command holds the ``.lock`` of (``free``, in the order given), and those it
    left alone because another process holds theirs (``busy``: each with who, as LogDirBusy says)."""

    free: list[str]
    busy: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def held_locks(log_dirs: Iterable[str], create: bool = True, leave_busy: bool = False) -> Iterator[HeldLogDirs]:
    """Every log dir's ``.lock``, held for the body: the one place a command takes them, once, so
    the layers below are handed the free log dirs instead of locking again. A log dir another
    process locks raises ``LogDirBusy`` (those taken let go), or with ``leave_busy`` is left alone
    and named in ``busy``. ``create``: as ``LogDirLock``'s (False on a dry run)."""
    free: list[str] = []
    busy: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for log_dir in log_dirs:
            try:
                stack.enter_context(LogDirLock(log_dir, create=create))
            except LogDirBusy as exc:
                if not leave_busy:
                    raise
                busy[log_dir] = str(exc)
                continue
            free.append(log_dir)
        yield HeldLogDirs(free, busy)


def holds_lock(log_dir: str) -> bool:
    """Whether this process holds local ``log_dir``'s ``.lock`` (False on object stores: none there)."""
    fs, fs_path = resolve(log_dir)
    if not is_local(fs):
        return False
    with _HELD_GUARD:
        return os.path.realpath(posixpath.join(fs_path, BROKER_LOCK)) in _HELD
