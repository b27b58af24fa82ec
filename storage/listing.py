"""What is there: the files of a directory or a tree with their sizes and mtimes, one file's,
whether a path exists and what it is."""

from __future__ import annotations

import errno
import os
import posixpath
from datetime import datetime

import fsspec

from kcompact.storage import objects
from kcompact.storage.failures import naming, typed
from kcompact.storage.paths import FileInfo, is_local, resolve, url


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
    with naming(path, fs_path):
        listed = fs.ls(fs_path, detail=True)
    for info in listed:
        if info["type"] == "directory":
            dirs.append(url(fs, info["name"]))
        else:
            files.append(_file_info(fs, info))
    return files, dirs


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
    with naming(path, fs_path):
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
    with naming(path, fs_path):
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
