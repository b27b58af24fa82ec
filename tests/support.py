"""Builders and readers shared by the tests (fixtures live in conftest.py).

Truth comes from outside the code under test: kafka-python builds and reads
batches, struct/crc32c/zlib build bytes by hand, and Kafka wrote the golden
fixture log dir. The helpers here only patch what a broker patches (base
offset, leader epoch, LogAppendTime) and recompute the CRC with crc32c.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import mmap
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcompact import storage
from kcompact.readers import codecs
from kcompact.readers.records import CONTROL_TYPES, Record
from kcompact.readers.segment import DEFAULT_CHUNK, iter_batches

FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures" / "kafka-written"  # its README says what it is
FIXTURE_INPUT = FIXTURE_DIR / "input"

V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # Kafka's v2 batch header, written out again here
ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, ATTR_CONTROL = 0x08, 0x10, 0x20


# -- our reader -----------------------------------------------------------------------
def read_batches(data: bytes, chunk_size: int = DEFAULT_CHUNK, **kwargs) -> list:
    """Every entry our segment reader finds in ``data``."""
    return list(iter_batches(io.BytesIO(data), "mem.log", chunk_size=chunk_size, **kwargs))


def read_one(data: bytes):
    (batch,) = read_batches(data)
    return batch


# -- kafka-python as the independent reader/builder ------------------------------------
def kp_record(r) -> Record:
    """A kafka-python record as one of ours, for comparisons."""
    return Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))


def kp_batches(data: bytes) -> list:
    """kafka-python's view of a log byte string: every batch, CRC checked."""
    out = []
    for batch in MemoryRecords(bytes(data)):
        assert batch.validate_crc(), f"kafka-python rejects the CRC of {batch}"
        out.append(batch)
    return out


def kp_decode_v2(data: bytes) -> tuple[DefaultRecordBatch, list[Record]]:
    """One v2 batch read by kafka-python (CRC validated) and its records."""
    batch = DefaultRecordBatch(bytes(data))
    assert batch.size_in_bytes == len(data), "batchLength does not cover the batch"
    assert batch.validate_crc(), "kafka-python rejects the CRC"
    return batch, [kp_record(r) for r in batch]


def recompute_crc32c(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


def kp_build(
    records,
    *,
    codec: int = 0,
    base_offset: int = 0,
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    log_append_time: int | None = None,
    extra_attributes: int = 0,
    require_codec: bool = True,
) -> bytes:
    """A v2 batch built by kafka-python's producer-side builder, then given a base
    offset, leader epoch and (optionally) LogAppendTime the way a broker stamps them:
    header fields only, records untouched, CRC-32C recomputed.

    ``records`` hold absolute offsets; kafka-python writes them as deltas. kafka-python sends a
    batch uncompressed when compression does not pay; ``require_codec`` turns that into an error."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for r in records:
        meta = builder.append(r.offset - base_offset, timestamp=r.timestamp, key=r.key, value=r.value,
                              headers=list(r.headers))
        assert meta is not None
    buf = bytearray(builder.build())
    fields = list(V2_HEADER.unpack_from(buf))
    if require_codec:
        assert fields[5] & 0x07 == codec, "kafka-python fell back to no compression: use compressible values"
    fields[0], fields[2] = base_offset, leader_epoch
    fields[5] |= extra_attributes
    if log_append_time is not None:
        fields[5] |= ATTR_LOG_APPEND_TIME
        fields[8] = log_append_time
    V2_HEADER.pack_into(buf, 0, *fields)
    return bytes(recompute_crc32c(buf))


def kp_keyed(first: int, kv: list, ts: int) -> bytes:
    """kafka-python v2 batch at offsets first..; items are keys (value b"v<offset>") or (key, value)."""
    records = []
    for i, item in enumerate(kv):
        key, value = item if isinstance(item, tuple) else (item, b"v%d" % (first + i))
        records.append(Record(first + i, ts, key, value))
    return kp_build(records, base_offset=first)


def hand_varint(value: int) -> bytes:
    """Zigzag LEB128 written out independently of writers.batch.varint."""
    z = (value << 1) ^ (value >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, z = z & 0x7F, z >> 7
        out.append(byte | (0x80 if z else 0))
        if not z:
            return bytes(out)


def hand_v2_batch(
    records_section: bytes,
    *,
    base_offset: int,
    count: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    attributes: int = 0,
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch assembled with struct from an already encoded records section."""
    buf = bytearray(V2_HEADER.pack(
        base_offset, V2_HEADER.size - 12 + len(records_section), leader_epoch, 2, 0, attributes,
        last_offset_delta, first_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ))
    buf += records_section
    return bytes(recompute_crc32c(buf))


def hand_control_batch(
    kind: int, *, offset: int, timestamp: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
    leader_epoch: int = 0,
) -> bytes:
    """A transaction marker exactly as Kafka writes it (EndTransactionMarker): one record,
    key = int16 version 0 + int16 type, value = int16 version 0 + int32 coordinator epoch."""
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = b"\x00" + hand_varint(0) + hand_varint(0) + hand_varint(len(key)) + key + hand_varint(len(value)) + value
    body += hand_varint(0)
    record = hand_varint(len(body)) + body
    return hand_v2_batch(
        record, base_offset=offset, count=1, last_offset_delta=0, first_timestamp=timestamp,
        max_timestamp=timestamp, attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL, leader_epoch=leader_epoch,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
    )


# -- partitions laid out as a broker lays them out ---------------------------------------
TS0 = 1_720_000_000_000
INTERVAL = 200  # index.interval.bytes, small so that segments get several index entries
OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY = struct.Struct(">ii"), struct.Struct(">qi"), struct.Struct(">hqqqq")


def make_batches(first: int, n_batches: int, per_batch: int = 5, codecs: tuple[int, ...] = (0,), **kw) -> list[bytes]:
    """kafka-python batches of ``per_batch`` records from offset ``first``; timestamps grow by 10 ms."""
    out = []
    for b in range(n_batches):
        base = first + b * per_batch
        records = [
            Record(o, TS0 + 10 * o, b"key-%d" % (o % 7), b"value %d " % o * 6) for o in range(base, base + per_batch)
        ]
        out.append(kp_build(records, codec=codecs[b % len(codecs)], base_offset=base, **kw))
    return out


def _v2_fields(data: bytes) -> tuple[int, int]:
    batch = DefaultRecordBatch(data)
    return batch.last_offset, batch.max_timestamp


def broker_indexes(batches: list[bytes], base: int, closed: bool, interval: int = INTERVAL,
                   fields: Callable[[bytes], tuple[int, int]] = _v2_fields) -> tuple[bytes, bytes]:
    """``.index`` and ``.timeindex`` as LogSegment.append builds them. ``fields``: an entry's (last
    offset, max timestamp), read by kafka-python by default (v2 batches)."""
    index, timeindex = [], []
    position = since = 0
    max_ts, max_off, last_ts = -1, base, -1
    for data in batches:
        last, ts = fields(data)
        if ts > max_ts:
            max_ts, max_off = ts, last
        if since > interval:
            index.append(OFFSET_ENTRY.pack(last - base, position))
            if max_ts > last_ts:
                timeindex.append(TIME_ENTRY.pack(max_ts, max_off - base))
                last_ts = max_ts
            since = 0
        position += len(data)
        since += len(data)
    if closed and max_ts > last_ts:
        timeindex.append(TIME_ENTRY.pack(max_ts, max_off - base))
    return b"".join(index), b"".join(timeindex)


def seg_path(part: Path, base: int, kind: str) -> Path:
    return part / f"{base:020d}.{kind}"


def write_partition(part: Path, segments: list[tuple[int, list[bytes]]], txns: dict[int, bytes] | None = None) -> Path:
    """Segments (base offset, batches); the last one is active (no closing time-index entry)."""
    part.mkdir(parents=True, exist_ok=True)
    for i, (base, batches) in enumerate(segments):
        index, timeindex = broker_indexes(batches, base, closed=i < len(segments) - 1)
        seg_path(part, base, "log").write_bytes(b"".join(batches))
        seg_path(part, base, "index").write_bytes(index)
        seg_path(part, base, "timeindex").write_bytes(timeindex)
    for base, data in (txns or {}).items():
        seg_path(part, base, "txnindex").write_bytes(data)
    return part


def checkpoint_text(entries: list[tuple[str, int, int]]) -> bytes:
    return (f"0\n{len(entries)}\n" + "".join(f"{t} {p} {o}\n" for t, p, o in entries)).encode()


# -- a log dir of empty files, for listing tests -------------------------------------------
MTIME_MS = 1_720_000_123_457

# relative path -> size (bytes of zeros); directories come from the paths
TREE = {
    "cleaner-offset-checkpoint": 20,
    "log-start-offset-checkpoint": 12,
    "recovery-point-offset-checkpoint": 12,
    "replication-offset-checkpoint": 12,
    "meta.properties": 90,
    "orders-7/00000000000000001200.log": 700,
    "orders-7/00000000000000001200.index": 16,
    "orders-7/00000000000000001200.timeindex": 24,
    "orders-7/00000000000000001200.txnindex": 34,
    "orders-7/00000000000000001200.snapshot": 10,
    "orders-7/00000000000000000000.log": 1000,
    "orders-7/00000000000000000000.index": 8,
    "orders-7/00000000000000000000.timeindex": 12,
    "orders-7/00000000000000000200.log": 900,
    "orders-7/leader-epoch-checkpoint": 8,
    "orders-7/partition.metadata": 44,
    "orders-10/00000000000000000000.log": 5,
    "my-topic.v2-12/00000000000000000000.log": 300,
    "my-topic.v2-12/00000000000000000500.log.cleaned": 100,
    "my-topic.v2-12/00000000000000000500.index.swap": 8,
    "my-topic.v2-12/00000000000000000000.timeindex.deleted": 12,
    "my-topic.v2-12/123.log": 3,
    "my-topic.v2-12/notes.txt": 3,
    "my-topic.v2-12/leader-epoch-checkpoint.tmp": 3,
    "a.b-c-0/00000000000000000042.log": 61,
    "orphan-1/00000000000000000100.index": 8,
    "orders-3.0f1e2dc3b4a5-delete/00000000000000000000.log": 50,
    "orders-4.9a8b7c6d5e4f-future/00000000000000000000.log": 50,
    "orders-5.1234abcd-stray/00000000000000000000.log": 50,
    "lost+found/something": 1,
    "orders-x/00000000000000000000.log": 1,
}
EMPTY_DIRS = ["empty-partition-5"]


def make_log_dir(root: Path, empty_dirs: bool = True) -> Path:
    for rel, size in TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(size))
        os.utime(path, ns=(MTIME_MS * 1_000_000,) * 2)
    if empty_dirs:
        for rel in EMPTY_DIRS:
            (root / rel).mkdir()
    return root


# -- the Kafka-written fixture's listing format, written from its README ---------------------
def short_hash(data: bytes, hex_chars: int) -> str:
    return hashlib.sha256(data).hexdigest()[:hex_chars]


def key_text(key: bytes | None) -> str:
    if key is None:
        return "NULL"
    return "sha256:" + short_hash(key, 32) if len(key) > 64 else key.hex()


def value_text(value: bytes | None) -> str:
    return "NULL" if value is None else short_hash(value, 32)


def headers_text(headers) -> str:
    if not headers:
        return "0"
    blob = b""
    for hkey, hvalue in headers:
        k = hkey.encode("utf-8", "surrogateescape")
        blob += struct.pack(">i", len(k)) + k
        blob += struct.pack(">i", -1) if hvalue is None else struct.pack(">i", len(hvalue)) + hvalue
    return f"{len(headers)}:{short_hash(blob, 16)}"


def flags_text(batch) -> str:
    flags = ("c" if batch.is_control else "d") + ("T" if batch.is_transactional else "")
    if batch.is_control:
        flags += ":" + CONTROL_TYPES[batch.control_type()]
    return flags


def record_lines(path: Path) -> list[str]:
    """One line per record (or empty batch) of a segment, as the fixture's *.records.tsv."""
    topic, partition = topic_partition(path)
    lines = []
    for batch in segment_batches(path):
        records = batch.records()
        flags = flags_text(batch)
        if not records:
            lines.append(f"{topic}\t{partition}\t{batch.base_offset}\tE\tlast={batch.last_offset}\t-\t-\t-\t"
                         f"{flags}\t{batch.producer_id}")
        for r in records:
            lines.append("\t".join(map(str, (
                topic, partition, r.offset, "R", r.timestamp, key_text(r.key), value_text(r.value),
                headers_text(r.headers), flags, batch.producer_id))))
    return lines


def batch_lines(path: Path) -> list[str]:
    """One line per batch of a segment, as the fixture's *.batches.tsv."""
    topic, partition = topic_partition(path)
    return [
        f"{topic}\t{partition}\t{b.base_offset}\tB\tlast={b.last_offset}\tcount={b.count}\t"
        f"codec={codecs.name(b.codec)}\tflags={flags_text(b)}\tpid={b.producer_id}\tepoch={b.producer_epoch}\t"
        f"seq={b.base_sequence}\tmaxTs={b.max_timestamp}\tdeleteHorizon={b.delete_horizon_ms}\t"
        f"leaderEpoch={b.partition_leader_epoch}"
        for b in segment_batches(path)
    ]


def log_segments(root: Path) -> list[Path]:
    """Every live .log under a log dir, in the fixture listings' order (topic, partition, offset)."""
    return sorted(root.glob("*-*/*.log"), key=lambda p: (p.parent.name.rsplit("-", 1)[0],
                                                      int(p.parent.name.rsplit("-", 1)[1]), p.name))


def segment_batches(path: Path) -> list:
    with open(path, "rb") as f:
        return list(iter_batches(f, str(path)))


def topic_partition(path: Path) -> tuple[str, int]:
    topic, _, partition = path.parent.name.rpartition("-")
    return topic, int(partition)


def assert_same_lines(ours: list[str], expected: list[str]) -> None:
    """Line by line, so a failure names the first line that differs."""
    for i, (a, b) in enumerate(zip(ours, expected)):
        assert a == b, f"line {i + 1} differs"
    assert len(ours) == len(expected)


# -- object stores ----------------------------------------------------------------------------------
FAULTY = "faults3"


def failing_s3():
    """An fsspec filesystem class over the same S3, protocol ``faults3://``, that fails its Nth
    write-like call (a PUT, a copy, a delete; set ``fail_at``, read ``calls``) with EIO, as a flaky
    store or network would; every call before it goes through. Registered with fsspec, with the
    ``s3`` configuration, when called."""
    import errno

    import fsspec
    import s3fs

    WRITES = ("put_object", "copy_object", "delete_object", "delete_objects", "create_multipart_upload",
              "upload_part", "complete_multipart_upload")

    class FailingS3FileSystem(s3fs.S3FileSystem):
        protocol = (FAULTY,)
        fail_at = 0
        calls = 0

        def _count(self):
            cls = type(self)
            cls.calls += 1
            if cls.calls == cls.fail_at:
                raise OSError(errno.EIO, f"injected I/O error at write {cls.calls}")

        async def _call_s3(self, method, *args, **kwargs):  # every request of s3fs's and storage's
            if method in WRITES:
                self._count()
            return await super()._call_s3(method, *args, **kwargs)

    fsspec.register_implementation(FAULTY, FailingS3FileSystem, clobber=True)
    fsspec.config.conf[FAULTY] = fsspec.config.conf["s3"]
    return FailingS3FileSystem


JOB_PATHS = ["whole", "threads", "shared"]


def use_job_path(request, spark) -> None:
    """Send the job down one of its paths (``request.param``, one of ``JOB_PATHS``) for a module's
    runs, and back to its defaults after: "whole" (a partition's map made in the task that reads it),
    "threads" (the same by four threads: four key shards), "shared" (every partition treated as larger
    than a task and its map as larger than a task's memory: the map made by many tasks and a shuffle),
    "page cache" (the .log files written through the page cache, ``spark.kcompact.write.direct=false``)."""
    from kcompact.compaction.pipeline import settings

    if request.param == "shared":
        spark.conf.set(settings.WHOLE, "0")
        spark.conf.set(settings.MAP_MEMORY, "0")
        request.addfinalizer(lambda: (spark.conf.unset(settings.WHOLE), spark.conf.unset(settings.MAP_MEMORY)))
    if request.param == "threads":
        spark.conf.set(settings.THREADS, "4")
        request.addfinalizer(lambda: spark.conf.unset(settings.THREADS))
    if request.param == "page cache":
        spark.conf.set(settings.DIRECT_WRITES, "false")
        request.addfinalizer(lambda: spark.conf.unset(settings.DIRECT_WRITES))


def pages_in_cache(path: str) -> tuple[int, int]:
    """(pages of the file in the page cache, pages of the file), from mincore(2) on a mapping of it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                              ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    pages = -(-size // mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        vec = ctypes.create_string_buffer(pages)
        assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec.raw), pages


REPO = Path(__file__).resolve().parents[1]


def layers() -> list[str]:
    """The repository's folders that are installed as ``kcompact.<folder>`` (setup.py's list,
    found by importing them, so it is written once)."""
    import contextlib
    import importlib

    found = []
    for entry in sorted(REPO.iterdir()):
        if (entry / "__init__.py").is_file() and entry.name not in ("kcompact", "tests"):
            with contextlib.suppress(ImportError):
                importlib.import_module(f"kcompact.{entry.name}")
                found.append(entry.name)
    return found


def install_layout(dest: Path) -> Path:
    """Our sources as the wheel lays them out (``dest/kcompact/readers/...``), without caches."""
    import shutil

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "kcompact", dest / "kcompact", ignore=ignore)
    for layer in layers():
        shutil.copytree(REPO / layer, dest / "kcompact" / layer, ignore=ignore)
    return dest


def patch_storage(monkeypatch, name: str, value) -> None:
    """Put ``value`` in place of ``storage``'s primitive ``name`` for the test: where callers reach
    it (``storage.<name>``) and in the one module of storage that holds it, where the other
    primitives call it (``write_atomic`` its ``rename``, ``fsync_dirs`` its ``fsync_dir``)."""
    now = getattr(storage, name)
    (room,) = (module for key, module in sorted(sys.modules.items())
               if key.startswith("kcompact.storage.") and vars(module).get(name) is now)
    monkeypatch.setattr(storage, name, value)
    monkeypatch.setattr(room, name, value)
