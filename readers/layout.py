"""The byte layout of a record batch, defined once: message format v2 (Kafka's
``DefaultRecordBatch``) and the legacy v0/v1 message set entry (``LegacyRecord``). Every reader
and writer takes its field offsets from here; each offset is derived from the fields before it.

v2 batch header (big-endian, 61 bytes; the CRC-32C covers ``attributes`` to the batch's end)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32

legacy entry (big-endian; the CRC-32 covers ``magic`` to the entry's end)::

    offset int64 | messageSize int32 | crc uint32 | magic int8 | attributes int8 |
    [timestamp int64, v1 only] | key and value, each behind an int32 length
"""

from __future__ import annotations

import struct

V2_FIELDS = (("base_offset", "q"), ("batch_length", "i"), ("partition_leader_epoch", "i"), ("magic", "b"),
             ("crc", "I"), ("attributes", "h"), ("last_offset_delta", "i"), ("base_timestamp", "q"),
             ("max_timestamp", "q"), ("producer_id", "q"), ("producer_epoch", "h"), ("base_sequence", "i"),
             ("records_count", "i"))
LEGACY_FIELDS = (("offset", "q"), ("message_size", "i"), ("crc", "I"), ("magic", "b"), ("attributes", "b"),
                 ("timestamp", "q"))


def _offsets(fields: tuple[tuple[str, str], ...]) -> dict[str, int]:
    return {name: struct.calcsize(">" + "".join(code for _, code in fields[:i])) for i, (name, _) in enumerate(fields)}


V2_AT = _offsets(V2_FIELDS)
LEGACY_AT = _offsets(LEGACY_FIELDS)
V2_HEADER = struct.Struct(">" + "".join(code for _, code in V2_FIELDS))
V2_HEADER_SIZE = V2_HEADER.size
LOG_OVERHEAD = V2_AT["partition_leader_epoch"]  # baseOffset + batchLength: not counted in batchLength

# The offsets by name, as plain ints (compiled kernels read them as constants).
LENGTH_AT = V2_AT["batch_length"]
LEADER_EPOCH_AT = V2_AT["partition_leader_epoch"]
MAGIC_AT = V2_AT["magic"]  # the same place in every format: what tells them apart
CRC_AT = V2_AT["crc"]
ATTRIBUTES_AT = V2_AT["attributes"]
V2_CRC_START = ATTRIBUTES_AT
LAST_OFFSET_DELTA_AT = V2_AT["last_offset_delta"]
BASE_TIMESTAMP_AT = V2_AT["base_timestamp"]
MAX_TIMESTAMP_AT = V2_AT["max_timestamp"]
PRODUCER_ID_AT = V2_AT["producer_id"]
PRODUCER_EPOCH_AT = V2_AT["producer_epoch"]
BASE_SEQUENCE_AT = V2_AT["base_sequence"]
RECORDS_COUNT_AT = V2_AT["records_count"]
LEGACY_CRC_AT = LEGACY_AT["crc"]
LEGACY_ATTRIBUTES_AT = LEGACY_AT["attributes"]
LEGACY_TIMESTAMP_AT = LEGACY_AT["timestamp"]
