"""The one seam between this product and storage.

Every read, listing, rename and delete goes through this package, so a local path and an
``s3://`` URL work alike (fsspec resolves the filesystem). The byte formats in
``readers``/``writers`` never import it: they take bytes and file objects. The primitives that
change files are defined here, in one module, and call each other through its namespace (the
crash tests wrap them there); ``paths``, ``direct``, ``cas`` and ``lock`` hold the rest, and
their public names are this package's too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import shutil
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import BinaryIO

# fsspec warns on its import of an FSSPEC_<PROTOCOL> variable it ignores: the command line says
# what is wrong with it in its own line (failures.environment_problem), before any work
warnings.filterwarnings("ignore", message="Ignoring environment variable FSSPEC_", category=UserWarning)
import fsspec

from kcompact.storage import objects, ownership
from kcompact.storage.cas import read_versioned, remove_if, remove_if_each, write_if, write_if_each, write_if_many
from kcompact.storage.direct import DIRECT_BLOCK, DIRECT_BUFFER, DirectFile
from kcompact.storage.failures import describe_failure, environment_problem, raising_typed, typed
from kcompact.storage.lock import BROKER_LOCK, HeldLogDirs, LogDirLock, held_locks, holds_lock
from kcompact.storage.paths import FileInfo, absolute, identity, is_local, is_local_path, join, resolve, url

__all__ = [
    "BROKER_LOCK",
    "DIRECT_BLOCK",
    "DIRECT_BUFFER",
    "TMP",
    "DirectFile",
    "FileInfo",
    "HeldLogDirs",
    "LogDirLock",
    "absolute",
    "copy",
    "copy_many",
    "create_durable",
    "describe_error",
    "describe_failure",
    "environment_problem",
    "exists",
    "fsync_dir",
    "fsync_dirs",
    "fsync_files",
    "held_locks",
    "holds_lock",
    "identity",
    "info",
    "is_local",
    "is_local_path",
    "join",
    "kind",
    "list_dir",
    "list_tree",
    "map_in_flight",
    "on_threads",
    "makedirs",
    "open_read",
    "read_bytes",
    "read_range",
    "read_versioned",
    "remove",
    "remove_if",
    "remove_if_each",
    "remove_many",
    "remove_tree",
    "rename",
    "resolve",
    "set_mtime",
    "syncfs",
    "truncate",
    "url",
    "write_atomic",
    "write_durable",
    "write_file",
    "write_if",
    "write_if_each",
    "write_if_many",
]


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


@typed
def list_dir(path: str) -> tuple[list[FileInfo], list[str]]:
    """Files (with size and mtime) and sub-directory paths directly inside ``path``."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        try:
            return _list_local(fs_path)
        except NotADirectoryError:
            pass  # fsspec lists a file as itself
    files, dirs = [], []
    with _naming(path, fs_path):
        listed = fs.ls(fs_path, detail=True)
    for info in listed:
        if info["type"] == "directory":
            dirs.append(url(fs, info["name"]))
        else:
            files.append(_file_info(fs, info))
    return files, dirs


IN_FLIGHT = 8  # units of work on an object store a thread pool keeps going at once (``map_in_flight``)


def on_threads(function, items: list, threads: int) -> list:
    """``function`` of each item, in order, on at most ``threads`` threads (one: one after another,
    on this one)."""
    if threads <= 1 or len(items) < 2:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(function, items))


def map_in_flight(function, items: list, path: str) -> list:
    """``function`` of each item, in order. When ``path`` is on an object store, ``IN_FLIGHT`` at
    once: each spends most of its time waiting on the store's answers, not on a core. Locally one
    after another."""
    return on_threads(function, items, 1 if is_local_path(path) else IN_FLIGHT)


@typed
def list_tree(path: str) -> dict[str, list[FileInfo]]:
    """The files of ``path`` and of each directory directly inside it, by directory (as
    ``list_dir`` gives them; a directory with no file is left out). On an object store one
    listing of every key under the prefix, 1,000 keys a request, however many directories."""
    fs, fs_path = resolve(path)
    root = fs_path.rstrip("/")
    if is_local(fs):
        files, dirs = list_dir(path)
        out = {url(fs, root): files} if files else {}
        for sub in dirs:
            try:
                found = _list_local(sub)[0]
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone since the first listing
            if found:
                out[sub] = found
        return out
    with _naming(path, fs_path):
        listed = fs.find(root, detail=True)
    out: dict[str, list[FileInfo]] = {}
    for name, found in sorted(listed.items()):
        parent = posixpath.dirname(name)
        if found.get("type") != "directory" and (parent == root or posixpath.dirname(parent) == root):
            out.setdefault(url(fs, parent), []).append(_file_info(fs, found))
    return out


def _list_local(fs_path: str) -> tuple[list[FileInfo], list[str]]:
    """LocalFileSystem.ls(detail=True) as list_dir reads it, without building its dict per entry
    (much of the cost of listing a partition dir). Same rules: a symlink is a file of its target's
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


@typed
def info(path: str) -> FileInfo:
    """A file's size and mtime (on an object store one HEAD: no LIST when there is no such object)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        return _file_info(fs, fs.info(fs_path))
    with _naming(path, fs_path):
        found = objects.head(fs, fs_path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
    return FileInfo(path, int(found["ContentLength"]), _mtime_ms(found))


@typed
def exists(path: str) -> bool:
    fs, fs_path = resolve(path)
    return fs.exists(fs_path)


@typed
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
    the error does not, and gives an object's ``bucket/key`` its URL (``s3://bucket/key``)."""
    first = str(exc.args[0]) if exc.args else ""
    names_a_key = exc.strerror is None and bool(first) and " " not in first
    own = exc.filename or (first if names_a_key else None)
    where = path if own is None else _as_url(str(own), path)
    reason = exc.strerror or (None if names_a_key else first)
    said = next((text for kind, text in _REASONS.items() if isinstance(exc, kind)), "I/O error")
    reason = reason[:1].lower() + reason[1:] if reason else said
    if isinstance(exc, FileNotFoundError) and where is not None and "://" in str(where):
        reason = _missing_on_object_store(str(where), reason)
    return f"{where}: {reason}" if where is not None else reason


def _as_url(name: str, path: str | None) -> str:
    """An object's name as s3fs says it (``bucket/key``) as the URL ``path`` is written in, when
    ``path`` is a URL of the same bucket; any other name as it is."""
    if path is None or "://" not in path or "://" in name:
        return name
    protocol, _, rest = path.partition("://")
    return f"{protocol}://{name}" if name.split("/", 1)[0] == rest.split("/", 1)[0] else name


@contextlib.contextmanager
def _naming(path: str, fs_path: str) -> Iterator[None]:
    """An object store's error names the URL read, as a local file's error names its path: s3fs
    names ``bucket/key`` or nothing (``PermissionError('Access Denied')``), and an error raised in
    a Spark task reaches the report with no other trace of the object it was about."""
    with raising_typed():
        try:
            yield
        except OSError as exc:
            if exc.filename is None or exc.filename == fs_path:
                exc.filename = path
            raise


class _NamedFile:
    """An object store's file open for reading, its errors naming its URL (``_naming``)."""

    def __init__(self, f, path: str, fs_path: str):
        self._f, self._path, self._fs_path = f, path, fs_path

    def __getattr__(self, name: str):
        return getattr(self._f, name)

    def __enter__(self) -> _NamedFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self._f.close()

    def read(self, *args) -> bytes:
        with _naming(self._path, self._fs_path):
            return self._f.read(*args)

    def readinto(self, buffer) -> int:
        with _naming(self._path, self._fs_path):
            return self._f.readinto(buffer)

    def seek(self, *args) -> int:
        with _naming(self._path, self._fs_path):
            return self._f.seek(*args)


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


@typed
def open_read(path: str, size: int | None = None):
    """A seekable binary file object; callers read it in bounded chunks. ``size``: the file's size
    as listed (an object store is then not asked for it)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        return open(fs_path, "rb")  # fsspec's LocalFileOpener only wraps this, and costs more
    if size is None:
        size = info(path).size
    return _NamedFile(objects.RangedReader(fs, fs_path, size), path, fs_path)


@typed
def read_bytes(path: str) -> bytes:
    fs, fs_path = resolve(path)
    with _naming(path, fs_path):
        return fs.cat_file(fs_path) if is_local(fs) else objects.get(fs, fs_path)[0]


@typed
def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file (``end`` not past its size), without reading the rest."""
    fs, fs_path = resolve(path)
    with _naming(path, fs_path):
        return fs.cat_file(fs_path, start=start, end=end) if is_local(fs) else objects.get(fs, fs_path, start, end)[0]


@typed
def makedirs(path: str) -> None:
    """The directory and its missing parents; local ones get their parent's owner and bits."""
    fs, fs_path = resolve(path)
    if not is_local(fs):
        fs.makedirs(fs_path, exist_ok=True)
        return
    missing = []
    at = fs_path.rstrip("/")
    while at and not os.path.isdir(at):
        missing.append(at)
        at = posixpath.dirname(at)
    for directory in reversed(missing):
        owner = ownership.for_dir(directory)
        os.makedirs(directory, exist_ok=True)
        ownership.give_path(directory, owner)


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
            failed[path] = exc
    return failed


@contextlib.contextmanager
def create_durable(path: str, direct: bool = False) -> Iterator[BinaryIO]:
    """A new file to stream into; on a clean exit it is flushed and fsynced (locally) or
    completed (object stores). A failure leaves a partial file for the caller to remove.
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
                    os.fsync(fd)
                return
        if is_local(fs):
            with open(fs_path, "wb", buffering=DIRECT_BUFFER) as f:  # as DirectFile: few large writes
                ownership.give(f.fileno(), owner)
                yield f
                f.flush()
                os.fsync(f.fileno())
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


@typed
def rename(src: str, dst: str) -> None:
    """Atomic replace on a local filesystem; a copy-then-delete on object stores."""
    fs, src_path = resolve(src)
    _, dst_path = resolve(dst)
    if is_local(fs):
        os.replace(src_path, dst_path)
    else:
        fs.mv(src_path, dst_path)


@typed
def copy(src: str, dst: str) -> None:
    """Copy one file; on object stores a server-side copy (no bytes through this process)."""
    fs, src_path = resolve(src)
    _, dst_path = resolve(dst)
    if is_local(fs):
        owner = ownership.for_file(dst_path)
        fs.copy(src_path, dst_path)
        ownership.give_path(dst_path, owner)
        return
    with _naming(src, src_path):
        objects.copy(fs, src_path, dst_path)


@typed
def copy_many(pairs: list[tuple[str, str]]) -> None:
    """``copy`` of each (source, destination); on an object store several at once."""
    if not pairs:
        return
    fs, _ = resolve(pairs[0][0])
    if is_local(fs):
        for src, dst in pairs:
            copy(src, dst)  # by its name here, where the crash tests wrap it
        return
    objects.copy_many(fs, [(resolve(src)[1], resolve(dst)[1]) for src, dst in pairs])


@typed
def remove(path: str) -> None:
    fs, fs_path = resolve(path)
    fs.rm_file(fs_path)


@typed
def remove_tree(path: str) -> None:
    """Remove a directory and all it holds (on an object store every key under the prefix); one
    that is not there is no error."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        shutil.rmtree(fs_path, ignore_errors=True)
        return
    with contextlib.suppress(FileNotFoundError):
        fs.rm(fs_path.rstrip("/"), recursive=True)


@typed
def remove_many(paths: list[str]) -> None:
    """Remove files, those already gone included; on an object store in batched deletes."""
    if not paths:
        return
    fs, _ = resolve(paths[0])
    if not is_local(fs):
        objects.delete_many(fs, [resolve(path)[1] for path in paths])
        return
    for path in paths:
        try:
            remove(path)  # by its name here, where the crash tests wrap it
        except FileNotFoundError:
            pass


@typed
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


@typed
def set_mtime(path: str, mtime_ms: int) -> None:
    """Set a local file's modification time (object stores keep their own)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        os.utime(fs_path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


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
    rename(tmp, path)
    fsync_dir(posixpath.dirname(path) or ".")


