"""Magic-v2 batches and records against kafka-python and hand-built bytes.

Reader direction: batches built by kafka-python's producer-side builder (header
fields a broker stamps patched in, CRC recomputed) must read back with the same
fields and records through our reader. Writer direction: what writers.batch
encodes must be accepted by kafka-python (CRC checked) with the same records.
"""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import encode_varint as kp_encode_varint

from kcompact.errors import FormatError
from kcompact.readers import codecs, scan
from kcompact.readers.batch import LOG_APPEND_TIME
from kcompact.readers.records import ABORT, COMMIT, Record, control_coordinator_epoch, control_key, control_value
from kcompact.writers.batch import encode_batch, varint
from tests.oracles import encode_like
from tests.support import (
    V2_HEADER,
    hand_control_batch,
    hand_v2_batch,
    hand_varint,
    kp_build,
    kp_decode_v2,
    read_batches,
    read_one,
)

ALL_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
CODEC_IDS = [codecs.name(c) for c in ALL_CODECS]
BASE = 5_000
T0 = 1_720_000_000_000
PAD = b"0123456789abcdef" * 8  # makes every record compressible, so kafka-python keeps the codec

SAMPLE = [
    Record(BASE + 0, T0, b"key-0", b"v0" + PAD),
    Record(BASE + 1, T0 + 5, None, b"keyless" + PAD),
    Record(BASE + 2, T0 + 3, b"key-2", None),  # tombstone, timestamp below the first: negative delta
    Record(BASE + 3, T0 + 9, b"key-3", b""),  # empty value, not a tombstone
    Record(BASE + 4, T0 + 9, b"", b"empty key" + PAD),
    Record(BASE + 5, T0 - 20, b"key-5", b"headers" + PAD, (("trace-id", b"abc"), ("null-value", None))),
    Record(BASE + 6, T0 + 11, b"key-6", PAD, (("ключ-😀", b""), ("trace-id", b"dup"), ("", b"\x00\xff"))),
]

PRODUCERS = {
    "no-producer": {},
    "idempotent": dict(producer_id=4242, producer_epoch=3, base_sequence=17),
    "transactional": dict(producer_id=4243, producer_epoch=0, base_sequence=0, transactional=True),
    "sequence-wraps": dict(producer_id=4244, producer_epoch=1, base_sequence=(1 << 31) - 3),
}


def our_fields(b) -> dict:
    return dict(
        base_offset=b.base_offset_field, last_offset=b.last_offset, leader_epoch=b.partition_leader_epoch,
        codec=b.codec, timestamp_type=b.timestamp_type, transactional=b.is_transactional, control=b.is_control,
        first_timestamp=b.base_timestamp, max_timestamp=b.max_timestamp, producer_id=b.producer_id,
        producer_epoch=b.producer_epoch, base_sequence=b.base_sequence, last_sequence=b.last_sequence,
        count=b.records_count, crc=b.crc, size=b.size,
    )


def kp_fields(b) -> dict:
    return dict(
        base_offset=b.base_offset, last_offset=b.last_offset, leader_epoch=b.leader_epoch,
        codec=b.compression_type, timestamp_type=b.timestamp_type, transactional=b.is_transactional,
        control=b.is_control_batch, first_timestamp=b.first_timestamp, max_timestamp=b.max_timestamp,
        producer_id=b.producer_id, producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
        last_sequence=b.last_sequence, count=b.records_count, crc=b.crc, size=b.size_in_bytes,
    )


def header(data: bytes) -> dict:
    names = ("base_offset", "length", "leader_epoch", "magic", "crc", "attributes", "last_offset_delta",
             "first_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "count")
    return dict(zip(names, V2_HEADER.unpack_from(data)))


# -- reading what kafka-python builds ----------------------------------------------------
@pytest.mark.parametrize("producer", PRODUCERS.values(), ids=PRODUCERS.keys())
@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_reader_matches_kafka_python(codec, producer):
    data = kp_build(SAMPLE, codec=codec, base_offset=BASE, leader_epoch=7, **producer)
    ours = read_one(data)
    kp, kp_records = kp_decode_v2(data)

    assert ours.crc_valid()
    assert our_fields(ours) == kp_fields(kp)
    assert ours.codec == codec and ours.magic == 2 and ours.position == 0
    assert ours.records() == kp_records == SAMPLE
    assert bytes(ours.data) == data


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_log_append_time_replaces_every_record_timestamp(codec):
    append_time = T0 + 60_000
    data = kp_build(SAMPLE, codec=codec, base_offset=BASE, log_append_time=append_time)
    ours = read_one(data)
    kp, kp_records = kp_decode_v2(data)

    assert ours.timestamp_type == kp.timestamp_type == LOG_APPEND_TIME
    assert ours.max_timestamp == append_time
    assert ours.records() == kp_records
    assert [r.timestamp for r in ours.records()] == [append_time] * len(SAMPLE)
    assert [(r.offset, r.key, r.value, r.headers) for r in ours.records()] == [
        (r.offset, r.key, r.value, r.headers) for r in SAMPLE
    ]


def test_offset_gaps_and_first_offset_above_base_offset():
    """Cleaned batches keep their base offset while their first records are gone."""
    kept = [Record(BASE + 3, T0, b"a", b"1"), Record(BASE + 9, T0 + 1, b"b", b"2"), Record(BASE + 30, T0, None, None)]
    data = kp_build(kept, base_offset=BASE)
    ours = read_one(data)
    _, kp_records = kp_decode_v2(data)
    assert ours.base_offset == BASE and ours.last_offset == BASE + 30
    assert ours.records() == kp_records == kept


@pytest.mark.parametrize("kind", [COMMIT, ABORT], ids=["COMMIT", "ABORT"])
def test_control_batch_read_by_both(kind):
    data = hand_control_batch(kind, offset=812, timestamp=T0, producer_id=77, producer_epoch=4,
                              coordinator_epoch=9, leader_epoch=2)
    ours = read_one(data)
    kp, kp_records = kp_decode_v2(data)

    assert ours.is_control and ours.is_transactional and kp.is_control_batch
    assert our_fields(ours) == kp_fields(kp)
    assert ours.control_type() == kind
    (kp_marker,) = list(DefaultRecordBatch(data))  # kafka-python's ControlRecord
    assert kp_marker.type == kind and kp_marker.abort == (kind == ABORT)
    (record,) = ours.records()
    assert record == kp_records[0]
    assert record.key == control_key(kind) == struct.pack(">hh", 0, kind)
    assert record.value == control_value(9) == struct.pack(">hi", 0, 9)
    assert control_coordinator_epoch(record) == 9


def test_non_utf8_header_key_re_encodes_exactly():
    """Header keys are Java strings, but whatever bytes a producer wrote must survive a rewrite."""
    section = crafted_record(0, 0, b"k", b"v", [(b"\xff\xfe-raw", b"x"), (b"ok", None)])
    data = hand_v2_batch(section, base_offset=70, count=1, last_offset_delta=0, first_timestamp=T0, max_timestamp=T0)
    batch = read_one(data)
    (record,) = batch.records()
    assert record.headers[1] == ("ok", None)
    assert record.headers[0][0].encode("utf-8", "surrogateescape") == b"\xff\xfe-raw"
    assert encode_like(batch, batch.records()) == data


# -- writing what kafka-python reads -----------------------------------------------------
@pytest.mark.parametrize("producer", PRODUCERS.values(), ids=PRODUCERS.keys())
@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_writer_output_read_by_kafka_python(codec, producer):
    data = encode_batch(SAMPLE, base_offset=BASE, codec=codec, partition_leader_epoch=3, **producer)
    kp, kp_records = kp_decode_v2(data)

    assert kp_records == SAMPLE
    assert kp.base_offset == BASE and kp.last_offset == SAMPLE[-1].offset
    assert kp.compression_type == codec and kp.leader_epoch == 3
    assert kp.first_timestamp == SAMPLE[0].timestamp
    assert kp.max_timestamp == max(r.timestamp for r in SAMPLE)
    assert kp.producer_id == producer.get("producer_id", -1)
    assert kp.producer_epoch == producer.get("producer_epoch", -1)
    assert kp.base_sequence == producer.get("base_sequence", -1)
    assert kp.is_transactional == producer.get("transactional", False)
    assert not kp.is_control_batch and kp.timestamp_type == 0


@pytest.mark.parametrize("producer", PRODUCERS.values(), ids=PRODUCERS.keys())
def test_uncompressed_writer_output_equals_kafka_python_builder(producer):
    """Two independent encoders of the same batch agree byte for byte."""
    assert encode_batch(SAMPLE, base_offset=BASE, partition_leader_epoch=7, **producer) == kp_build(
        SAMPLE, base_offset=BASE, leader_epoch=7, **producer
    )


@pytest.mark.parametrize("kind", [COMMIT, ABORT], ids=["COMMIT", "ABORT"])
def test_writer_control_batch_equals_hand_built_marker(kind):
    marker = Record(812, T0, control_key(kind), control_value(9))
    ours = encode_batch([marker], base_offset=812, producer_id=77, producer_epoch=4, transactional=True,
                        control=True, partition_leader_epoch=2)
    assert ours == hand_control_batch(kind, offset=812, timestamp=T0, producer_id=77, producer_epoch=4,
                                      coordinator_epoch=9, leader_epoch=2)


def test_writer_log_append_time_read_by_kafka_python():
    append_time = T0 + 1234
    data = encode_batch(SAMPLE, base_offset=BASE, codec=codecs.LZ4, timestamp_type=LOG_APPEND_TIME,
                        max_timestamp=append_time)
    kp, kp_records = kp_decode_v2(data)
    assert kp.timestamp_type == LOG_APPEND_TIME and kp.max_timestamp == append_time
    assert [r.timestamp for r in kp_records] == [append_time] * len(SAMPLE)


# -- re-encoding (what the cleaner does) ---------------------------------------------------
REENCODE_CASES = {
    **{name: dict(producer) for name, producer in PRODUCERS.items()},
    "leader-epoch": dict(leader_epoch=12),
}


@pytest.mark.parametrize("build", REENCODE_CASES.values(), ids=REENCODE_CASES.keys())
def test_encode_like_reproduces_uncompressed_kafka_python_batch(build):
    data = kp_build(SAMPLE, base_offset=BASE, **build)
    batch = read_one(data)
    assert encode_like(batch, batch.records()) == data


@pytest.mark.parametrize("kind", [COMMIT, ABORT], ids=["COMMIT", "ABORT"])
def test_encode_like_reproduces_control_batch(kind):
    data = hand_control_batch(kind, offset=90, timestamp=T0, producer_id=5, producer_epoch=1, coordinator_epoch=3)
    batch = read_one(data)
    assert encode_like(batch, batch.records()) == data


@pytest.mark.parametrize("producer", PRODUCERS.values(), ids=PRODUCERS.keys())
@pytest.mark.parametrize("codec", ALL_CODECS[1:], ids=CODEC_IDS[1:])
def test_encode_like_compressed_reads_the_same_everywhere(codec, producer):
    data = kp_build(SAMPLE, codec=codec, base_offset=BASE, leader_epoch=4, **producer)
    original = read_one(data)
    again = encode_like(original, original.records())
    ours = read_one(again)
    kp, kp_records = kp_decode_v2(again)

    assert ours.records() == kp_records == SAMPLE
    expected = our_fields(original)
    for moved in ("crc", "size"):
        expected.pop(moved)
    assert {k: v for k, v in our_fields(ours).items() if k not in ("crc", "size")} == expected
    assert {k: v for k, v in kp_fields(kp).items() if k not in ("crc", "size")} == expected


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_encode_like_subset_keeps_offset_span_and_producer_fields(codec):
    data = kp_build(SAMPLE, codec=codec, base_offset=BASE, producer_id=9, producer_epoch=2, base_sequence=40)
    batch = read_one(data)
    kept = [r for r in batch.records() if r.offset in (BASE + 1, BASE + 4)]
    kp, kp_records = kp_decode_v2(encode_like(batch, kept))
    assert kp_records == kept
    assert (kp.base_offset, kp.last_offset, kp.base_sequence, kp.last_sequence) == (
        BASE, SAMPLE[-1].offset, 40, 40 + len(SAMPLE) - 1)
    assert kp.first_timestamp == kept[0].timestamp
    assert kp.max_timestamp == max(r.timestamp for r in kept)
    assert kp.compression_type == codec


def test_encode_like_log_append_time_keeps_the_append_time():
    append_time = T0 + 999
    batch = read_one(kp_build(SAMPLE, codec=codecs.GZIP, base_offset=BASE, log_append_time=append_time))
    kp, kp_records = kp_decode_v2(encode_like(batch, batch.records()[2:]))
    assert kp.timestamp_type == LOG_APPEND_TIME and kp.max_timestamp == append_time
    assert [r.timestamp for r in kp_records] == [append_time] * (len(SAMPLE) - 2)


# -- delete horizon ------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_delete_horizon_sets_bit_6_and_base_timestamp(codec):
    horizon = T0 + 86_400_000
    data = encode_batch(SAMPLE, base_offset=BASE, codec=codec, delete_horizon_ms=horizon)
    fields = header(data)
    assert fields["attributes"] & 0x40
    assert fields["attributes"] & 0x07 == codec
    assert fields["first_timestamp"] == horizon
    assert fields["max_timestamp"] == max(r.timestamp for r in SAMPLE)

    ours = read_one(data)
    assert ours.has_delete_horizon and ours.delete_horizon_ms == horizon
    assert ours.records() == SAMPLE
    _, kp_records = kp_decode_v2(data)  # kafka-python knows nothing of bit 6: deltas must still add up
    assert kp_records == SAMPLE


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.ZSTD], ids=["none", "zstd"])
def test_encode_like_stamps_and_then_keeps_a_delete_horizon(codec):
    horizon = T0 + 5_000
    batch = read_one(kp_build(SAMPLE, codec=codec, base_offset=BASE, producer_id=1, producer_epoch=0, base_sequence=0))
    stamped = read_one(encode_like(batch, batch.records(), delete_horizon_ms=horizon))
    assert stamped.delete_horizon_ms == horizon and stamped.records() == SAMPLE
    again = encode_like(stamped, stamped.records()[1:])
    assert read_one(again).delete_horizon_ms == horizon
    assert kp_decode_v2(again)[1] == SAMPLE[1:]
    if codec == codecs.NONE:
        assert encode_like(stamped, stamped.records()) == bytes(stamped.data)


# -- empty batches ------------------------------------------------------------------------
EMPTY_CASES = {
    "plain-gzip": dict(codec=codecs.GZIP),
    "idempotent-zstd": dict(codec=codecs.ZSTD, producer_id=31, producer_epoch=2, base_sequence=100),
    "transactional-none": dict(
        codec=codecs.NONE, producer_id=32, producer_epoch=0, base_sequence=5, transactional=True
    ),
    "log-append-time-lz4": dict(codec=codecs.LZ4, log_append_time=T0 + 42),
}


@pytest.mark.parametrize("build", EMPTY_CASES.values(), ids=EMPTY_CASES.keys())
def test_empty_batch_is_kafkas_empty_header(build):
    data = kp_build(SAMPLE, base_offset=BASE, leader_epoch=6, **build)
    batch = read_one(data)
    empty = encode_like(batch, [])

    # DefaultRecordBatch.writeEmptyHeader: no codec, no first timestamp, original span and max timestamp.
    append_time = build.get("log_append_time")
    attributes = (0x08 if append_time else 0) | (0x10 if build.get("transactional") else 0)
    max_timestamp = append_time or max(r.timestamp for r in SAMPLE)
    expected = bytearray(V2_HEADER.pack(
        BASE, 49, 6, 2, 0, attributes, len(SAMPLE) - 1, -1, max_timestamp,
        build.get("producer_id", -1), build.get("producer_epoch", -1), build.get("base_sequence", -1), 0,
    ))
    struct.pack_into(">I", expected, 17, crc32c.crc32c(bytes(expected[21:])))
    assert empty == bytes(expected)

    kp, kp_records = kp_decode_v2(empty)
    assert kp_records == [] and kp.last_offset == SAMPLE[-1].offset and kp.compression_type == 0
    ours = read_one(empty)
    assert ours.records() == [] and ours.last_offset == SAMPLE[-1].offset


# -- malformed records --------------------------------------------------------------------
def test_bad_record_length_names_its_file_byte_position():
    first = encode_batch(SAMPLE[:1], base_offset=BASE - 1)
    section = bytearray(encode_batch(SAMPLE[1:3], base_offset=BASE)[61:])
    section[0] += 2  # the first record's length varint claims one byte more than its fields
    bad = hand_v2_batch(bytes(section), base_offset=BASE, count=2, last_offset_delta=1,
                        first_timestamp=SAMPLE[1].timestamp, max_timestamp=SAMPLE[1].timestamp)
    batches = read_batches(first + bad)  # framing and CRC are fine; the records are not
    assert batches[0].records() == SAMPLE[:1]
    with pytest.raises(FormatError) as err:
        batches[1].records()
    assert err.value.position == len(first) + 61


# -- varints ------------------------------------------------------------------------------
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
VARINT_EDGES = sorted(
    {0, 1, -1, (1 << 31) - 1, -(1 << 31), INT64_MAX, INT64_MIN}
    | {v for k in range(1, 63) for v in (1 << k, (1 << k) - 1, -(1 << k), -(1 << k) - 1, (1 << k) + 1)}
)


def reference_decode(data: bytes) -> tuple[int, int]:
    """Kafka's ByteUtils.readVarlong, written out independently: (value, bytes used)."""
    raw = shift = 0
    for i, byte in enumerate(data):
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), i + 1
        shift += 7
    raise ValueError("truncated")


def kp_varint(value: int) -> bytes:
    out = bytearray()
    kp_encode_varint(value, out.append)
    return bytes(out)


KNOWN_VARINTS = {  # from the zigzag/LEB128 definition (as in Kafka's ByteUtilsTest)
    0: "00", -1: "01", 1: "02", 63: "7e", -64: "7f", 64: "8001", -65: "8101", 8191: "fe7f", -8192: "ff7f",
    (1 << 31) - 1: "feffffff0f", -(1 << 31): "ffffffff0f",
    INT64_MAX: "feffffffffffffffff01", INT64_MIN: "ffffffffffffffffff01",
}


@pytest.mark.parametrize("value", KNOWN_VARINTS)
def test_varint_known_bytes(value):
    assert varint(value).hex() == KNOWN_VARINTS[value]


def test_varint_edges_match_reference_encoders_and_decoder():
    for value in VARINT_EDGES:
        encoded = varint(value)
        assert encoded == hand_varint(value) == kp_varint(value), value
        assert reference_decode(encoded) == (value, len(encoded)), value
        zigzag = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
        assert len(encoded) == max(1, -(-zigzag.bit_length() // 7)), value  # minimal length


def test_scanner_varint_decodes_edges():
    for value in VARINT_EDGES:
        encoded = varint(value)
        buf = np.frombuffer(encoded + b"\xff", dtype=np.uint8)  # a trailing byte must not be read
        assert scan._varint(buf, 0, len(buf)) == (value, len(encoded), scan.OK), value


def crafted_record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None,
                   headers: list[tuple[bytes, bytes | None]] = ()) -> bytes:
    def sized(b):
        return hand_varint(-1) if b is None else hand_varint(len(b)) + b

    body = b"\x00" + hand_varint(ts_delta) + hand_varint(offset_delta) + sized(key) + sized(value)
    body += hand_varint(len(headers)) + b"".join(sized(k) + sized(v) for k, v in headers)
    return hand_varint(len(body)) + body


def test_scan_records_reads_edge_varints_in_crafted_records():
    int32 = [v for v in VARINT_EDGES if -(1 << 31) <= v < (1 << 31)]
    records = [crafted_record(ts, int32[i % len(int32)], b"k" * (i % 3), None if i % 4 == 0 else b"v" * i)
               for i, ts in enumerate(VARINT_EDGES)]
    section = b"".join(records)
    buf = np.frombuffer(section, dtype=np.uint8)
    cols, err, pos = scan.scan_records(buf, 0, len(buf), len(records))
    assert (err, pos) == (scan.OK, len(section))
    assert cols[:, scan.TIMESTAMP_DELTA].tolist() == VARINT_EDGES
    assert cols[:, scan.OFFSET_DELTA].tolist() == [int32[i % len(int32)] for i in range(len(records))]
    starts = np.cumsum([0] + [len(r) for r in records[:-1]]).tolist()
    assert cols[:, scan.RECORD_POS].tolist() == starts
    assert cols[:, scan.VALUE_POS].tolist()[0] == -1  # null value


def test_scan_records_rejects_overlong_and_truncated_varints():
    overlong = np.frombuffer(b"\x80" * 10 + b"\x01", dtype=np.uint8)
    assert scan._varint(overlong, 0, len(overlong))[2] == scan.VARINT_TOO_LONG
    record = crafted_record(1, 0, b"key", b"value")
    cut = np.frombuffer(record[:-1], dtype=np.uint8)
    _, err, pos = scan.scan_records(cut, 0, len(cut), 1)
    assert (err, pos) == (scan.TRUNCATED, 0)
    extra = np.frombuffer(record + b"\x00", dtype=np.uint8)
    _, err, pos = scan.scan_records(extra, 0, len(extra), 1)
    assert (err, pos) == (scan.TRAILING_BYTES, len(record))


# -- property tests -----------------------------------------------------------------------
header_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
maybe_bytes = st.none() | st.binary(max_size=40)
record_parts = st.tuples(
    st.integers(0, 5),  # offset gap before the record
    st.integers(-(1 << 40), 1 << 45),  # timestamp: any order, so deltas of both signs
    maybe_bytes,
    maybe_bytes,
    st.lists(st.tuples(header_keys, maybe_bytes), max_size=3),
)


def build_records(base_offset: int, parts) -> list[Record]:
    out, offset = [], base_offset
    for gap, ts, key, value, headers in parts:
        offset += gap
        out.append(Record(offset, ts, key, value, tuple(headers)))
        offset += 1
    return out


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base_offset=st.integers(0, 1 << 40), parts=st.lists(record_parts, min_size=1, max_size=25))
def test_property_encode_batch_round_trips(codec, base_offset, parts):
    records = build_records(base_offset, parts)
    data = encode_batch(records, base_offset=base_offset, codec=codec)
    ours = read_one(data)
    assert ours.crc_valid()
    assert ours.records() == records
    kp, kp_records = kp_decode_v2(data)
    assert kp_records == records
    assert kp.last_offset == ours.last_offset == records[-1].offset
    if codec == codecs.NONE:
        assert encode_like(ours, ours.records()) == data
