"""The bytes Kafka's cleaner writes, encoded plainly here (not with ``writers``).

Three shapes leave ``MemoryRecords.filterTo`` besides a byte-for-byte copy:
- a v2 batch rebuilt by ``MemoryRecordsBuilder`` around its retained records
  (``buildRetainedRecordsInto``: base offset kept, last offset overridden to the original's);
- the 61-byte header of an emptied v2 batch (``DefaultRecordBatch.writeEmptyHeader``);
- a compressed magic-0/1 wrapper rebuilt around its retained inner messages.

Compression goes through ``readers.codecs`` (the project's Java-client framing), so a rebuilt
batch has the same size in the model and in the product; everything else is written out here
field by field from the format description (kafka-on-disk-format.md).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import crc32c

from kcompact.readers import codecs
from kcompact.readers.batch import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    LOG_APPEND_TIME,
)
from kcompact.readers.records import Record
from kcompact.writers.codecs import compress, compress_legacy

NO_TIMESTAMP = -1
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_BEFORE_CRC = struct.Struct(">qiibI")  # baseOffset, batchLength, leader epoch, magic, crc


def varint(value: int) -> bytes:
    """Zigzag LEB128 (Kafka's ByteUtils.writeVarint/writeVarlong give the same bytes for ints)."""
    z = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while True:
        low, z = z & 0x7F, z >> 7
        if z:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _sized(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record_bytes(offset_delta: int, timestamp_delta: int, record: Record) -> bytes:
    """DefaultRecord.writeTo: size varint, then attributes 0, deltas, key, value, headers."""
    body = bytearray(b"\x00")
    body += varint(timestamp_delta)
    body += varint(offset_delta)
    body += _sized(record.key)
    body += _sized(record.value)
    body += varint(len(record.headers))
    for hkey, hvalue in record.headers:
        body += _sized(hkey.encode("utf-8", "surrogateescape"))
        body += _sized(hvalue)
    return varint(len(body)) + bytes(body)


@dataclass(frozen=True, slots=True)
class V2Header:
    """The fields of a v2 batch header that a rebuild or an empty header carries over."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    codec: int
    timestamp_type: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool

    @classmethod
    def of(cls, batch) -> V2Header:
        return cls(batch.base_offset_field, batch.last_offset, batch.partition_leader_epoch, batch.codec,
                   batch.timestamp_type, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                   batch.is_transactional, batch.is_control)


def v2_batch(h: V2Header, codec: int, first_timestamp: int, max_timestamp: int, delete_horizon: bool,
             count: int, records_section: bytes) -> bytes:
    """DefaultRecordBatch.writeHeader plus the (compressed) records section; CRC-32C over
    attributes..end."""
    attributes = codec & 0x07
    if h.timestamp_type == LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if h.transactional:
        attributes |= ATTR_TRANSACTIONAL
    if h.control:
        attributes |= ATTR_CONTROL
    if delete_horizon:
        attributes |= ATTR_DELETE_HORIZON
    payload = compress(codec, records_section) if codec != codecs.NONE else records_section
    after = _AFTER_CRC.pack(attributes, h.last_offset - h.base_offset, first_timestamp, max_timestamp,
                            h.producer_id, h.producer_epoch, h.base_sequence, count) + payload
    return _BEFORE_CRC.pack(h.base_offset, len(after) + 9, h.leader_epoch, 2, crc32c.crc32c(after)) + after


def empty_header(h: V2Header, max_timestamp: int) -> bytes:
    """DefaultRecordBatch.writeEmptyHeader: no records, codec none, first timestamp -1, the
    batch's max timestamp, producer fields and offsets kept, no delete horizon."""
    return v2_batch(h, codecs.NONE, NO_TIMESTAMP, max_timestamp, False, 0, b"")


@dataclass(frozen=True, slots=True)
class Built:
    """A closed MemoryRecordsBuilder: its bytes and ``info()`` (max timestamp, shallow offset)."""

    data: bytes
    max_timestamp: int
    shallow_offset_of_max_timestamp: int


def rebuild_v2(h: V2Header, retained: list[Record], delete_horizon_ms: int, log_append_time: int) -> Built:
    """MemoryRecordsBuilder fed ``retained`` (absolute offsets) with the original batch's fields,
    ``overrideLastOffset(original last offset)``. With a delete horizon the base timestamp is the
    horizon, else the first record's timestamp; timestamp deltas are relative to it."""
    base_timestamp = delete_horizon_ms if delete_horizon_ms >= 0 else None
    max_timestamp = NO_TIMESTAMP
    section = bytearray()
    for r in retained:
        if base_timestamp is None:
            base_timestamp = r.timestamp
        section += record_bytes(r.offset - h.base_offset, r.timestamp - base_timestamp, r)
        if r.timestamp > max_timestamp:
            max_timestamp = r.timestamp
    if h.timestamp_type == LOG_APPEND_TIME:
        header_max = info_max = log_append_time
        shallow = h.last_offset
    elif max_timestamp == NO_TIMESTAMP:
        header_max, info_max, shallow = max_timestamp, NO_TIMESTAMP, -1
    else:
        header_max = info_max = max_timestamp
        shallow = h.last_offset  # v2: the builder's last offset, i.e. the overridden original one
    data = v2_batch(h, h.codec, base_timestamp, header_max, delete_horizon_ms >= 0, len(retained), bytes(section))
    return Built(data, info_max, shallow)


# -- magic 0/1 -------------------------------------------------------------------------------

def legacy_message(magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    """LegacyRecord.write: crc32 (plain) over magic..end, magic, attributes, [timestamp], key, value."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">I", zlib.crc32(body)) + body


def rebuild_legacy_wrapper(magic: int, codec: int, timestamp_type: int, log_append_time: int,
                           retained: list[Record]) -> Built:
    """MemoryRecordsBuilder for a compressed magic-0/1 wrapper: base offset = first retained
    offset, inner messages uncompressed in the wrapper's magic (inner offsets relative to the
    base for magic 1, absolute for magic 0), LogAppendTime stamping every timestamp, the wrapper
    at the last retained offset with the largest timestamp (or the append time)."""
    append_time = magic > 0 and timestamp_type == LOG_APPEND_TIME
    inner_attributes = ATTR_TIMESTAMP_TYPE if append_time else 0
    base = retained[0].offset
    max_timestamp = NO_TIMESTAMP
    inner = bytearray()
    for r in retained:
        ts = log_append_time if append_time else r.timestamp
        message = legacy_message(magic, inner_attributes, ts, r.key, r.value)
        inner += struct.pack(">qi", r.offset - base if magic > 0 else r.offset, len(message)) + message
        max_timestamp = max(max_timestamp, ts)
    value = compress_legacy(magic, codec, bytes(inner))
    wrapper_ts = log_append_time if append_time else max_timestamp
    attributes = (codec & 0x07) | (ATTR_TIMESTAMP_TYPE if append_time else 0)
    message = legacy_message(magic, attributes, wrapper_ts, None, value)
    last = retained[-1].offset
    data = struct.pack(">qi", last, len(message)) + message
    if append_time:
        return Built(data, log_append_time, last)
    if max_timestamp == NO_TIMESTAMP:
        return Built(data, NO_TIMESTAMP, -1)
    return Built(data, max_timestamp, last)  # compressed: the builder's last offset, not the max's own
