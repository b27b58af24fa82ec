"""Kafka's producer-state snapshots (``<offset>.snapshot`` in a partition dir), parsed (rendered
by ``writers.snapshot``).

A broker writes one at each segment roll and at shutdown: the producers known
at that offset and, for each, the first offset of its open transaction. With
one, the last stable offset needs only the batches after the snapshot, not the
whole log. Layout: version int16 (1), CRC-32C uint32 of everything after it,
then an int32-counted array of 46-byte entries.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from kcompact.errors import FormatError

VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction


def parse(path: str, data: bytes) -> list[ProducerEntry]:
    if len(data) < _HEADER.size:
        raise FormatError(path, 0, f"producer snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _HEADER.unpack_from(data)
    if version != VERSION:
        raise FormatError(path, 0, f"unknown producer snapshot version {version}")
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise FormatError(path, 2, f"producer snapshot CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    if count < 0 or _HEADER.size + count * ENTRY.size != len(data):
        raise FormatError(path, 10, f"{count} producer entries do not fill the {len(data)}-byte snapshot")
    return [ProducerEntry(*fields) for fields in ENTRY.iter_unpack(memoryview(data)[_HEADER.size:])]
