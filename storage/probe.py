"""Whether an object store honours conditional writes, asked once per store and process.

The commit protocol (operations/s3commit.py) and every compare-and-swap (storage/cas.py) rely on
a PUT with ``If-None-Match: *`` or ``If-Match: <etag>`` being refused (412) when its condition
does not hold. A store that ignores the header writes anyway: two writers would both win and a
commit race would go unnoticed. So a command that changes a log dir on an object store asks
first, with one request that writes nothing on a store that honours it: a PUT with ``If-Match``
of an ETag no object has, on a key no object has. A conforming store answers 412 (or 404, as
S3 does for If-Match on a missing key); one that ignores conditions creates the object, which is
deleted at once (a second request) and the store refused. ``If-None-Match`` is the older of the
two conditions (S3 took it first): a store that checks If-Match checks it too.
"""

from __future__ import annotations

import threading
import uuid

from kcompact.storage import objects
from kcompact.storage.cas import _precondition_failed
from kcompact.storage.failures import typed
from kcompact.storage.paths import is_local, resolve

_NO_SUCH_ETAG = '"00000000000000000000000000000000"'
_answers: dict[tuple, str | None] = {}
_lock = threading.Lock()


def _store(fs, bucket: str) -> tuple:
    """What identifies one store: its endpoint and the bucket (buckets of one store may differ)."""
    kwargs = getattr(fs, "client_kwargs", None) or {}
    return type(fs).__name__, str(kwargs.get("endpoint_url") or getattr(fs, "endpoint_url", "") or ""), bucket


@typed
def conditional_writes(log_dir: str) -> str | None:
    """Why the object store of ``log_dir`` cannot take kcompact's commits (None: it can, or the
    path is local). At most two requests per store and process; the answer is kept."""
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


def probe_name(nonce: str) -> str:
    """The probe's key at the log dir root: a name of no other object."""
    return f"kcompact-probe.{nonce}.tmp"


def _ask(fs, fs_path: str) -> str | None:
    probe = f"{fs_path}/{probe_name(uuid.uuid4().hex)}"
    try:
        objects.put(fs, probe, b"", IfMatch=_NO_SUCH_ETAG)
    except FileNotFoundError:
        return None  # S3's answer to If-Match on a missing key (404 NoSuchKey)
    except OSError as exc:
        if _precondition_failed(exc):
            return None
        raise
    objects.delete(fs, probe)
    endpoint = _store(fs, "")[1] or "the object store"
    return (f"{endpoint} ignores conditional writes: a PUT with If-Match of an ETag no object has was "
            "written rather than refused (412 Precondition Failed). kcompact's commits on an object store "
            "need If-None-Match: * and If-Match on PUT, or two jobs could both win one commit; "
            "the log dir was left as it was (see docs/deployment.md, \"S3-compatible stores\")")
