"""writers.rebuild against writers.batch.encode_like (the reference) and kafka-python.

Every rebuilt batch must equal ``encode_like(batch, kept records, horizon)``:
byte for byte when uncompressed, header and decompressed records section when
compressed. Independently of both encoders, kafka-python must accept its CRC and
read exactly the kept records with the header fields Kafka's cleaner writes.
Inputs come from kafka-python's builder (tests.support.kp_build), hand-built
markers and the Kafka-written fixture.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kcompact.readers import codecs, scan
from kcompact.readers.batch import ATTR_DELETE_HORIZON, LOG_APPEND_TIME, V2_HEADER_SIZE, Batch
from kcompact.readers.records import ABORT, COMMIT, Record
from kcompact.readers.segment import iter_batches
from kcompact.writers.rebuild import rebuild, splice_records
from tests.oracles import encode_like
from tests.support import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    FIXTURE_INPUT,
    V2_HEADER,
    hand_control_batch,
    kp_build,
    kp_decode_v2,
    read_batches,
    read_one,
)

ALL_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
CODEC_IDS = [codecs.name(c) for c in ALL_CODECS]
BASE = 5_000
T0 = 1_720_000_000_000
HORIZON = T0 + 86_400_000
PAD = b"0123456789abcdef" * 8  # compressible, so kafka-python keeps the codec

SAMPLE = [
    Record(BASE + 0, T0, b"key-0", b"v0" + PAD),
    Record(BASE + 1, T0 + 5, None, b"keyless" + PAD),
    Record(BASE + 2, T0 + 3, b"key-2", None),  # tombstone with a negative delta
    Record(BASE + 4, T0 - 20, b"key-4", b"headers" + PAD, (("trace-id", b"abc"), ("null-value", None))),
    Record(BASE + 9, T0 + 11, b"", PAD, (("ключ-😀", b""),)),  # offset gap before it
    Record(BASE + 10, T0 + 70_000, b"key-10", b"late" + PAD),  # a 3-byte timestamp delta
]
PRODUCERS = {
    "no-producer": {},
    "idempotent": dict(producer_id=4242, producer_epoch=3, base_sequence=17),
    "transactional": dict(producer_id=4243, producer_epoch=0, base_sequence=(1 << 31) - 2, transactional=True),
}


# -- the oracle ----------------------------------------------------------------------------
def canonical(data: bytes) -> tuple:
    """Header fields without length and CRC, and the decompressed records section: what two
    encoders of the same batch share whatever bytes their compressor writes."""
    fields = list(V2_HEADER.unpack_from(data))
    fields[1] = fields[4] = None
    return tuple(fields), codecs.decompress(fields[5] & 0x07, data[V2_HEADER_SIZE:])


def expected_header(batch: Batch, kp_kept: list[Record], horizon: int | None) -> dict:
    """Kafka's cleaner output header, from the input's fields and the kept records only."""
    if not kp_kept:
        return dict(codec=0, first_timestamp=-1, max_timestamp=batch.max_timestamp, count=0, horizon=False)
    append_time = batch.timestamp_type == LOG_APPEND_TIME
    return dict(
        codec=batch.codec,
        first_timestamp=horizon if horizon is not None else kp_kept[0].timestamp,
        max_timestamp=batch.max_timestamp if append_time else max(r.timestamp for r in kp_kept),
        count=len(kp_kept),
        horizon=horizon is not None,
    )


def check(batch: Batch, keep, horizon: int | None = None) -> bytes:
    """Rebuild ``batch`` and hold the result against encode_like and kafka-python."""
    data = bytes(batch.data)
    keep = np.asarray(keep, dtype=bool)
    got = rebuild(batch, keep, horizon)

    existing = batch.base_timestamp if batch.has_delete_horizon else None
    effective = existing if horizon is None else horizon
    if keep.all() and effective == existing:
        assert got == data, "a batch that loses nothing and gains no horizon is copied as stored"
        return got
    kept = [r for r, k in zip(batch.records(), keep) if k]
    expected = encode_like(batch, kept, horizon)
    assert canonical(got) == canonical(expected)
    if batch.codec == codecs.NONE or not kept:
        assert got == expected

    kp, kp_records = kp_decode_v2(got)  # CRC and batchLength checked by kafka-python
    kp_kept = [r for r, k in zip(kp_decode_v2(data)[1], keep) if k]
    assert kp_records == kp_kept
    ours = read_one(got)
    assert ours.records() == kp_kept
    assert dict(
        codec=kp.compression_type, first_timestamp=kp.first_timestamp, max_timestamp=kp.max_timestamp,
        count=kp.records_count, horizon=ours.has_delete_horizon,
    ) == expected_header(batch, kp_kept, effective)
    assert (kp.base_offset, kp.last_offset, kp.leader_epoch, kp.producer_id, kp.producer_epoch, kp.base_sequence,
            kp.timestamp_type, kp.is_transactional, kp.is_control_batch) == (
        batch.base_offset_field, batch.last_offset, batch.partition_leader_epoch, batch.producer_id,
        batch.producer_epoch, batch.base_sequence, batch.timestamp_type, batch.is_transactional, batch.is_control)
    return got


# -- hypothesis ------------------------------------------------------------------------------
@st.composite
def batch_inputs(draw) -> tuple[bytes, list[bool], int | None]:
    """A kafka-python batch of random records, a keep mask and a horizon (None, new, or the
    batch's own)."""
    t0 = draw(st.integers(0, 1 << 44))
    base = draw(st.integers(0, 1 << 40))
    offset = base + draw(st.integers(0, 3))
    records = []
    for _ in range(draw(st.integers(1, 20))):
        ts = t0 + draw(st.integers(-1000, 1000) | st.integers(-(1 << 36), 1 << 36))
        key = draw(st.none() | st.binary(max_size=24))
        value = draw(st.none() | st.binary(max_size=24).map(lambda b: b + PAD))
        headers = tuple(draw(st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=3)))
        records.append(Record(offset, ts, key, value, headers))
        offset += draw(st.integers(1, 1 << draw(st.sampled_from([1, 4, 20]))))
    append_time = draw(st.none() | st.integers(0, 1 << 44))
    has_horizon = draw(st.booleans())
    data = kp_build(
        records, codec=draw(st.sampled_from(ALL_CODECS)), base_offset=base,
        leader_epoch=draw(st.integers(0, (1 << 31) - 1)), log_append_time=append_time,
        extra_attributes=ATTR_DELETE_HORIZON if has_horizon else 0, require_codec=False,
        **draw(st.sampled_from(list(PRODUCERS.values()))),
    )
    keep = draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    own = struct.unpack_from(">q", data, 27)[0]  # the first timestamp, read as a horizon when bit 6 is set
    horizon = draw(st.sampled_from([None, own]) | st.integers(0, 1 << 45))
    return data, keep, horizon


@pytest.mark.slow  # more than 20 s (make test-fast leaves it out)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_inputs())
def test_random_batches_masks_and_horizons(case):
    data, keep, horizon = case
    check(read_one(data), keep, horizon)


# -- the Kafka-written fixture -------------------------------------------------------------------
SEGMENTS = sorted(FIXTURE_INPUT.glob("*-*/*.log"))


@pytest.mark.parametrize("path", SEGMENTS, ids=[f"{p.parent.name}/{p.stem}" for p in SEGMENTS])
def test_fixture_batches_with_random_masks(path: Path):
    """Batches as the segment reader yields them: inside a chunk shared with other batches."""
    rng = random.Random(path.name)
    with open(path, "rb") as f:
        batches = list(iter_batches(f, str(path)))
    assert batches
    for batch in batches:
        keep = [rng.random() < 0.3 for _ in range(batch.records_count)]
        check(batch, keep, rng.choice([None, HORIZON]))


# -- edge cases ----------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("append_time", [None, T0 + 999], ids=["create-time", "log-append-time"])
def test_all_kept_without_horizon_is_the_stored_batch(codec, append_time):
    """Kafka's cleaner copies such a batch byte for byte, LogAppendTime deltas included
    (encode_like would zero them)."""
    data = kp_build(SAMPLE, codec=codec, base_offset=BASE, log_append_time=append_time, producer_id=7,
                    producer_epoch=1, base_sequence=0)
    batch = read_batches(kp_build(SAMPLE[:1], base_offset=BASE - 1) + data)[1]  # not at the chunk's start
    assert rebuild(batch, np.ones(len(SAMPLE), bool)) == data


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("producer", PRODUCERS.values(), ids=PRODUCERS.keys())
@pytest.mark.parametrize("keep", ["101001", "011111", "000001", "100000"])
def test_subsets(codec, producer, keep):
    batch = read_one(kp_build(SAMPLE, codec=codec, base_offset=BASE, leader_epoch=5, **producer))
    check(batch, [c == "1" for c in keep])


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("horizon", [None, HORIZON], ids=["no-horizon", "new-horizon"])
def test_nothing_kept_is_kafkas_empty_header(codec, horizon):
    batch = read_one(kp_build(SAMPLE, codec=codec, base_offset=BASE, producer_id=3, producer_epoch=0,
                              base_sequence=9, transactional=True))
    empty = check(batch, [False] * len(SAMPLE), horizon)
    assert len(empty) == V2_HEADER_SIZE
    assert empty == encode_like(batch, [])


def test_empty_stored_batch():
    empty = read_one(encode_like(read_one(kp_build(SAMPLE, base_offset=BASE)), []))
    assert rebuild(empty, np.zeros(0, bool)) == bytes(empty.data)
    assert rebuild(empty, np.zeros(0, bool), HORIZON) == bytes(empty.data)  # still Kafka's empty header


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("horizon", [None, HORIZON], ids=["no-horizon", "new-horizon"])
def test_log_append_time(codec, horizon):
    """Records carry the append time: deltas become 0 (or append time - horizon)."""
    append_time = T0 + 123_456
    batch = read_one(kp_build(SAMPLE, codec=codec, base_offset=BASE, log_append_time=append_time))
    got = check(batch, [True, False, True, True, False, True], horizon)
    section = codecs.decompress(codec, got[V2_HEADER_SIZE:])
    cols, err, _ = scan.scan_records(np.frombuffer(section, np.uint8), 0, len(section), 4)
    assert err == scan.OK
    assert set(cols[:, scan.TIMESTAMP_DELTA]) == {append_time - (horizon or append_time)}


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_delete_horizon_new_kept_and_replaced(codec):
    batch = read_one(kp_build(SAMPLE, codec=codec, base_offset=BASE, producer_id=1, producer_epoch=0,
                              base_sequence=0))
    stamped = read_one(check(batch, [True] * len(SAMPLE), HORIZON))  # all kept: the horizon alone forces a rewrite
    assert stamped.delete_horizon_ms == HORIZON
    assert rebuild(stamped, np.ones(len(SAMPLE), bool), HORIZON) == bytes(stamped.data)  # same horizon: no change
    kept = read_one(check(stamped, [False, True, True, False, True, True]))
    assert kept.delete_horizon_ms == HORIZON
    replaced = read_one(check(stamped, [True, False, True, True, True, False], HORIZON + 1))
    assert replaced.delete_horizon_ms == HORIZON + 1


@pytest.mark.parametrize("kind", [COMMIT, ABORT], ids=["COMMIT", "ABORT"])
def test_control_batch(kind):
    marker = read_one(hand_control_batch(kind, offset=812, timestamp=T0, producer_id=77, producer_epoch=4,
                                         coordinator_epoch=9, leader_epoch=2))
    stamped = read_one(check(marker, [True], HORIZON))
    assert stamped.is_control and stamped.control_type() == kind and stamped.delete_horizon_ms == HORIZON
    empty = read_one(check(stamped, [False]))
    assert empty.is_control and empty.is_transactional and empty.records_count == 0
    assert empty.attributes == ATTR_CONTROL | ATTR_TRANSACTIONAL


def test_length_varint_grows_and_shrinks():
    """A 63-byte record body gets a 2-byte timestamp delta under a horizon: its length varint
    grows from one byte to two; a horizon at the first timestamp shrinks it back."""
    records = [Record(BASE, T0, None, b"x" * 57), Record(BASE + 1, T0 + 1, None, b"y" * 57)]
    data = kp_build(records, base_offset=BASE)
    assert data[V2_HEADER_SIZE] == 63 << 1  # zigzag length of the first record
    grown = check(read_one(data), [True, True], T0 + 1000)
    assert grown[V2_HEADER_SIZE:V2_HEADER_SIZE + 2] == bytes([0x80, 0x01])  # zigzag 128: 64 bytes
    assert len(grown) == len(data) + 4  # both records: one byte of delta, one of length
    shrunk = check(read_one(grown), [True, True], T0)
    assert shrunk[V2_HEADER_SIZE:] == data[V2_HEADER_SIZE:]


def test_large_timestamp_jumps():
    """Deltas of the varlong range (beyond int32) on both sides of the new base."""
    records = [Record(BASE, T0, b"a", b"1"), Record(BASE + 1, T0 - (1 << 40), b"b", b"2"),
               Record(BASE + 2, T0 + (1 << 41), b"c", None)]
    batch = read_one(kp_build(records, base_offset=BASE))
    for keep in ([False, True, True], [True, False, True], [False, False, True]):
        for horizon in (None, 0, T0 + (1 << 42)):
            check(batch, keep, horizon)


def test_keep_mask_must_match_the_record_count():
    batch = read_one(kp_build(SAMPLE, base_offset=BASE))
    with pytest.raises(ValueError, match="keep mask"):
        rebuild(batch, np.ones(len(SAMPLE) - 1, bool))
    with pytest.raises(ValueError, match="keep mask"):
        rebuild(batch, np.ones((len(SAMPLE), 1), bool))


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_entries_are_refused(magic):
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    builder.append(0, timestamp=T0 if magic else None, key=b"k", value=b"v")
    legacy = read_one(bytes(builder.build()))
    assert legacy.magic == magic
    with pytest.raises(ValueError, match="magic-v2"):
        rebuild(legacy, np.ones(1, bool))


def test_kernel_refuses_a_matrix_that_does_not_fit_the_buffer():
    """The kernel reads only inside the records it was given, whatever matrix it is handed."""
    batch = read_one(kp_build(SAMPLE, base_offset=BASE))
    _, buf, cols = batch.scan_records()
    keep = np.ones(len(SAMPLE), bool)
    args = (batch.base_timestamp, False, 0, False, 0)
    assert splice_records(buf, cols, keep, batch.end, *args)[1] > 0
    past_end = cols.copy()
    past_end[-1, scan.RECORD_POS] = batch.end
    shifted = cols.copy()
    shifted[:, scan.RECORD_POS] += 1  # every record now starts inside its length varint's neighbour
    unordered = cols[::-1].copy()
    for bad_cols, end in ((cols, len(buf) + 1), (past_end, batch.end), (shifted, batch.end),
                          (unordered, batch.end), (cols, batch.end - 1)):
        assert splice_records(buf, bad_cols, keep, end, *args)[1] == -1
    assert splice_records(buf, cols, keep[1:], batch.end, *args)[1] == -1
