"""The one seam between this product and storage.

Every read, listing, rename and delete goes through these functions, so a local
path and an ``s3://`` URL work alike (fsspec resolves the filesystem). The byte
formats in ``readers``/``writers`` never import fsspec: they take file objects.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
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
    fs, fs_path = fsspec.core.url_to_fs(path)
    return fs, fs_path


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


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
def create_durable(path: str) -> Iterator[BinaryIO]:
    """A new file to stream into; on a clean exit it is flushed and fsynced (locally) or
    completed (object stores). A failure leaves a partial file for the caller to remove."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        with open(fs_path, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
    else:
        with fs.open(fs_path, "wb") as f:
            yield f


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


def remove(path: str) -> None:
    fs, fs_path = resolve(path)
    fs.rm_file(fs_path)


def set_mtime(path: str, mtime_ms: int) -> None:
    """Set a local file's modification time (object stores keep their own)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        os.utime(fs_path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def write_atomic(path: str, data: bytes) -> None:
    """Kafka's checkpoint discipline: ``<path>.tmp``, fsync, rename over, fsync the dir."""
    tmp = path + ".tmp"
    write_durable(tmp, data)
    rename(tmp, path)
    fsync_dir(posixpath.dirname(path) or ".")
