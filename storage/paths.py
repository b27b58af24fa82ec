"""Paths: which filesystem serves a path (local disk or an object store through fsspec), and
what a listing says about a file."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

import fsspec
from fsspec.implementations.local import LocalFileSystem


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What a listing says about one file: full path, size, modification time."""

    path: str
    size: int
    mtime_ms: int


_LOCAL = LocalFileSystem()  # fsspec's own cached instance: it holds no state of a path


def resolve(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem serving ``path`` and the path as that filesystem names it."""
    if isinstance(path, str) and ":" not in path:
        # A plain local path: what url_to_fs returns, without parsing a URL chain nor asking
        # fsspec's instance cache (a commit resolves tens of paths per partition).
        if path.startswith("/") and os.sep == "/":
            return _LOCAL, path.rstrip("/") or "/"  # LocalFileSystem._strip_protocol of an absolute path
        return _LOCAL, _LOCAL._strip_protocol(path)
    # No listing cache: other processes (executors, other jobs, the broker) change these dirs, and
    # a cached listing would hide their files from exists/info/read for the life of the process.
    fs, fs_path = fsspec.core.url_to_fs(path, use_listings_cache=False)
    return fs, fs_path


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def is_local_path(path: str) -> bool:
    """``path`` is on local disk (else an object store, where renames are copies)."""
    return is_local(resolve(path)[0])


def absolute(path: str) -> str:
    """``path`` as it names the same place from any working directory: a local path made absolute
    (symlinks kept: they are the operator's names), a URL normalized (no ``//`` or ``.``, no
    trailing slash)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        return os.path.abspath(fs_path)
    return url(fs, posixpath.normpath("/" + fs_path).lstrip("/"))


def identity(path: str) -> str:
    """What a directory is, whatever it is called: its real path (local, symlinks followed), its
    normalized URL (object stores)."""
    named = absolute(path)
    return os.path.realpath(named) if is_local_path(named) else named


def join(base: str, *names: str) -> str:
    return posixpath.join(base, *names)


def url(fs: fsspec.AbstractFileSystem, fs_path: str) -> str:
    """The path a user would type for ``fs_path`` on ``fs`` (adds the protocol back)."""
    return fs_path if is_local(fs) else fs.unstrip_protocol(fs_path)
