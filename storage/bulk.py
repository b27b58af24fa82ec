"""Writing a whole new tree that nobody sees until it is renamed into place (the generator's log
dirs): files written without an fsync each, then one sync of the file system before the rename.

A file's own fsync costs a journal commit (about a millisecond here); a tree of a hundred thousand
files would spend minutes in them. What is written under a name nobody reads needs to be durable
only before it gets its final name, so one ``syncfs`` of the file system holding it does the work
of all of them. Files get the owner and bits ``ownership`` gives any new file; on an object store
each write is one PUT, whole on arrival.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from kcompact.storage import ownership
from kcompact.storage.failures import typed
from kcompact.storage.paths import is_local, resolve


@typed
def write_unsynced(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (locally: owner and bits set on the open file, no fsync)."""
    fs, fs_path = resolve(path)
    if not is_local(fs):
        fs.pipe_file(fs_path, data)
        return
    owner = ownership.for_file(fs_path)
    with open(fs_path, "wb") as f:
        ownership.give(f.fileno(), owner)
        f.write(data)


def _syncfs():
    """libc's ``syncfs``, or None where there is none (then ``os.sync`` does it for every file system)."""
    name = ctypes.util.find_library("c")
    function = getattr(ctypes.CDLL(name, use_errno=True), "syncfs", None) if name else None
    if function is not None:
        function.argtypes = [ctypes.c_int]
    return function


@typed
def sync_tree(path: str) -> None:
    """Make every file written under local ``path`` durable: one ``syncfs`` of its file system
    (no-op on an object store)."""
    fs, fs_path = resolve(path)
    if not is_local(fs):
        return
    function = _syncfs()
    if function is None:
        os.sync()
        return
    fd = os.open(fs_path, os.O_RDONLY)
    try:
        if function(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), fs_path)
    finally:
        os.close(fd)
