"""Encode magic-v2 record batches, byte for byte as Kafka's Java client lays them out.

Varints are minimal, record attributes are 0, the CRC-32C covers bytes
[21, end). Re-encoding a decoded uncompressed batch gives its original bytes;
compressed ones decode to the same records (codec output may differ).

A cleaned batch is not re-encoded here: ``writers.rebuild`` splices its kept records
(``tests/oracles.py`` holds the record-by-record re-encoding it is tested against).
"""

from __future__ import annotations

from collections.abc import Sequence

import crc32c

from kcompact.readers import codecs
from kcompact.readers.batch import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
)
from kcompact.readers.layout import ATTRIBUTES_AT, CRC_AT, LOG_OVERHEAD, V2_CRC_START, V2_HEADER
from kcompact.readers.records import Record
from kcompact.writers.codecs import compress


def uvarint(value: int) -> bytes:
    """Unsigned LEB128, as Kafka's ByteUtils.writeUnsignedVarint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zigzag LEB128, as Kafka's ByteUtils.writeVarlong (covers varint too)."""
    return uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _sized(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    body = [
        b"\x00",
        varint(record.timestamp - base_timestamp),
        varint(record.offset - base_offset),
        _sized(record.key),
        _sized(record.value),
        varint(len(record.headers)),
    ]
    for hkey, hvalue in record.headers:
        body.append(_sized(hkey.encode("utf-8", "surrogateescape")))
        body.append(_sized(hvalue))
    encoded = b"".join(body)
    return varint(len(encoded)) + encoded


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    codec: int = codecs.NONE,
    timestamp_type: int = 0,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    first_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` (absolute offsets and timestamps).

    ``last_offset_delta`` keeps an original batch's offset span after records
    were removed (Kafka keeps it so producer sequences survive cleaning);
    ``first_timestamp``/``max_timestamp`` carry an empty batch's header values
    and, for LogAppendTime, the append time. With ``delete_horizon_ms`` the base
    timestamp field holds the horizon and record deltas are relative to it.
    """
    if first_timestamp is None:
        first_timestamp = records[0].timestamp if records else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    base_timestamp = first_timestamp if delete_horizon_ms is None else delete_horizon_ms
    attributes = codec
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    body = b"".join(encode_record(r, base_offset, base_timestamp) for r in records)
    body = compress(codec, body)
    header = V2_HEADER.pack(
        base_offset, V2_HEADER.size - LOG_OVERHEAD + len(body), partition_leader_epoch, 2, 0,
        attributes, last_offset_delta, base_timestamp, max_timestamp,
        producer_id, producer_epoch, base_sequence, len(records),
    )
    out = bytearray(header)
    out += body
    crc = crc32c.crc32c(memoryview(out)[V2_CRC_START:])
    out[CRC_AT:ATTRIBUTES_AT] = crc.to_bytes(4, "big")
    return bytes(out)
