"""An OSError of storage said as one line a person can act on: the path, then the reason."""

from __future__ import annotations

from kcompact.storage.paths import resolve

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
