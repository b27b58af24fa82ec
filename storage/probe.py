"""Whether an object store honours conditional writes, asked once per store and process.

The commit protocol (operations/s3commit.py) and every compare-and-swap (storage/cas.py) rely on
a PUT being refused (412) when its condition does not hold: ``If-None-Match: *`` creates a commit
record, a lease or a state only where none exists, ``If-Match: <etag>`` moves one only from the
version read. A store that ignores either header writes anyway: two writers would both win and a
commit race would go unnoticed. So every step that changes a log dir on an object store asks
first (``require``), and both conditions are asked: a store may honour one and not the other.

Both questions are put to one empty object at the log dir root, ``kcompact-probe``, made by the
first probe of that log dir and kept: a create-only PUT of it must be refused (it exists), and so
must a PUT with an ETag no object has. On a conforming store that is two requests, and nothing is
written; the first probe of a log dir makes the object, and asks If-None-Match once more. A store
that ignores a condition only rewrites the object with the same empty body, which is then
deleted, and the store refused (``errors.NoConditionalWrites``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from kcompact.errors import NoConditionalWrites
from kcompact.storage import objects
from kcompact.storage.cas import _precondition_failed
from kcompact.storage.failures import typed
from kcompact.storage.paths import is_local, resolve

PROBE = "kcompact-probe"
_NO_SUCH_ETAG = '"00000000000000000000000000000000"'
_answers: dict[tuple, str | None] = {}
_lock = threading.Lock()


def _store(fs, bucket: str) -> tuple:
    """What identifies one store: its endpoint and the bucket (buckets of one store may differ)."""
    kwargs = getattr(fs, "client_kwargs", None) or {}
    return type(fs).__name__, str(kwargs.get("endpoint_url") or getattr(fs, "endpoint_url", "") or ""), bucket


def require(log_dirs: Iterable[str]) -> None:
    """Raise ``NoConditionalWrites`` for the first log dir whose object store ignores a
    conditional write (``conditional_writes``); local paths pass."""
    for path in log_dirs:
        why = conditional_writes(path)
        if why is not None:
            raise NoConditionalWrites(f"{path}: {why}")


@typed
def conditional_writes(log_dir: str) -> str | None:
    """Why the object store of ``log_dir`` cannot take kcompact's commits (None: it can, or the
    path is local). Two requests per store and process (three at a log dir's first probe); the
    answer is kept."""
    fs, fs_path = resolve(log_dir)
    if is_local(fs):
        return None
    bucket = fs_path.split("/", 1)[0]
    key = _store(fs, bucket)
    with _lock:
        if key in _answers:
            return _answers[key]
        _answers[key] = answer = _ask(fs, fs_path.rstrip("/"))
    return answer


def _refused(fs, path: str, **condition: str) -> bool:
    """Whether an empty PUT of ``path`` under ``condition`` was refused."""
    try:
        objects.put(fs, path, b"", **condition)
    except (FileExistsError, FileNotFoundError):
        return True  # s3fs's names for 412 on a create-only PUT, and for S3's 404 on If-Match of no object
    except OSError as exc:
        if _precondition_failed(exc):
            return True
        raise
    return False


def _ask(fs, fs_path: str) -> str | None:
    probe = f"{fs_path}/{PROBE}"
    ignored = []
    made = not _refused(fs, probe, IfNoneMatch="*")  # refused: the object exists, and the store checked
    if not _refused(fs, probe, IfMatch=_NO_SUCH_ETAG):
        ignored.append("If-Match of an ETag the object does not have")
    if made and not _refused(fs, probe, IfNoneMatch="*"):  # new, or the condition ignored: it exists now
        ignored.append("If-None-Match: * on an object that exists")
    if not ignored:
        return None
    objects.delete(fs, probe)
    endpoint = _store(fs, "")[1] or "the object store"
    return (f"{endpoint} ignores conditional writes: a PUT with {' and a PUT with '.join(ignored)} was written "
            "rather than refused (412 Precondition Failed). kcompact's commits on an object store need "
            "If-None-Match: * and If-Match on PUT, or two jobs could both win one commit; the log dir was "
            "left as it was (see docs/deployment.md, \"S3-compatible stores\")")
