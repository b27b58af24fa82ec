"""Acceptance against a log dir written by Apache Kafka's own code (kafka-clients 3.9.1 and
the broker's segment/index rules): our reader must list exactly the records and batches
Kafka's side listed, our index builder must reproduce Kafka's index files, and our
encoder must reproduce or faithfully re-encode every batch.

Listing format: tests/fixtures/kafka-written/README.md.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kcompact.readers import checkpoint, codecs
from kcompact.readers.indexes import parse_txn_index
from kcompact.readers.records import CONTROL_TYPES
from kcompact.writers.checkpoint import render_checkpoint
from kcompact.writers.segment import SegmentWriter
from tests.oracles import encode_like
from tests.support import (
    FIXTURE_DIR,
    FIXTURE_INPUT,
    assert_same_lines,
    batch_lines,
    kp_decode_v2,
    log_segments,
    record_lines,
    segment_batches,
)

SEGMENTS = log_segments(FIXTURE_INPUT)


def seg_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def expected_lines(name: str) -> list[str]:
    return (FIXTURE_DIR / name).read_text().splitlines()


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
    assert render_checkpoint(checkpoint.parse(str(path), text)) == text


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


def test_fixture_ships_with_the_repository():
    """A clone alone has its golden data: the fixture is tracked in this repository, not looked up
    beside it (a clone made elsewhere, without ../shared, must pass its tests)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert FIXTURE_DIR.is_relative_to(root)
    tracked = subprocess.run(["git", "ls-files", str(FIXTURE_DIR.relative_to(root))], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
    on_disk = sorted(str(p.relative_to(root)) for p in FIXTURE_DIR.rglob("*") if p.is_file())
    assert sorted(tracked) == on_disk and "tests/fixtures/kafka-written/README.md" in tracked
