"""Acceptance against a log dir written by Apache Kafka's own code (kafka-clients 3.9.1 and
the broker's segment/index rules): our reader must list exactly the records and batches
Kafka's side listed, our index builder must reproduce Kafka's index files, and our
encoder must reproduce or faithfully re-encode every batch.

Listing format: /work/shared/fixtures/kafka-written/README.md.
"""

from __future__ import annotations

import hashlib
import io
import struct
from functools import cache
from pathlib import Path

import pytest

from readers import checkpoint, codecs
from readers.indexes import parse_txn_index
from readers.records import CONTROL_TYPES
from readers.segment import iter_batches
from tests.support import FIXTURE_DIR, FIXTURE_INPUT, kp_decode_v2
from writers.batch import encode_like
from writers.segment import SegmentWriter

SEGMENTS = sorted(FIXTURE_INPUT.glob("*-*/*.log"), key=lambda p: (p.parent.name.rsplit("-", 1)[0],
                                                                     int(p.parent.name.rsplit("-", 1)[1]), p.name))


def seg_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@cache
def segment_batches(path: Path) -> list:
    with open(path, "rb") as f:
        return list(iter_batches(f, str(path)))


def topic_partition(path: Path) -> tuple[str, int]:
    topic, _, partition = path.parent.name.rpartition("-")
    return topic, int(partition)


# -- the listing, written from the README's definition ------------------------------------
def short_hash(data: bytes, hex_chars: int) -> str:
    return hashlib.sha256(data).hexdigest()[:hex_chars]


def key_text(key: bytes | None) -> str:
    if key is None:
        return "NULL"
    return "sha256:" + short_hash(key, 32) if len(key) > 64 else key.hex()


def value_text(value: bytes | None) -> str:
    return "NULL" if value is None else short_hash(value, 32)


def headers_text(headers) -> str:
    if not headers:
        return "0"
    blob = b""
    for hkey, hvalue in headers:
        k = hkey.encode("utf-8", "surrogateescape")
        blob += struct.pack(">i", len(k)) + k
        blob += struct.pack(">i", -1) if hvalue is None else struct.pack(">i", len(hvalue)) + hvalue
    return f"{len(headers)}:{short_hash(blob, 16)}"


def flags_text(batch) -> str:
    flags = ("c" if batch.is_control else "d") + ("T" if batch.is_transactional else "")
    if batch.is_control:
        flags += ":" + CONTROL_TYPES[batch.control_type()]
    return flags


def record_lines(path: Path) -> list[str]:
    topic, partition = topic_partition(path)
    lines = []
    for batch in segment_batches(path):
        records = batch.records()
        flags = flags_text(batch)
        if not records:
            lines.append(f"{topic}\t{partition}\t{batch.base_offset}\tE\tlast={batch.last_offset}\t-\t-\t-\t"
                         f"{flags}\t{batch.producer_id}")
        for r in records:
            lines.append("\t".join(map(str, (
                topic, partition, r.offset, "R", r.timestamp, key_text(r.key), value_text(r.value),
                headers_text(r.headers), flags, batch.producer_id))))
    return lines


def batch_lines(path: Path) -> list[str]:
    topic, partition = topic_partition(path)
    return [
        f"{topic}\t{partition}\t{b.base_offset}\tB\tlast={b.last_offset}\tcount={b.count}\t"
        f"codec={codecs.name(b.codec)}\tflags={flags_text(b)}\tpid={b.producer_id}\tepoch={b.producer_epoch}\t"
        f"seq={b.base_sequence}\tmaxTs={b.max_timestamp}\tdeleteHorizon={b.delete_horizon_ms}\t"
        f"leaderEpoch={b.partition_leader_epoch}"
        for b in segment_batches(path)
    ]


def expected_lines(name: str) -> list[str]:
    return (FIXTURE_DIR / name).read_text().splitlines()


def assert_same_lines(ours: list[str], expected: list[str]) -> None:
    for i, (a, b) in enumerate(zip(ours, expected)):
        assert a == b, f"line {i + 1} differs"
    assert len(ours) == len(expected)


def test_record_listing_equals_kafkas():
    assert_same_lines([line for p in SEGMENTS for line in record_lines(p)], expected_lines("input.records.tsv"))


def test_batch_listing_equals_kafkas():
    assert_same_lines([line for p in SEGMENTS for line in batch_lines(p)], expected_lines("input.batches.tsv"))


def test_fixture_covers_what_it_claims():
    """Guards the two tests above against a fixture that silently lost its variety."""
    batches = [b for p in SEGMENTS for b in segment_batches(p)]
    assert {b.codec for b in batches} == set(codecs.NAMES)
    assert {b.control_type() for b in batches if b.is_control} == set(CONTROL_TYPES)
    records = [r for b in batches if not b.is_control for r in b.records()]
    assert any(r.value is None for r in records) and any(r.key is None for r in records)
    assert any(r.headers for r in records)


# -- indexes ------------------------------------------------------------------------------
@pytest.mark.parametrize("log", SEGMENTS, ids=seg_id)
def test_rebuilt_indexes_equal_kafkas(log):
    base = int(log.stem)
    writer = SegmentWriter(io.BytesIO(), base)
    for b in segment_batches(log):
        writer.append(b.data, b.last_offset, b.max_timestamp, b.last_offset)
    files = writer.close()
    assert files.log_size == log.stat().st_size
    assert files.offset_index == log.with_suffix(".index").read_bytes()
    assert files.time_index == log.with_suffix(".timeindex").read_bytes()


TXN_INDEXES = sorted(FIXTURE_INPUT.glob("*-*/*.txnindex"))


def test_fixture_has_aborted_transactions():
    assert TXN_INDEXES and any(p.stat().st_size for p in TXN_INDEXES)


@pytest.mark.parametrize("txnindex", TXN_INDEXES, ids=seg_id)
def test_txnindex_entries_name_abort_markers_of_their_segment(txnindex):
    batches = segment_batches(txnindex.with_suffix(".log"))
    aborts = {b.base_offset: b.producer_id for b in batches if b.is_control and b.control_type() == 0}
    partition_batches = [b for log in sorted(txnindex.parent.glob("*.log")) for b in segment_batches(log)]
    txn_starts = {(b.producer_id, b.base_offset) for b in partition_batches if b.is_transactional and not b.is_control}
    entries = parse_txn_index(str(txnindex), txnindex.read_bytes())
    assert len(entries) * 34 == txnindex.stat().st_size
    for e in entries:
        assert aborts.get(e.last_offset) == e.producer_id, e
        assert (e.producer_id, e.first_offset) in txn_starts, e
        assert e.first_offset <= e.last_offset


def test_cleaner_offset_checkpoint_parses():
    path = FIXTURE_INPUT / "cleaner-offset-checkpoint"
    text = path.read_bytes()
    assert checkpoint.parse(str(path), text) == {("accounts", 1): 2080}
    assert checkpoint.render(checkpoint.parse(str(path), text)) == text


@pytest.mark.parametrize("name", ["after-round1.cleaner-offset-checkpoint", "after-round2.cleaner-offset-checkpoint"])
def test_golden_result_checkpoints_parse(name):
    entries = checkpoint.parse(name, (FIXTURE_DIR / name).read_bytes())
    assert set(entries) <= {("accounts", 0), ("accounts", 1)} and entries


# -- re-encoding ------------------------------------------------------------------------------
@pytest.mark.parametrize("log", SEGMENTS, ids=seg_id)
def test_every_batch_re_encodes_faithfully(log):
    for b in segment_batches(log):
        records = b.records()
        again = encode_like(b, records)
        if b.codec == codecs.NONE:
            assert again == bytes(b.data), f"batch at offset {b.base_offset}"
            continue
        kp, kp_records = kp_decode_v2(again)
        assert kp_records == records, f"batch at offset {b.base_offset}"
        assert (kp.base_offset, kp.last_offset, kp.compression_type, kp.max_timestamp, kp.first_timestamp,
                kp.producer_id, kp.producer_epoch, kp.base_sequence, kp.is_transactional, kp.leader_epoch) == (
                b.base_offset, b.last_offset, b.codec, b.max_timestamp, b.base_timestamp,
                b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional, b.partition_leader_epoch)
