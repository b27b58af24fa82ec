"""Changing what is there: directories made, files renamed, copied, removed, truncated, their
mtimes set. A primitive that another one repeats is called by its name in this module, where the
crash tests wrap it."""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil

from kcompact.storage import objects, ownership
from kcompact.storage.failures import naming, typed
from kcompact.storage.paths import is_local, resolve


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
    with naming(src, src_path):
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
