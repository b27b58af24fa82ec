"""Durable writes: files written and fsynced, streamed into, replaced atomically (Kafka's
checkpoint discipline), and the fsyncs of files, directories and whole file systems. A primitive
that another one repeats is called by its name in this module, where the crash tests wrap it."""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
from collections.abc import Iterator
from typing import BinaryIO

from kcompact.storage import changes, ownership
from kcompact.storage.direct import DIRECT_BUFFER, DirectFile
from kcompact.storage.failures import raising_typed, typed
from kcompact.storage.paths import is_local, is_local_path, resolve
from kcompact.storage.threads import on_threads


@typed
def write_durable(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` and make it durable before returning (fsync locally)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        owner = ownership.for_file(fs_path)
        try:
            with open(fs_path, "wb") as f:
                ownership.give(f.fileno(), owner)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            if exc.filename is None:  # a full disk's write() names no file
                exc.filename = path
            raise
    else:
        fs.pipe_file(fs_path, data)


@typed
def write_file(path: str, data: bytes, owner: ownership.Owner | None = None) -> None:
    """Write ``data`` to ``path``, not yet durable: the caller makes a batch of such files durable
    together (``fsync_files``) before it relies on them; ``owner``: the file's owner and bits when
    the caller found them already (``ownership.for_file``)."""
    fs, fs_path = resolve(path)
    if not is_local(fs):
        fs.pipe_file(fs_path, data)
        return
    owner = owner or ownership.for_file(fs_path)
    try:
        with open(fs_path, "wb") as f:
            ownership.give(f.fileno(), owner)
            f.write(data)
    except OSError as exc:
        if exc.filename is None:  # a full disk's write() names no file
            exc.filename = path
        raise


def fsync_files(paths: list[str]) -> dict[str, OSError]:
    """Make the bytes of local files just written (``write_file``) durable: from ``SYNCFS_FROM``
    files of one file system on, one ``syncfs`` of it (as ``fsync_dirs``); else, or when it fails,
    each file fsynced. Returns the error of each file whose fsync failed; the others are durable."""
    local = [path for path in paths if is_local_path(path)]
    if not local:
        return {}
    if _synced_at_once(local):
        return {}
    failed: dict[str, OSError] = {}
    for path in local:
        try:
            fd = os.open(resolve(path)[1], os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.filename is None:  # fsync(fd) names no file
                exc.filename = path
            failed[path] = exc
    return failed


@contextlib.contextmanager
def create_file(path: str, direct: bool = False) -> Iterator[BinaryIO]:
    """A new file to stream into, flushed (locally) or completed (object stores) on a clean exit,
    not fsynced: the caller makes a batch of such files durable together (``fsync_files``) before
    it relies on them. A failure leaves a partial file for the caller to remove.
    ``direct``: a local file goes past the page cache where its file system allows (``DirectFile``)."""
    with raising_typed():
        fs, fs_path = resolve(path)
        owner = ownership.for_file(fs_path) if is_local(fs) else None
        if is_local(fs) and direct:
            try:
                fd = os.open(fs_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o666)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: this file system takes no O_DIRECT
                    raise
            else:
                ownership.give(fd, owner)
                with DirectFile(fd) as f:
                    yield f
                    f.flush()
                return
        if is_local(fs):
            with open(fs_path, "wb", buffering=DIRECT_BUFFER) as f:  # as DirectFile: few large writes
                ownership.give(f.fileno(), owner)
                yield f
                f.flush()
        else:
            with fs.open(fs_path, "wb") as f:
                yield f


@typed
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


SYNCFS_FROM = 16  # dirs of one file system from which one syncfs(2) replaces their fsyncs (``fsync_dirs``)


def fsync_dirs(paths: list[str], threads: int = 1) -> dict[str, OSError]:
    """Make the renames and creations inside each of ``paths`` durable. From ``SYNCFS_FROM`` local
    dirs of one file system on, one ``syncfs`` of it (Linux 5.8 on reports its write-back errors,
    as fsync does; else, or when it fails, the fsyncs below); otherwise ``fsync_dir`` of each once,
    ``threads`` at once (a journaling file system commits the fsyncs that wait together as one).
    Returns the error of each directory whose fsync failed; the others are durable."""
    unique = list(dict.fromkeys(paths))
    if _synced_at_once(unique):
        return {}
    failed: dict[str, OSError] = {}

    def sync(path: str) -> None:
        try:
            fsync_dir(path)  # by its name here, where the crash tests wrap it
        except OSError as exc:
            failed[path] = exc

    on_threads(sync, unique, threads)
    return failed


def _synced_at_once(paths: list[str]) -> bool:
    """True when one ``syncfs`` made ``paths`` durable: ``SYNCFS_FROM`` or more of one file system;
    False (each path's own fsync then says which failed) when fewer, or when it failed."""
    if len(paths) < SYNCFS_FROM or not _one_file_system(paths):
        return False
    try:
        syncfs(paths[0])  # by its name here, where the crash tests wrap it
        return True
    except OSError:
        return False


def _syncfs_reports_errors() -> bool:
    """Linux from 5.8 on: syncfs(2) returns the file system's write-back errors (before, 0 always)."""
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return False
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


def _one_file_system(paths: list[str]) -> bool:
    """Local directories, all on one file system where syncfs reports errors."""
    if not _syncfs_reports_errors() or not all(is_local_path(path) for path in paths):
        return False
    try:
        return len({os.stat(resolve(path)[1]).st_dev for path in paths}) == 1
    except OSError:
        return False


@typed
def syncfs(path: str) -> None:
    """Write back everything of the local file system holding ``path`` (syncfs(2)): every rename
    and creation on it durable at once."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(resolve(path)[1], os.O_RDONLY)
    try:
        if libc.syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
    finally:
        os.close(fd)


TMP = ".tmp"


@typed
def write_atomic(path: str, data: bytes) -> None:
    """Kafka's checkpoint discipline: ``<path>.tmp``, fsync, rename over, fsync the dir.
    On an object store one PUT already replaces an object whole."""
    fs, fs_path = resolve(path)
    if not is_local(fs):
        fs.pipe_file(fs_path, data)
        return
    tmp = path + TMP
    try:
        write_durable(tmp, data)
    except OSError:  # a full disk, a quota: no half-written .tmp left behind
        with contextlib.suppress(OSError):
            os.remove(resolve(tmp)[1])
        raise
    changes.rename(tmp, path)  # through its module, where the crash tests wrap it
    fsync_dir(posixpath.dirname(path) or ".")


