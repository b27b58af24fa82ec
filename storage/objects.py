"""Object-store requests, one request each, where fsspec's generic calls would send more.

s3fs asks the store for an object's size before reading it whole (a HEAD before the GET), for
its size before a copy, and for the prefix when a HEAD finds nothing (a LIST, to tell a missing
key from a directory); it reads an ETag with a HEAD of its own. A store charges for and throttles
every request, and a log dir's partitions are many: here a read is one GET that also returns the
ETag, a conditional write one PUT that returns the new ETag, a copy one COPY, a missing key one
404, and deletes go 1,000 keys to a request. Each call goes through s3fs's ``_call_s3``, so a
throttled or failed request is retried with backoff as every other s3fs request is.

``RangedReader`` reads an object whose size the listing gave, in ranged GETs of at least
``PART`` bytes, several at once for a large read, and the next range ahead while a sequential
reader works on the one it has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno

import fsspec.asyn

PART = 8 << 20  # a ranged GET of a large read: big enough that its latency is a small share
PARALLEL = 4  # ranged GETs one reader has in flight at once, read-ahead included
DELETE_BATCH = 1000  # the most keys one DeleteObjects request takes


def _run(fs, coroutine):
    return fsspec.asyn.sync(fs.loop, lambda: coroutine)


def _call(fs, method: str, **kwargs) -> dict:
    """One request through the filesystem's ``_call_s3`` (s3fs's class-level ``call_s3`` would
    pass by a subclass's)."""
    return _run(fs, fs._call_s3(method, **kwargs))


async def _get(fs, bucket: str, key: str, start: int | None, end: int | None) -> tuple[bytes, str]:
    extra = {"Range": f"bytes={start}-{end - 1}"} if start is not None else {}
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **extra)
    body = response["Body"]
    try:
        return await body.read(), response["ETag"].strip('"')
    finally:
        body.close()


def get(fs, fs_path: str, start: int | None = None, end: int | None = None) -> tuple[bytes, str]:
    """An object's bytes (``[start, end)`` when given; ``end`` not past the object's size) and its
    ETag, in one GET. FileNotFoundError when there is no such object."""
    bucket, key, _ = fs.split_path(fs_path)
    if start is not None and end <= start:
        return b"", ""
    return _run(fs, _get(fs, bucket, key, start, end))


def put(fs, fs_path: str, data: bytes, **conditions: str) -> str:
    """Write an object in one PUT (``IfNoneMatch="*"`` or ``IfMatch=etag``); its new ETag."""
    bucket, key, _ = fs.split_path(fs_path)
    response = _call(fs, "put_object", Bucket=bucket, Key=key, Body=data, **conditions)
    return response["ETag"].strip('"')


def copy(fs, src: str, dst: str) -> None:
    """A server-side copy in one request: a segment file is far below the 5 GB a single COPY
    takes (Kafka caps segment.bytes at 2 GiB), so no HEAD for the size."""
    src_bucket, src_key, _ = fs.split_path(src)
    dst_bucket, dst_key, _ = fs.split_path(dst)
    _call(fs, "copy_object", Bucket=dst_bucket, Key=dst_key, CopySource={"Bucket": src_bucket, "Key": src_key})


def copy_many(fs, pairs: list[tuple[str, str]]) -> None:
    """Server-side copies (``copy``), ``PARALLEL`` in flight at once; the first failure raised
    once every copy ended."""
    async def copies():
        gate = asyncio.Semaphore(PARALLEL)

        async def one(src: str, dst: str):
            src_bucket, src_key, _ = fs.split_path(src)
            dst_bucket, dst_key, _ = fs.split_path(dst)
            async with gate:
                await fs._call_s3("copy_object", Bucket=dst_bucket, Key=dst_key,
                                  CopySource={"Bucket": src_bucket, "Key": src_key})

        done = await asyncio.gather(*(one(src, dst) for src, dst in pairs), return_exceptions=True)
        failed = [result for result in done if isinstance(result, BaseException)]
        if failed:
            raise failed[0]

    _run(fs, copies())


def head(fs, fs_path: str) -> dict | None:
    """An object's HEAD (``ContentLength``, ``ETag``, ``LastModified``), or None when there is no
    such object: one request, no LIST to ask whether a prefix of that name has objects."""
    bucket, key, _ = fs.split_path(fs_path)
    try:
        return _call(fs, "head_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None


def delete(fs, fs_path: str, **conditions: str) -> None:
    """Delete one object (``IfMatch=etag``: only at that version)."""
    bucket, key, _ = fs.split_path(fs_path)
    _call(fs, "delete_object", Bucket=bucket, Key=key, **conditions)


def delete_many(fs, fs_paths: list[str]) -> None:
    """Delete objects, up to ``DELETE_BATCH`` keys a request; a key already gone is no error."""
    by_bucket: dict[str, list[str]] = {}
    for fs_path in fs_paths:
        bucket, key, _ = fs.split_path(fs_path)
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
        for at in range(0, len(keys), DELETE_BATCH):
            batch = keys[at:at + DELETE_BATCH]
            response = _call(fs, "delete_objects", Bucket=bucket,
                                  Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
            failed = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if failed:
                first = failed[0]
                raise OSError(errno.EIO, f"{first.get('Code')}: {first.get('Message')} "
                              f"({len(failed)} of {len(batch)} keys not deleted)", f"{bucket}/{first.get('Key')}")


class RangedReader:
    """A read-only, seekable file over one object of known size. A read of ``n`` bytes is one
    ranged GET, or ``n / PART`` of them at once; after a read of at least ``PART`` bytes that
    did not reach the end, the next ``n`` bytes are fetched ahead (a sequential reader's next
    read), at most ``PARALLEL`` GETs in flight."""

    def __init__(self, fs, fs_path: str, size: int):
        self._fs, self._path, self.size = fs, fs_path, size
        self._bucket, self._key, _ = fs.split_path(fs_path)
        self._pos = 0
        self._ahead: tuple[int, int, list[concurrent.futures.Future]] | None = None

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self._pos + n)
        if end <= self._pos:
            return b""
        data = self._fetch(self._pos, end)
        self._pos = end
        if len(data) >= PART and end < self.size:
            ahead_end = min(self.size, end + min(len(data), PART * PARALLEL))
            self._ahead = (end, ahead_end, self._submit(end, ahead_end))
        return data

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._drop_ahead()

    def __enter__(self) -> RangedReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _submit(self, start: int, end: int) -> list[concurrent.futures.Future]:
        parts = [(at, min(end, at + PART)) for at in range(start, end, PART)]
        if len(parts) > 1 and parts[-1][1] - parts[-1][0] < PART // 2:  # no small last GET
            parts[-2:] = [(parts[-2][0], end)]
        return [asyncio.run_coroutine_threadsafe(_get(self._fs, self._bucket, self._key, a, b), self._fs.loop)
                for a, b in parts]

    def _fetch(self, start: int, end: int) -> bytes:
        ahead, self._ahead = self._ahead, None
        parts: list[bytes] = []
        if ahead is not None and ahead[0] == start:
            parts = [f.result()[0] for f in ahead[2]]
            start = ahead[1]
            if start >= end:
                return b"".join(parts)[:end - ahead[0]]
        elif ahead is not None:
            _drop(ahead[2])
        for at in range(start, end, PART * PARALLEL):  # at most PARALLEL in flight
            parts += [f.result()[0] for f in self._submit(at, min(end, at + PART * PARALLEL))]
        return b"".join(parts)

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            _drop(self._ahead[2])
            self._ahead = None


def _drop(futures: list[concurrent.futures.Future]) -> None:
    for future in futures:
        future.cancel()
