"""Compare-and-swap on small files (leases, cleaning states, commit records, checkpoints).

A version is what a later conditional write must match. On an object store it is the
object's ETag and the write is a conditional PUT (If-None-Match / If-Match), so exactly
one writer wins. On a local filesystem it is the content's MD5 and the compare-and-write
happens under an exclusive flock of the parent directory, which every kcompact process
on the host takes for the same purpose.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import posixpath
from collections.abc import Iterator

import storage
from storage.paths import is_local, resolve


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
            storage.write_atomic(path, data)  # through the package, where the crash tests wrap it
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
