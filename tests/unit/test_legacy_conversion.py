"""Kafka 4.0's conversion of kept v0/v1 entries to v2 batches (KIP-724, KAFKA-13093), against
MemoryRecords.filterTo / buildRetainedRecordsInto on the 4.0 branch: one v2 batch per shallow entry
(a compressed wrapper, or one uncompressed message), the entry's codec, CreateTime for magic 0 and
the entry's timestamp type otherwise, the append time as max timestamp under LogAppendTime, base
offset the first kept record's, producer fields and leader epoch -1, and a delete horizon
(now + delete.retention.ms) when a tombstone is kept; 3.9 copies a whole entry as it is.

Inputs are built by kafka-python's LegacyRecordBatchBuilder (``legacy_message_set``); outputs are
read by kafka-python (CRC checked), and an uncompressed one is compared with the bytes
kafka-python's v2 builder writes for the expected fields.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

import crc32c
import numpy as np
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kcompact.compaction.rules.decisions import COPY, REWRITE, BatchPlan, Outcome, batch_outcome
from kcompact.compaction.rules.model import BatchInfo
from kcompact.readers import codecs
from kcompact.readers.records import Record
from kcompact.writers.cleaned import output_bytes
from kcompact.writers.convert import legacy_as_v2
from tests.reference import cleaner as reference
from tests.support import kp_decode_v2, read_batches, read_one
from tests.unit.test_legacy import legacy_message_set

NOW, RET = 1_720_300_000_000, 600_000
T = NOW - 86_400_000
LAT = T + 5_000
CODECS = [codecs.GZIP, codecs.SNAPPY, codecs.LZ4]
KEEP = np.array([True, False, True, True, False])


def five(magic: int, tombstone_at: int | None = None) -> list[Record]:
    return [Record(100 + 2 * i, T + 10 * i if magic else -1, b"k%d" % i, None if i == tombstone_at else b"value-%d" % i)
            for i in range(5)]


def expected_records(magic: int, records: list[Record], keep, log_append_time: int | None = None) -> list[Record]:
    """What the v2 batch holds: the kept records, magic 0's timestamps -1, LogAppendTime's the append time."""
    ts = (lambda r: log_append_time) if log_append_time is not None else (lambda r: r.timestamp if magic else -1)
    return [Record(r.offset, ts(r), r.key, r.value) for r, k in zip(records, keep) if k]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS, ids=[codecs.name(c) for c in CODECS])
def test_compressed_wrapper_becomes_one_v2_batch(magic, codec):
    records = five(magic)
    out = legacy_as_v2(read_one(legacy_message_set(magic, codec, records)), KEEP, None)
    batch, got = kp_decode_v2(out)
    want = expected_records(magic, records, KEEP)
    assert got == want
    assert (batch.magic, batch.compression_type, batch.timestamp_type) == (2, codec, 0)
    assert (batch.base_offset, batch.last_offset_delta) == (100, 106 - 100)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.leader_epoch) == (-1, -1, -1, -1)
    assert not batch.is_transactional and not batch.is_control_batch
    assert batch.first_timestamp == want[0].timestamp
    assert batch.max_timestamp == (max(r.timestamp for r in want) if magic else -1)
    assert batch.attributes & 0x40 == 0  # no delete horizon
    if codec == codecs.LZ4:  # magic 2's lz4 frame: the header checksum over FLG and BD only
        assert out[61:65] == b"\x04\x22\x4d\x18"


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_message_is_its_own_v2_batch(magic):
    """Each uncompressed message: a one-record batch, byte for byte what a v2 builder writes."""
    records = five(magic)
    entries = read_batches(legacy_message_set(magic, codecs.NONE, records))
    assert len(entries) == 5
    for entry, r in zip(entries, records):
        out = legacy_as_v2(entry, np.array([True]), None)
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
        builder.append(0, r.timestamp if magic else -1, r.key, r.value, [])
        want = bytearray(builder.build())
        struct.pack_into(">qii", want, 0, r.offset, len(want) - 12, -1)  # base offset, length, leader epoch -1
        struct.pack_into(">I", want, 17, crc32c.crc32c(bytes(want[21:])))
        assert out == bytes(want)


def test_log_append_time_wrapper_keeps_its_append_time():
    records = five(1)
    wrapper = read_one(legacy_message_set(1, codecs.GZIP, records, log_append_time=LAT))
    batch, got = kp_decode_v2(legacy_as_v2(wrapper, KEEP, None))
    assert batch.timestamp_type == 1
    assert batch.max_timestamp == LAT == batch.first_timestamp
    assert got == expected_records(1, records, KEEP, LAT)


@pytest.mark.parametrize("magic", [0, 1])
def test_kept_tombstone_gets_a_delete_horizon(magic):
    """filterTo stamps now + delete.retention.ms: a legacy entry has no horizon of its own."""
    records = five(magic, tombstone_at=2)
    wrapper = read_one(legacy_message_set(magic, codecs.SNAPPY, records))
    plan = BatchPlan(BatchInfo.of(wrapper, 0), 0, False, False, False, True, False)
    outcome = batch_outcome(plan, 3, True, NOW, RET, legacy_to_v2=True)
    assert outcome == Outcome(REWRITE, NOW + RET)
    batch, got = kp_decode_v2(output_bytes(wrapper, outcome, KEEP, legacy_to_v2=True))
    assert batch.attributes & 0x40 and batch.first_timestamp == NOW + RET
    assert got == expected_records(magic, records, KEEP)
    assert got[1].value is None


@pytest.mark.parametrize("magic", [0, 1])
def test_whole_entry_is_copied_by_3_9_and_converted_by_4_0(magic):
    wrapper = read_one(legacy_message_set(magic, codecs.LZ4, five(magic, tombstone_at=4)))
    plan = BatchPlan(BatchInfo.of(wrapper, 0), 0, False, False, False, True, False)
    assert batch_outcome(plan, 5, True, NOW, RET) == Outcome(COPY)
    converted = batch_outcome(plan, 5, True, NOW, RET, legacy_to_v2=True)
    assert converted == Outcome(REWRITE, NOW + RET)
    batch, got = kp_decode_v2(output_bytes(wrapper, converted, np.ones(5, bool), legacy_to_v2=True))
    assert (batch.base_offset, batch.last_offset_delta, len(got)) == (100, 8, 5)
    no_tombstone = read_one(legacy_message_set(magic, codecs.NONE, five(magic)[:1]))
    plan = BatchPlan(BatchInfo.of(no_tombstone, 0), 0, False, False, False, True, False)
    assert batch_outcome(plan, 1, False, NOW, RET, legacy_to_v2=True) == Outcome(REWRITE, None)


def test_nothing_kept_is_an_error_naming_the_entry():
    wrapper = read_one(legacy_message_set(1, codecs.GZIP, five(1)))
    with pytest.raises(ValueError, match="offset 108: no record kept"):
        legacy_as_v2(wrapper, np.zeros(5, bool), None)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [codecs.NONE, *CODECS], ids=["none", *(codecs.name(c) for c in CODECS)])
@pytest.mark.parametrize("tombstone_at", [None, 2])
def test_reference_model_converts_alike(magic, codec, tombstone_at):
    """The reference model's buildRetainedRecordsInto (its own v2 encoder) and the product's."""
    records = five(magic, tombstone_at)
    entries = read_batches(legacy_message_set(magic, codec, records))
    keeps = [KEEP] if codec != codecs.NONE else [np.array([True])] * len(entries)
    log_filter = SimpleNamespace(legacy_to_v2=True, current_time=NOW, delete_retention_ms=RET)
    for entry, keep in zip(entries, keeps):
        retained = [r for r, k in zip(entry.records(), keep) if k]
        horizon = any(r.value is None for r in retained)
        built = reference._build_retained(entry, retained, log_filter, horizon)
        assert built.data == legacy_as_v2(entry, keep, NOW + RET if horizon else None)


# -- MemoryRecordsTest.testFilterTo and testFilterToPreservesLogAppendTime (4.0), magic 0/1 x codec --------
def filter_to(data: bytes) -> bytes:
    """Kafka 4.0's filterTo with the test's RetainNonNullKeysFilter: keep keyed records, drop what is emptied."""
    out = b""
    for entry in read_batches(data):
        keep = np.array([r.key is not None for r in entry.records()])
        plan = BatchPlan(BatchInfo.of(entry, 0), 0, False, False, False, True, False)
        outcome = batch_outcome(plan, int(keep.sum()), False, NOW, RET, legacy_to_v2=True)
        out += output_bytes(entry, outcome, keep, legacy_to_v2=True) or b""
    return out


def builders(magic: int, codec: int, items: list[list[tuple]], log_append_time: int | None = None) -> bytes:
    """The test's MemoryRecordsBuilders: one message set per list of (offset, timestamp, key, value)."""
    return b"".join(legacy_message_set(magic, codec, [Record(o, ts, k, v) for o, ts, k, v in group], log_append_time)
                    for group in items)


FILTER_TO_INPUT = [[(0, 10, None, b"a")], [(1, 11, b"1", b"b"), (2, 12, None, b"c")],
                   [(3, 13, None, b"d"), (4, 20, b"4", b"e"), (5, 15, b"5", b"f")], [(6, 16, b"6", b"g")]]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [codecs.NONE, *CODECS], ids=["none", *(codecs.name(c) for c in CODECS)])
def test_memory_records_filter_to(magic, codec):
    out = filter_to(builders(magic, codec, FILTER_TO_INPUT))
    batches = [read_one(b) for b in split_batches(out)]
    if codec == codecs.NONE:
        starts, ends, maxima = [1, 4, 5, 6], [1, 4, 5, 6], [11, 20, 15, 16]
    else:
        starts, ends, maxima = [1, 4, 6], [1, 5, 6], [11, 20, 16]
    assert [(b.magic, b.base_offset_field, b.last_offset, b.codec, b.timestamp_type) for b in batches] == \
        [(2, s, e, codec, 0) for s, e in zip(starts, ends)]
    assert [b.max_timestamp for b in batches] == (maxima if magic else [-1] * len(batches))
    if magic:  # FilterResult: max timestamp 20 at the shallow offset of its batch's last record
        (at_max,) = [b for b in batches if b.max_timestamp == 20]
        assert at_max.last_offset == (4 if codec == codecs.NONE else 5)
    records = [r for b in batches for r in kp_decode_v2(b.data.tobytes())[1]]
    assert [(r.offset, r.key, r.value) for r in records] == [(1, b"1", b"b"), (4, b"4", b"e"), (5, b"5", b"f"),
                                                            (6, b"6", b"g")]
    assert [r.timestamp for r in records] == ([11, 20, 15, 16] if magic else [-1] * 4)


@pytest.mark.parametrize("codec", CODECS, ids=[codecs.name(c) for c in CODECS])
def test_memory_records_filter_to_preserves_log_append_time(codec):
    items = [[(0, 10, None, b"a")], [(1, 11, b"1", b"b"), (2, 12, None, b"c")],
             [(3, 13, None, b"d"), (4, 14, b"4", b"e"), (5, 15, b"5", b"f")]]
    batches = [read_one(b) for b in split_batches(filter_to(builders(1, codec, items, LAT)))]
    assert [(b.codec, b.timestamp_type, b.max_timestamp) for b in batches] == [(codec, 1, LAT)] * 2


def split_batches(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        out.append(data[pos:pos + 12 + size])
        pos += 12 + size
    return out
