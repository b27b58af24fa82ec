"""Magic v0/v1 message sets, built by kafka-python's LegacyRecordBatchBuilder and placed
at realistic offsets the way a broker stores them:

- v0 compressed wrapper: inner offsets absolute, wrapper offset = last inner offset;
- v1 compressed wrapper: inner offsets relative, wrapper offset = last absolute offset,
  wrapper timestamp = the largest inner timestamp (or the append time with LogAppendTime).

Our reader must yield every entry intact (bytes, CRC) with the records kafka-python reads.
"""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kcompact.readers import codecs
from kcompact.readers.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP
from kcompact.readers.records import Record
from tests.support import kp_batches, kp_build, kp_record, read_batches

T0 = 1_500_000_000_000
LEGACY_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4]
CODEC_IDS = [codecs.name(c) for c in LEGACY_CODECS]


def make_records(first_offset: int, n: int, magic: int, gaps: bool = False) -> list[Record]:
    out, offset = [], first_offset
    for i in range(n):
        key = None if i % 4 == 1 else b"key-%d" % i
        value = None if i % 5 == 3 else b"value %d " % i * (i % 7 + 1)
        ts = T0 + (i * 37) % 11 if magic == 1 else NO_TIMESTAMP  # v1 timestamps out of order on purpose
        out.append(Record(offset, ts, key, value))
        offset += 3 if gaps else 1
    return out


def legacy_message_set(magic: int, codec: int, records: list[Record], log_append_time: int | None = None) -> bytes:
    """What a broker stores for ``records`` written with ``magic`` and ``codec``."""
    if codec == codecs.NONE:
        builder = LegacyRecordBatchBuilder(magic, 0, 1 << 30)
        for r in records:
            builder.append(r.offset, timestamp=r.timestamp if magic else None, key=r.key, value=r.value)
        return bytes(builder.build())
    first = records[0].offset
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for r in records:
        inner_offset = r.offset - first if magic == 1 else r.offset
        builder.append(inner_offset, timestamp=r.timestamp if magic else None, key=r.key, value=r.value)
    wrapper = bytearray(builder.build())  # kafka-python leaves offset 0 and timestamp 0 to the broker
    struct.pack_into(">q", wrapper, 0, records[-1].offset)
    if magic == 1:
        if log_append_time is not None:
            wrapper[17] |= 0x08
        struct.pack_into(">q", wrapper, 18, log_append_time or max(r.timestamp for r in records))
        struct.pack_into(">I", wrapper, 12, zlib.crc32(bytes(wrapper[16:])))
    return bytes(wrapper)


def kp_legacy_records(data: bytes) -> list[Record]:
    """Records kafka-python reads from a message set (v0's missing timestamp as -1)."""
    out = []
    for batch in kp_batches(data):
        for r in batch:
            assert r.validate_crc()
            rec = kp_record(r)
            out.append(Record(rec.offset, NO_TIMESTAMP if rec.timestamp is None else rec.timestamp, rec.key, rec.value))
    return out


def positions(entries) -> list[int]:
    return [e.position for e in entries]


# A v2 batch and a v0 message in front, so the legacy entries sit at a realistic file position.
PREFIX = kp_build([Record(999, T0, b"k", b"v")], base_offset=999) + legacy_message_set(
    0, codecs.NONE, [Record(1000, NO_TIMESTAMP, b"old", b"message")])
FIRST = 1001


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_entries_read_like_kafka_python(magic, codec):
    records = make_records(FIRST, 9, magic)
    message_set = legacy_message_set(magic, codec, records)
    log = PREFIX + message_set
    entries = read_batches(log)[2:]

    assert kp_legacy_records(message_set) == records
    assert [r for e in entries for r in e.records()] == records
    assert b"".join(bytes(e.data) for e in entries) == message_set  # kept byte for byte
    assert entries[0].position == len(PREFIX)
    for e in entries:
        assert e.magic == magic and e.codec == codec and e.crc_valid()
        assert e.producer_id == -1 and not e.is_transactional and not e.is_control
        assert e.timestamp_type == (NO_TIMESTAMP if magic == 0 else CREATE_TIME)
    if codec == codecs.NONE:
        assert len(entries) == len(records)
        assert [(e.base_offset, e.last_offset, e.count) for e in entries] == [(r.offset, r.offset, 1) for r in records]
        assert [e.max_timestamp for e in entries] == [r.timestamp for r in records]
    else:
        (wrapper,) = entries
        assert (wrapper.base_offset, wrapper.last_offset, wrapper.next_offset) == (FIRST, FIRST + 8, FIRST + 9)
        assert wrapper.count == len(records)
        expected_ts = NO_TIMESTAMP if magic == 0 else max(r.timestamp for r in records)
        assert wrapper.max_timestamp == expected_ts


def test_v1_wrapper_with_log_append_time():
    records = make_records(FIRST, 6, 1)
    message_set = legacy_message_set(1, codecs.GZIP, records, log_append_time=T0 + 5000)
    (wrapper,) = read_batches(message_set)
    assert wrapper.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in wrapper.records()] == [T0 + 5000] * 6
    assert wrapper.records() == kp_legacy_records(message_set)


def test_v1_wrapper_with_offset_gaps_after_cleaning():
    records = make_records(FIRST, 5, 1, gaps=True)
    message_set = legacy_message_set(1, codecs.SNAPPY, records)
    (wrapper,) = read_batches(message_set)
    assert wrapper.records() == kp_legacy_records(message_set) == records
    assert (wrapper.base_offset, wrapper.last_offset) == (FIRST, FIRST + 12)


def test_v0_lz4_wrapper_carries_the_broken_header_checksum():
    """Pre-0.10 Kafka computed the lz4 frame header checksum over the magic too (KAFKA-3160)."""
    records = make_records(FIRST, 4, 0)
    message_set = legacy_message_set(0, codecs.LZ4, records)
    value = message_set[12 + 4 + 1 + 1 + 4 + 4:]  # offset, size, crc, magic, attributes, key -1, value length
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(value)  # standard decoders reject it ...
    (wrapper,) = read_batches(message_set)
    assert wrapper.records() == records  # ... ours repairs the checksum first


def test_mixed_v0_v1_v2_log_reads_in_order():
    parts = [
        (legacy_message_set(0, codecs.NONE, make_records(0, 2, 0)), 0),
        (legacy_message_set(0, codecs.GZIP, make_records(2, 3, 0)), 0),
        (legacy_message_set(1, codecs.NONE, make_records(5, 2, 1)), 1),
        (legacy_message_set(1, codecs.SNAPPY, make_records(7, 3, 1)), 1),
        (legacy_message_set(1, codecs.LZ4, make_records(10, 3, 1), log_append_time=T0 + 1), 1),
        (kp_build([Record(13 + i, T0 + i, b"k%d" % i, b"v" * 200) for i in range(3)], codec=codecs.ZSTD,
                  base_offset=13), 2),
        (kp_build([Record(16, T0, None, b"x"), Record(17, T0 + 2, b"k", None)], base_offset=16), 2),
    ]
    log = b"".join(data for data, _ in parts)
    expected = kp_legacy_or_v2_records(log)
    assert [r.offset for r in expected] == list(range(18))

    for chunk in (8 << 20, 50):
        entries = read_batches(log, chunk_size=chunk)
        assert [e.magic for e in entries] == [0, 0, 0, 1, 1, 1, 1, 2, 2]
        assert [r for e in entries for r in e.records()] == expected
        assert all(e.crc_valid() for e in entries)
        assert b"".join(bytes(e.data) for e in entries) == log
        assert [e.last_offset for e in entries] == [0, 1, 4, 5, 6, 9, 12, 15, 17]


def kp_legacy_or_v2_records(log: bytes) -> list[Record]:
    out = []
    for batch in kp_batches(log):
        for r in batch:
            ts = NO_TIMESTAMP if r.timestamp is None else r.timestamp
            out.append(Record(r.offset, ts, r.key, r.value, tuple(r.headers)))
    return out
