"""The one seam between this product and storage.

Every read, listing, rename and delete goes through these functions, so a local
path and an ``s3://`` URL work alike (fsspec resolves the filesystem). The byte
formats in ``readers``/``writers`` never import fsspec: they take file objects.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import posixpath
import queue
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What a listing says about one file: full path, size, modification time."""

    path: str
    size: int
    mtime_ms: int


def resolve(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem serving ``path`` and the path as that filesystem names it."""
    if isinstance(path, str) and ":" not in path:
        # A plain local path: what url_to_fs returns, without parsing a URL chain (a third of
        # the cost; the planner resolves ~20 paths per partition).
        fs = LocalFileSystem()
        return fs, fs._strip_protocol(path)
    # No listing cache: other processes (executors, other jobs, the broker) change these dirs, and
    # a cached listing would hide their files from exists/info/read for the life of the process.
    fs, fs_path = fsspec.core.url_to_fs(path, use_listings_cache=False)
    return fs, fs_path


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def is_local_path(path: str) -> bool:
    """``path`` is on local disk (else an object store, where renames are copies)."""
    return is_local(resolve(path)[0])


def join(base: str, *names: str) -> str:
    return posixpath.join(base, *names)


def url(fs: fsspec.AbstractFileSystem, fs_path: str) -> str:
    """The path a user would type for ``fs_path`` on ``fs`` (adds the protocol back)."""
    return fs_path if is_local(fs) else fs.unstrip_protocol(fs_path)


def _mtime_ms(info: dict) -> int:
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        return int(float(value) * 1000)
    return 0


def _file_info(fs: fsspec.AbstractFileSystem, info: dict) -> FileInfo:
    return FileInfo(url(fs, info["name"]), int(info.get("size") or 0), _mtime_ms(info))


def list_dir(path: str) -> tuple[list[FileInfo], list[str]]:
    """Files (with size and mtime) and sub-directory paths directly inside ``path``."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        try:
            return _list_local(fs_path)
        except NotADirectoryError:
            pass  # fsspec lists a file as itself
    files, dirs = [], []
    for info in fs.ls(fs_path, detail=True):
        if info["type"] == "directory":
            dirs.append(url(fs, info["name"]))
        else:
            files.append(_file_info(fs, info))
    return files, dirs


def _list_local(fs_path: str) -> tuple[list[FileInfo], list[str]]:
    """LocalFileSystem.ls(detail=True) as list_dir reads it, without building its dict per entry
    (half the cost of listing a partition dir). Same rules: a symlink is a file of its target's
    size (0 if dangling) and its own mtime; an entry gone since the scan is left out."""
    files, dirs = [], []
    with os.scandir(fs_path) as entries:
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.path)
                    continue
                size = st.st_size
                if entry.is_symlink():
                    try:
                        size = entry.stat(follow_symlinks=True).st_size
                    except OSError:
                        size = 0
            except FileNotFoundError:
                continue
            files.append(FileInfo(entry.path, size, int(st.st_mtime * 1000)))  # as _mtime_ms
    return files, dirs


def info(path: str) -> FileInfo:
    fs, fs_path = resolve(path)
    return _file_info(fs, fs.info(fs_path))


def exists(path: str) -> bool:
    fs, fs_path = resolve(path)
    return fs.exists(fs_path)


def kind(path: str) -> str | None:
    """``"file"``, ``"directory"`` (on an object store: a prefix with objects under it, or a
    bucket) or None when there is nothing at ``path``."""
    fs, fs_path = resolve(path)
    try:
        return "directory" if fs.info(fs_path)["type"] == "directory" else "file"
    except FileNotFoundError:
        return None


_REASONS = {FileNotFoundError: "no such file or directory", PermissionError: "permission denied",
            IsADirectoryError: "is a directory", NotADirectoryError: "not a directory",
            FileExistsError: "already exists"}


def describe_error(exc: OSError, path: str | None = None) -> str:
    """A storage error as one line a person can act on: the path, then the reason, without errno
    numbers or exception names. s3fs raises bare errors (``FileNotFoundError('bucket/key')``,
    ``FileNotFoundError('The specified bucket does not exist')``); ``path`` names the file when
    the error does not."""
    first = str(exc.args[0]) if exc.args else ""
    names_a_key = exc.strerror is None and exc.filename is None and bool(first) and " " not in first
    where = exc.filename or path or (first if names_a_key else None)
    reason = exc.strerror or (None if names_a_key else first) or _REASONS.get(type(exc), "I/O error")
    if isinstance(exc, FileNotFoundError) and where is not None and "://" in str(where):
        reason = _missing_on_object_store(str(where), reason)
    reason = reason[:1].lower() + reason[1:]
    return f"{where}: {reason}" if where is not None else reason


def _missing_on_object_store(url: str, reason: str) -> str:
    """Which part is missing: the bucket, or any object at or under the path."""
    fs, fs_path = resolve(url)
    bucket = fs_path.split("/", 1)[0]
    try:
        bucket_there = fs.exists(bucket)
    except OSError:
        return reason
    if not bucket_there:
        return f"bucket {bucket!r} does not exist"
    return f"no object at or under this path (bucket {bucket!r} exists)"


def open_read(path: str):
    """A seekable binary file object; callers read it in bounded chunks."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        return open(fs_path, "rb")  # fsspec's LocalFileOpener only wraps this, at twice the cost
    # Callers read large chunks themselves; a read-ahead cache would fetch twice.
    return fs.open(fs_path, "rb", cache_type="none")


def read_bytes(path: str) -> bytes:
    fs, fs_path = resolve(path)
    return fs.cat_file(fs_path)


def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file, without reading the rest."""
    fs, fs_path = resolve(path)
    return fs.cat_file(fs_path, start=start, end=end)


def makedirs(path: str) -> None:
    fs, fs_path = resolve(path)
    fs.makedirs(fs_path, exist_ok=True)


def write_durable(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` and make it durable before returning (fsync locally)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        with open(fs_path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    else:
        fs.pipe_file(fs_path, data)


@contextlib.contextmanager
def create_durable(path: str, direct: bool = False) -> Iterator[BinaryIO]:
    """A new file to stream into; on a clean exit it is flushed and fsynced (locally) or
    completed (object stores). A failure leaves a partial file for the caller to remove.
    ``direct``: a local file goes past the page cache where its file system allows (``DirectFile``)."""
    fs, fs_path = resolve(path)
    if is_local(fs) and direct:
        try:
            fd = os.open(fs_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o666)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this file system takes no O_DIRECT
                raise
        else:
            with DirectFile(fd) as f:
                yield f
                f.flush()
                os.fsync(fd)
            return
    if is_local(fs):
        with open(fs_path, "wb", buffering=DIRECT_BUFFER) as f:  # as DirectFile: few large writes
            yield f
            f.flush()
            os.fsync(f.fileno())
    else:
        with fs.open(fs_path, "wb") as f:
            yield f


DIRECT_BLOCK = 4096  # the most O_DIRECT asks of buffer addresses, write sizes and file offsets
DIRECT_BUFFER = 4 << 20
_DIRECT_BUFFERS: queue.SimpleQueue = queue.SimpleQueue()  # reused: a fresh page costs a fault


class DirectFile:
    """A file written with ``O_DIRECT``, in whole blocks from a reused page-aligned buffer straight
    to the device. It skips the copy into the page cache, which costs more than the write when the
    cache's pages are new to the machine (on a virtual machine, the host faults each one in), and
    leaves the cache to what brokers read: a cleaned segment holds a partition's older records.
    ``flush`` writes the last partial block through the page cache (the file goes on that way); so
    does every write after the file system refuses an aligned one (``EINVAL``)."""

    def __init__(self, fd: int):
        self.fd, self.used = fd, 0
        try:
            self.buffer = _DIRECT_BUFFERS.get_nowait()
        except queue.Empty:
            self.buffer = mmap.mmap(-1, DIRECT_BUFFER)
        self.view = memoryview(self.buffer)

    def __enter__(self) -> DirectFile:
        return self

    def __exit__(self, *exc) -> None:
        self.view.release()
        _DIRECT_BUFFERS.put(self.buffer)
        os.close(self.fd)

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        size = len(data)
        while data:
            n = min(len(data), DIRECT_BUFFER - self.used)
            self.view[self.used:self.used + n] = data[:n]
            self.used += n
            data = data[n:]
            if self.used == DIRECT_BUFFER:
                self._drain(DIRECT_BUFFER)
        return size

    def flush(self) -> None:
        """Write all that is buffered: whole blocks directly, a partial one through the page cache."""
        self._drain(self.used - self.used % DIRECT_BLOCK)
        if self.used:
            self._leave_direct()
            self._drain(self.used)

    def _drain(self, n: int) -> None:
        """Write the buffer's first ``n`` bytes; what follows them moves to its start."""
        if n == 0:
            return
        done = 0
        while done < n:
            try:
                done += os.write(self.fd, self.view[done:n])
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self._leave_direct():
                    raise
        rest = self.used - n
        self.view[:rest] = self.view[n:self.used]
        self.used = rest

    def _leave_direct(self) -> bool:
        """Go on through the page cache; False when already so."""
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        if not flags & os.O_DIRECT:
            return False
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        return True


def fsync_dir(path: str) -> None:
    """Make renames and creations inside a local directory durable (no-op elsewhere)."""
    fs, fs_path = resolve(path)
    if not is_local(fs):
        return
    fd = os.open(fs_path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename(src: str, dst: str) -> None:
    """Atomic replace on a local filesystem; a copy-then-delete on object stores."""
    fs, src_path = resolve(src)
    _, dst_path = resolve(dst)
    if is_local(fs):
        os.replace(src_path, dst_path)
    else:
        fs.mv(src_path, dst_path)


def copy(src: str, dst: str) -> None:
    """Copy one file; on object stores a server-side copy (no bytes through this process)."""
    fs, src_path = resolve(src)
    _, dst_path = resolve(dst)
    fs.copy(src_path, dst_path)


def remove(path: str) -> None:
    fs, fs_path = resolve(path)
    fs.rm_file(fs_path)


def truncate(path: str, size: int) -> None:
    """Cut a file to its first ``size`` bytes, durably (a broker's recovery truncating a torn log
    tail); on object stores the object is written again with those bytes."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        with open(fs_path, "r+b") as f:
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())
    else:
        fs.pipe_file(fs_path, fs.cat_file(fs_path, start=0, end=size) if size else b"")


def set_mtime(path: str, mtime_ms: int) -> None:
    """Set a local file's modification time (object stores keep their own)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        os.utime(fs_path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


TMP = ".tmp"


def write_atomic(path: str, data: bytes) -> None:
    """Kafka's checkpoint discipline: ``<path>.tmp``, fsync, rename over, fsync the dir.
    On an object store one PUT already replaces an object whole."""
    fs, fs_path = resolve(path)
    if not is_local(fs):
        fs.pipe_file(fs_path, data)
        return
    tmp = path + TMP
    write_durable(tmp, data)
    rename(tmp, path)
    fsync_dir(posixpath.dirname(path) or ".")


# -- compare-and-swap on small files (leases, cleaning states, commit records) -----------------
#
# A version is what a later conditional write must match. On an object store it is the
# object's ETag and the write is a conditional PUT (If-None-Match / If-Match), so exactly
# one writer wins. On a local filesystem it is the content's MD5 and the compare-and-write
# happens under an exclusive flock of the parent directory, which every kcompact process
# on the host takes for the same purpose.


@contextlib.contextmanager
def _dir_flock(fs_path: str) -> Iterator[None]:
    fd = os.open(posixpath.dirname(fs_path) or ".", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _read_local(fs_path: str) -> tuple[bytes, str] | None:
    try:
        with open(fs_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return data, hashlib.md5(data).hexdigest()


def _local_version(fs_path: str) -> str | None:
    found = _read_local(fs_path)
    return found[1] if found else None


def _precondition_failed(exc: OSError) -> bool:
    """s3fs raises HTTP 412 as a plain EINVAL OSError; the botocore error is its cause."""
    cause = getattr(exc.__cause__, "response", None) or {}
    return exc.errno == errno.EINVAL and cause.get("Error", {}).get("Code") in ("PreconditionFailed", "412")


def read_versioned(path: str) -> tuple[bytes, str] | None:
    """A small file's bytes and version, or None when it does not exist."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        return _read_local(fs_path)
    while True:  # the ETag before and after the read agree: the bytes are that version's
        try:
            before = fs.info(fs_path, refresh=True)["ETag"]
            data = fs.cat_file(fs_path)
            after = fs.info(fs_path, refresh=True)["ETag"]
        except FileNotFoundError:
            return None
        if before == after:
            return data, after.strip('"')


def write_if(path: str, data: bytes, version: str | None) -> bool:
    """Write ``data`` only if the file is still at ``version`` (None: only if it does not
    exist). False when another writer got there first."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        with _dir_flock(fs_path):
            if _local_version(fs_path) != version:
                return False
            write_atomic(path, data)
            return True
    try:
        if version is None:
            fs.pipe_file(fs_path, data, mode="create")
        else:
            fs.pipe_file(fs_path, data, IfMatch=f'"{version}"')
    except FileExistsError:
        return False
    except OSError as exc:
        if _precondition_failed(exc) or (isinstance(exc, FileNotFoundError) and version is not None):
            return False  # another writer's version, or deleted meanwhile
        raise
    finally:
        fs.invalidate_cache(fs_path)
    return True


def remove_if(path: str, version: str) -> bool:
    """Delete the file only if it is still at ``version``."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        with _dir_flock(fs_path):
            if _local_version(fs_path) != version:
                return False
            os.remove(fs_path)
            return True
    bucket, key, _ = fs.split_path(fs_path)
    try:
        fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=f'"{version}"')
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or _precondition_failed(exc):
            return False
        raise
    finally:
        fs.invalidate_cache(fs_path)
    return True


# -- the broker's log-dir lock -------------------------------------------------------------------

BROKER_LOCK = ".lock"


class LogDirBusy(OSError):
    """Another process (a Kafka broker, or another kcompact job) holds the log dir's ``.lock``."""

    def __str__(self) -> str:  # the sentence alone: no errno, no repeated path
        return self.strerror or super().__str__()


def _lock_holder(fd: int) -> int | None:
    """The pid holding a conflicting POSIX lock on ``fd`` (F_GETLK), None if unknown."""
    import struct

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
_HELD: dict[str, list] = {}  # lock file -> [fd, holders]
_HELD_GUARD = __import__("threading").Lock()


class LogDirLock:
    """The OS lock a Kafka broker takes on ``<log dir>/.lock`` (Java's FileChannel.tryLock: a
    POSIX record lock), held by a job for as long as it may change the log dir, so a broker
    cannot start on it meanwhile and a second job cannot touch it. Re-entrant within a process
    (the command line and the job it runs both hold it). A no-op on object stores, where no
    broker runs and leases alone keep jobs apart."""

    def __init__(self, log_dir: str, create: bool = True):
        self.log_dir = log_dir
        self.create = create  # False (a dry run): a missing .lock is not created, nothing is held
        self._path: str | None = None

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
            if not self.create and not os.path.exists(path):
                return self
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if self.create else 0), 0o644)
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
            _HELD[path] = [fd, 1]
            self._path = path
        return self

    def __exit__(self, *exc) -> None:
        if self._path is None:
            return
        with _HELD_GUARD:
            entry = _HELD[self._path]
            entry[1] -= 1
            if entry[1] == 0:
                os.close(entry[0])  # closing releases the lock
                del _HELD[self._path]
        self._path = None
