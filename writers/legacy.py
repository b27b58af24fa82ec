"""Encode magic-v0/v1 messages, and rebuild a compressed legacy wrapper around some of its
inner messages, as Kafka's cleaner does.

Kafka never changes a legacy entry it keeps whole: it copies it. A compressed wrapper that
loses some of its inner messages (or holds an inner message of another magic, KAFKA-4298) is
rebuilt by ``MemoryRecords.buildRetainedRecordsInto``: a ``MemoryRecordsBuilder`` with the
wrapper's magic, codec and timestamp type, its base offset the first kept message's offset
and, under LogAppendTime, the wrapper's timestamp as the append time, fed the kept messages.
Closing it gives:

- inner messages, uncompressed, written anew in the wrapper's magic: attributes computed
  (codec none, plus the LogAppendTime bit for magic 1), timestamp the message's own (the
  append time under LogAppendTime), key and value as they were, CRC-32 over magic..end;
- inner offsets relative to the first kept offset for magic 1, absolute for magic 0
  (``toInnerOffset``);
- the wrapper: offset = last kept offset, key null, value = the compressed inner message set
  (magic 0 lz4: the broken header checksum), attributes = codec (+ LogAppendTime bit for magic 1),
  timestamp = the largest inner timestamp, or the append time.

Byte-format only: no Spark, no fsspec.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import numpy as np

from kcompact.readers import codecs
from kcompact.readers.batch import ATTR_TIMESTAMP_TYPE, LOG_APPEND_TIME, NO_TIMESTAMP, Batch
from kcompact.readers.records import Record
from kcompact.writers.codecs import GZIP_OS_JAVA_16, compress_legacy

_ENTRY_HEADER = struct.Struct(">qi")  # offset, message size
_MAGIC_ATTRIBUTES = struct.Struct(">bb")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
WRAPPER_CODECS = (codecs.GZIP, codecs.SNAPPY, codecs.LZ4)  # Kafka refuses zstd below magic 2


def kept_records(batch: Batch, keep, where: str, noun: str) -> list[Record]:
    """The records of legacy entry ``batch`` where ``keep`` (one bool per record, in stored order) is
    set; a ValueError naming ``where`` for a mask of another length, or when none is kept (Kafka:
    "empty batches are only supported for magic v2 and above"). ``noun``: what a record is called."""
    records = batch.records()
    keep = np.asarray(keep, dtype=np.bool_)
    if keep.shape != (len(records),):
        raise ValueError(f"{where}: keep mask of shape {keep.shape} for {len(records)} {noun}s")
    kept = [r for r, k in zip(records, keep.tolist()) if k]
    if not kept:
        raise ValueError(f"{where}: no {noun} kept; empty batches are only supported for magic v2 and above")
    return kept

def attributes(magic: int, codec: int, timestamp_type: int) -> int:
    """LegacyRecord.computeAttributes: the codec, and for magic 1 the LogAppendTime bit."""
    out = codec & 0x07
    if magic > 0 and timestamp_type == LOG_APPEND_TIME:
        out |= ATTR_TIMESTAMP_TYPE
    return out


def _sized(data: bytes | None) -> bytes:
    return _LENGTH.pack(-1) if data is None else _LENGTH.pack(len(data)) + bytes(data)


def encode_message(magic: int, attrs: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    """One v0/v1 message without its offset/size prefix: crc, magic, attributes,
    [timestamp for magic 1], key, value (LegacyRecord.write). The CRC is plain CRC-32 over
    everything after it."""
    if magic not in (0, 1):
        raise ValueError(f"magic {magic} is not a legacy message format")
    if timestamp < 0 and timestamp != NO_TIMESTAMP:
        raise ValueError(f"invalid message timestamp {timestamp}")  # as LegacyRecord.write refuses it
    body = _MAGIC_ATTRIBUTES.pack(magic, attrs)
    if magic == 1:
        body += _TIMESTAMP.pack(timestamp)
    body += _sized(key) + _sized(value)
    return _CRC.pack(zlib.crc32(body)) + body


def encode_entry(offset: int, message: bytes) -> bytes:
    """A log entry: offset int64, message size int32, the message."""
    return _ENTRY_HEADER.pack(offset, len(message)) + message


def encode_wrapper(magic: int, codec: int, timestamp_type: int, records: Sequence[Record],
                   log_append_time: int = NO_TIMESTAMP, gzip_os: int = GZIP_OS_JAVA_16) -> bytes:
    """A compressed wrapper entry holding ``records`` (absolute offsets, strictly increasing),
    as a closed MemoryRecordsBuilder(magic, codec, timestamp_type, base offset = first record's
    offset, log_append_time) writes it. ``timestamp_type`` is ignored for magic 0; ``gzip_os``
    is the JVM's gzip header OS byte (``writers.codecs``)."""
    if magic not in (0, 1):
        raise ValueError(f"magic {magic} is not a legacy message format")
    if codec not in WRAPPER_CODECS:
        raise ValueError(f"{codecs.name(codec)} is not a codec of a magic-{magic} wrapper")
    if not records:
        raise ValueError("a compressed wrapper holds at least one message")
    append_time = magic > 0 and timestamp_type == LOG_APPEND_TIME
    base = records[0].offset
    inner_attrs = attributes(magic, codecs.NONE, timestamp_type)
    max_ts = NO_TIMESTAMP
    parts = []
    previous = None
    for r in records:
        if previous is not None and r.offset <= previous:
            raise ValueError(f"offset {r.offset} follows offset {previous}: offsets must increase")
        if r.headers:
            raise ValueError(f"magic v{magic} does not support record headers (offset {r.offset})")
        previous = r.offset
        ts = log_append_time if append_time else r.timestamp
        inner_offset = r.offset - base if magic == 1 else r.offset
        parts.append(encode_entry(inner_offset, encode_message(magic, inner_attrs, ts, r.key, r.value)))
        if magic > 0 and ts > max_ts:
            max_ts = ts
    value = compress_legacy(magic, codec, b"".join(parts), gzip_os)
    wrapper_ts = log_append_time if append_time else max_ts
    wrapper = encode_message(magic, attributes(magic, codec, timestamp_type), wrapper_ts, None, value)
    return encode_entry(records[-1].offset, wrapper)


def rebuild_wrapper(batch: Batch, keep: np.ndarray, gzip_os: int = GZIP_OS_JAVA_16) -> bytes:
    """``batch``, a compressed v0/v1 wrapper, keeping the inner messages where ``keep`` (one
    bool per inner message, in stored order) is set: Kafka's buildRetainedRecordsInto.

    Nothing kept is an error, as in Kafka (MemoryRecords.filterTo: "Empty batches are only
    supported for magic v2 and above"); the caller drops a wrapper that loses everything.
    """
    where = f"{batch.path}: byte {batch.position}: legacy wrapper at offset {batch.base_offset_field}"
    if batch.magic not in (0, 1) or batch.codec == codecs.NONE:
        raise ValueError(f"{where}: not a compressed magic-0/1 wrapper")
    kept = kept_records(batch, keep, where, "inner message")
    append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else NO_TIMESTAMP
    try:
        return encode_wrapper(batch.magic, batch.codec, batch.timestamp_type, kept, append_time, gzip_os)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
