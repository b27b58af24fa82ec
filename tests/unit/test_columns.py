"""batch_columns against an independent implementation: segments are built with
kafka-python's batch builders and every column is compared with what kafka-python's
own reader returns for the same bytes."""

from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcompact.errors import FormatError
from kcompact.readers import codecs
from kcompact.readers.columns import SCHEMA, batch_columns
from kcompact.readers.records import COMMIT, control_key
from kcompact.readers.segment import iter_batches
from tests.support import FIXTURE_DIR, hand_control_batch, hand_v2_batch

CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]

# (key, value, headers, offset gap before the record, timestamp delta)
Spec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int, int]


def kafka_batch(
    specs: list[Spec],
    codec: int,
    base_offset: int,
    *,
    producer_id: int = -1,
    transactional: bool = False,
    log_append_time: bool = False,
    base_timestamp: int = 1_700_000_000_000,
) -> bytes:
    """One v2 batch from kafka-python's builder, placed at ``base_offset`` as a broker would.

    Unlike ``conftest.kp_build`` it accepts the builder's fallback to no compression when
    compressing does not pay, which random property-test values often trigger."""
    epoch, sequence = (0, 0) if producer_id >= 0 else (-1, -1)
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, epoch, sequence, 1 << 30)
    delta = 0
    for key, value, headers, gap, ts_delta in specs:
        delta += gap
        builder.append(delta, base_timestamp + ts_delta, key, value, headers)
        delta += 1
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # outside the CRC
    if log_append_time:
        data[22] |= 0x08
        struct.pack_into(">I", data, 17, crc32c.crc32c(memoryview(data)[21:]))
    return bytes(data)


def next_offset(batch: bytes) -> int:
    base, _, _, _, _, _, last_delta = struct.unpack_from(">qiibIhi", batch)
    return base + last_delta + 1


def kafka_rows(data: bytes) -> list[dict]:
    """The expected rows, read by kafka-python."""
    rows, position, entries = [], 0, MemoryRecords(data)
    while entries.has_next():
        entry = entries.next_batch()
        records = list(entry)
        v2 = entry.magic == 2
        for r in records:
            rows.append(
                {
                    "offset": r.offset,
                    "key": r.key,
                    "tombstone": r.value is None,
                    "timestamp": -1 if r.timestamp is None else r.timestamp,
                    # a legacy compressed wrapper is known by its first inner offset
                    "batch_base_offset": entry.base_offset if v2 else records[0].offset,
                    "batch_position": position,
                    "producer_id": entry.producer_id if v2 else -1,
                    "is_transactional": v2 and entry.is_transactional,
                    "is_control": v2 and entry.is_control_batch,
                }
            )
        position += entry.size_in_bytes
    return rows


def columns_rows(data: bytes, chunk_size: int = 1 << 20) -> list[dict]:
    table = batch_columns(iter_batches(io.BytesIO(data), "mem.log", chunk_size=chunk_size))
    assert table.schema == SCHEMA
    return table.to_pylist()


def varied_specs(n: int, seed: int) -> list[Spec]:
    """Compressible records with null keys, tombstones, headers and offset gaps."""
    specs = []
    for i in range(n):
        key = None if (i + seed) % 7 == 0 else b"user-%05d" % ((i * 31 + seed) % 97)
        value = None if (i + seed) % 5 == 0 else b'{"id":%d,"status":"active","note":"%s"}' % (i, b"x" * (i % 13))
        headers = [("trace", b"%08d" % i), ("nul", None)] if i % 3 == 0 else []
        specs.append((key, value, headers, 1 if i % 11 == 10 else 0, i * 3))
    return specs


@pytest.mark.parametrize("codec", CODECS, ids=[codecs.name(c) for c in CODECS])
def test_every_codec_matches_kafka_python(codec: int) -> None:
    batches, offset = [], 0
    for b in range(4):
        batch = kafka_batch(varied_specs(60, seed=b), codec, offset, producer_id=1000 + b)
        assert batch[22] & 0x07 == codec  # the builder really compressed
        batches.append(batch)
        offset = next_offset(batch)
    data = b"".join(batches)
    expected = kafka_rows(data)
    assert len(expected) == 240
    assert columns_rows(data) == expected


def test_chunk_boundaries_do_not_change_the_columns() -> None:
    data, offset = b"", 0
    for b, codec in enumerate(CODECS):
        batch = kafka_batch(varied_specs(25, seed=b), codec, offset)
        data += batch
        offset = next_offset(batch)
    expected = kafka_rows(data)
    for chunk_size in (17, 100, 1000, 4096):
        assert columns_rows(data, chunk_size) == expected


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    data = kafka_batch(varied_specs(30, seed=1), codecs.NONE, 50, log_append_time=True)
    rows = columns_rows(data)
    assert rows == kafka_rows(data)
    assert {r["timestamp"] for r in rows} == {1_700_000_000_000 + 29 * 3}


def test_transactions_with_control_markers() -> None:
    data = kafka_batch(varied_specs(10, seed=2), codecs.LZ4, 0, producer_id=77, transactional=True)
    data += hand_control_batch(
        COMMIT, offset=10, timestamp=1_700_000_001_000, producer_id=77, producer_epoch=0, coordinator_epoch=5
    )
    data += kafka_batch(varied_specs(5, seed=3), codecs.NONE, 11)
    rows = columns_rows(data)
    assert rows == kafka_rows(data)
    assert [r["is_control"] for r in rows].count(True) == 1
    assert rows[10]["key"] == control_key(COMMIT) and rows[10]["is_transactional"]


def test_empty_batches_add_no_rows() -> None:
    first = kafka_batch(varied_specs(4, seed=0), codecs.NONE, 0)
    empty = hand_v2_batch(
        b"", base_offset=4, count=0, last_offset_delta=5, first_timestamp=-1, max_timestamp=1_700_000_000_000
    )
    last = kafka_batch(varied_specs(3, seed=0), codecs.GZIP, 10)
    rows = columns_rows(first + empty + last)
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 10, 11, 12]
    assert rows[-1]["batch_position"] == len(first) + len(empty)
    nothing = batch_columns([])
    assert nothing.num_rows == 0 and nothing.schema == SCHEMA


def legacy_entries(magic: int, codec: int, base_offset: int, n: int) -> bytes:
    """Magic v0/v1 entries from kafka-python's legacy builder, offsets as a broker assigns them."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i in range(n):
        key = None if i % 4 == 0 else b"legacy-%d" % (i % 3)
        value = None if i % 5 == 0 else b"old value %d " % i * 4
        # compressed v1 wrappers carry relative inner offsets; the others absolute ones
        builder.append(i if (codec and magic == 1) else base_offset + i, 1_600_000_000_000 + i, key, value)
    data = bytearray(builder.build())
    if codec:
        struct.pack_into(">q", data, 0, base_offset + n - 1)  # the wrapper's offset is its last
    return bytes(data)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(
    "codec", [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4], ids=["none", "gzip", "snappy", "lz4"]
)
def test_legacy_entries_fall_back_with_the_same_schema(magic: int, codec: int) -> None:
    data = legacy_entries(magic, codec, 100, 9) + legacy_entries(magic, codec, 109, 3)
    data += kafka_batch(varied_specs(5, seed=4), codecs.ZSTD, 112)
    rows = columns_rows(data)
    assert rows == kafka_rows(data)
    assert [r["offset"] for r in rows] == list(range(100, 117))


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.SNAPPY])
def test_malformed_records_raise_what_records_raises(codec: int) -> None:
    data = bytearray(kafka_batch(varied_specs(8, seed=0), codec, 0))
    struct.pack_into(">i", data, 57, 9)  # one record more than the section holds
    struct.pack_into(">i", data, 23, 8)
    struct.pack_into(">I", data, 17, crc32c.crc32c(memoryview(data)[21:]))
    (batch,) = iter_batches(io.BytesIO(bytes(data)), "bad.log")
    with pytest.raises(FormatError) as from_records:
        batch.records()
    with pytest.raises(FormatError) as from_columns:
        batch_columns([batch])
    assert str(from_columns.value) == str(from_records.value)
    assert "runs past the end" in str(from_columns.value)


def fixture_rows(partition_dir: Path) -> list[tuple]:
    """(offset, timestamp, key as the listing writes it, tombstone, control, transactional, producer)."""
    tables = []
    for log in sorted(partition_dir.glob("*.log")):
        with open(log, "rb") as f:
            tables.append(batch_columns(iter_batches(f, str(log))).to_pylist())
    return [
        (
            r["offset"],
            r["timestamp"],
            _listed_key(r["key"]),
            r["tombstone"],
            r["is_control"],
            r["is_transactional"],
            r["producer_id"],
        )
        for rows in tables
        for r in rows
    ]


def _listed_key(key: bytes | None) -> str:
    if key is None:
        return "NULL"
    if len(key) > 64:
        return "sha256:" + hashlib.sha256(key).hexdigest()[:32]
    return key.hex()


def test_kafka_written_log_dir_matches_its_record_listing() -> None:
    expected: dict[str, list[tuple]] = {}
    for line in (FIXTURE_DIR / "input.records.tsv").read_text().splitlines():
        topic, partition, offset, _, ts, key, value, _, flags, producer = line.split("\t")
        expected.setdefault(f"{topic}-{partition}", []).append(
            (int(offset), int(ts), key, value == "NULL", flags.startswith("c"), "T" in flags, int(producer))
        )
    for name, rows in expected.items():
        assert fixture_rows(FIXTURE_DIR / "input" / name) == rows, name


record_specs = st.tuples(
    st.none() | st.binary(max_size=24),
    st.none() | st.binary(max_size=80),
    st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=2),
    st.integers(0, 3),
    st.integers(-10_000, 10**9),
)
batch_specs = st.tuples(
    st.sampled_from(CODECS),
    st.lists(record_specs, max_size=25),
    st.booleans(),  # transactional
    st.booleans(),  # LogAppendTime
)


@settings(max_examples=150, deadline=None)
@given(st.lists(batch_specs, min_size=1, max_size=6), st.integers(17, 2048))
def test_property_columns_equal_kafka_python(specs: list, chunk_size: int) -> None:
    data, offset = b"", 0
    for codec, records, transactional, append_time in specs:
        batch = kafka_batch(
            records, codec, offset, producer_id=5 if transactional else -1,
            transactional=transactional, log_append_time=append_time,
        )
        data += batch
        offset = next_offset(batch)
    assert columns_rows(data, chunk_size) == kafka_rows(data)
