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
from concurrent.futures import ThreadPoolExecutor

from kcompact.storage import changes, durable, objects, ownership
from kcompact.storage.failures import typed
from kcompact.storage.paths import is_local, resolve

BATCH = 256  # files of one directory written under one hold of its flock (``write_if_each``)


@contextlib.contextmanager
def _dir_flock(fs_path: str) -> Iterator[None]:
    fd = os.open(posixpath.dirname(fs_path) or ".", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _read_local(fs_path: str) -> tuple[bytes, str, int] | None:
    """A local file's bytes, version and modification time (ms), the time taken from the
    descriptor the bytes were read through."""
    try:
        with open(fs_path, "rb") as f:
            data, modified = f.read(), os.fstat(f.fileno()).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return None
    return data, hashlib.md5(data).hexdigest(), modified


def _local_version(fs_path: str) -> str | None:
    found = _read_local(fs_path)
    return found[1] if found else None


def _precondition_failed(exc: OSError) -> bool:
    """s3fs raises HTTP 412 as a plain EINVAL OSError; the botocore error is its cause."""
    cause = getattr(exc.__cause__, "response", None) or {}
    return exc.errno == errno.EINVAL and cause.get("Error", {}).get("Code") in (
        "PreconditionFailed",
        "412",
        "ConditionalRequestConflict",
    )


@typed
def read_versioned(path: str) -> tuple[bytes, str] | None:
    """A small file's bytes and version, or None when it does not exist (on an object store one
    GET, which returns the bytes and the ETag of the same version)."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        found = _read_local(fs_path)
        return None if found is None else found[:2]
    try:
        return objects.get(fs, fs_path)
    except FileNotFoundError:
        return None


@typed
def read_stamped(path: str) -> tuple[bytes, str, int | None] | None:
    """``read_versioned``'s bytes and version with, locally, the file's modification time in ms, taken
    from the descriptor the bytes were read through (None on an object store, whose objects'
    times are the store's); None when the file does not exist."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        return _read_local(fs_path)
    found = read_versioned(path)
    return None if found is None else (*found, None)


@typed
def touch_if_each(items: list[tuple[str, str]], mtime_ms: int) -> list[bool | OSError]:
    """Local files only: each (path, version) still at that version given ``mtime_ms`` as its
    modification time, its bytes untouched (so its version stays): True where so, False where it
    is gone or at another version, or the error of that one file. The version is read through the
    descriptor the time is set through, so the time is that version's; no flock: no byte changes."""
    ns = mtime_ms * 1_000_000
    out: list[bool | OSError] = []
    for path, version in items:
        fs_path = resolve(path)[1]
        try:
            with open(fs_path, "rb") as f:
                if hashlib.md5(f.read()).hexdigest() != version:
                    out.append(False)
                    continue
                os.utime(f.fileno(), ns=(ns, ns))
            out.append(True)
        except FileNotFoundError:
            out.append(False)
        except OSError as exc:
            if exc.filename is None:
                exc.filename = path
            out.append(exc)
    return out


@typed
def write_if(path: str, data: bytes, version: str | None) -> str | None:
    """Write ``data`` only if the file is still at ``version`` (None: only if it does not
    exist); the new version, or None when another writer got there first.

    A conditional PUT retried after a lost answer (a timeout, a dropped connection) finds its own
    first attempt there and fails: a write that meets its own bytes has won."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        with _dir_flock(fs_path):
            if _local_version(fs_path) != version:
                return None
            durable.write_atomic(path, data)  # through its module, where the crash tests wrap it
            return hashlib.md5(data).hexdigest()
    try:
        return objects.put(
            fs, fs_path, data, **({"IfNoneMatch": "*"} if version is None else {"IfMatch": f'"{version}"'})
        )
    except OSError as exc:
        if not (_precondition_failed(exc) or isinstance(exc, (FileExistsError, FileNotFoundError))):
            raise
    found = read_versioned(path)  # another writer's version, deleted meanwhile, or our own retried write
    return found[1] if found is not None and found[0] == data else None


@typed
def write_if_many(items: list[tuple[str, bytes, str | None]]) -> list[str | None]:
    """``write_if`` of each (path, data, version), raising the first failure (``write_if_each``)."""
    written = write_if_each(items)
    for outcome in written:
        if isinstance(outcome, OSError):
            raise outcome
    return written  # type: ignore[return-value]


@typed
def write_if_each(items: list[tuple[str, bytes, str | None]]) -> list[str | OSError | None]:
    """``write_if`` of each (path, data, version): the new version, None where another writer got
    there first, or the error that stopped that one file (the others go on). On an object store
    each is its own conditional PUT, several at once. Locally the files of one directory, up to
    ``BATCH`` at a time, share one compare-and-write under its flock: ``write_atomic``'s steps,
    each for all of them (``.tmp`` files written, made durable together, renamed over, the
    directory fsynced once); the owner and bits of a new file are found once per batch and kind."""
    if not items:
        return []
    fs, _ = resolve(items[0][0])
    if not is_local(fs):
        def one(item):
            try:
                return write_if(*item)
            except OSError as exc:
                return exc

        with ThreadPoolExecutor(min(objects.PARALLEL, len(items))) as pool:
            return list(pool.map(one, items))
    out: list[str | OSError | None] = [None] * len(items)
    by_dir: dict[str, list[int]] = {}
    for i, (path, _, _) in enumerate(items):
        by_dir.setdefault(posixpath.dirname(path), []).append(i)
    for directory, indices in by_dir.items():
        for start in range(0, len(indices), BATCH):  # the flock not held for long: others' changes wait on it
            with _dir_flock(resolve(items[indices[start]][0])[1]):
                _write_dir(items, indices[start:start + BATCH], directory, out)
    return out


def _write_dir(items, indices: list[int], directory: str, out: list) -> None:
    """``write_if_each``'s local writes in one ``directory``, under its flock: every file that is
    still at its version written to its ``.tmp``, all of them made durable together
    (``durable.fsync_files``), each renamed over, then the directory fsynced once."""
    owners: dict[str, ownership.Owner] = {}
    written = []
    for i in indices:
        path, data, version = items[i]
        fs_path = resolve(path)[1]
        tmp = path + durable.TMP
        try:
            if _local_version(fs_path) != version:
                continue  # out[i] stays None: another writer's
            owner = None
            if version is None:  # a new file: its directory's owner and its kind's bits, found once
                kind = ownership.kind(fs_path)
                owner = owners.get(kind) or owners.setdefault(kind, ownership.for_file(fs_path))
            durable.write_file(tmp, data, owner)  # through its module, where the crash tests wrap it
        except OSError as exc:
            out[i] = exc
            with contextlib.suppress(OSError):
                os.remove(resolve(tmp)[1])
            continue
        written.append(i)
    failed = durable.fsync_files([items[i][0] + durable.TMP for i in written])
    renamed = []
    for i in written:
        path, data, _ = items[i]
        tmp = path + durable.TMP
        try:
            if tmp in failed:
                raise failed[tmp]
            changes.rename(tmp, path)
        except OSError as exc:
            out[i] = exc
            with contextlib.suppress(OSError):
                os.remove(resolve(tmp)[1])
            continue
        out[i] = hashlib.md5(data).hexdigest()
        renamed.append(i)
    if renamed:
        try:
            durable.fsync_dir(directory)
        except OSError as exc:
            for i in renamed:
                out[i] = exc


@typed
def remove_if_each(items: list[tuple[str, str]]) -> list[bool | OSError]:
    """``remove_if`` of each (path, version): True where removed, False where the file was not at
    that version, or the error of that one file; on an object store several conditional deletes
    at once. (Locally an unlink is the cost, flock or none: one at a time.)"""
    if not items:
        return []

    def one(item):
        try:
            return remove_if(*item)  # by its name here, where the crash tests wrap it
        except OSError as exc:
            return exc

    fs, _ = resolve(items[0][0])
    if is_local(fs):
        return [one(item) for item in items]
    with ThreadPoolExecutor(min(objects.PARALLEL, len(items))) as pool:
        return list(pool.map(one, items))


@typed
def remove_if(path: str, version: str) -> bool:
    """Delete the file only if it is still at ``version``."""
    fs, fs_path = resolve(path)
    if is_local(fs):
        with _dir_flock(fs_path):
            if _local_version(fs_path) != version:
                return False
            os.remove(fs_path)
            return True
    try:
        objects.delete(fs, fs_path, IfMatch=f'"{version}"')
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or _precondition_failed(exc):
            return False
        raise
    return True
