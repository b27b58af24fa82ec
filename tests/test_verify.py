"""verify_log_dir on clean log dirs (Kafka's golden fixture, and dirs built from
kafka-python batches with indexes computed here by the broker's append rule) and on
each kind of injected defect: right file, right byte position, right complaint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import storage
from jobs import cli
from readers.records import ABORT
from readers.errors import Problem
from tools.verify import verify_log_dir
from tests.support import (
    FIXTURE_INPUT,
    OFFSET_ENTRY,
    TIME_ENTRY,
    TS0,
    TXN_ENTRY,
    checkpoint_text,
    hand_control_batch,
    hand_v2_batch,
    hand_varint,
    make_batches,
    seg_path,
    write_partition,
)

@pytest.fixture
def clean_dir(tmp_path: Path) -> Path:
    """Two topics (one with '.' and '-' in its name), three segments with codecs, an aborted
    transaction and its txnindex entry, a preallocated active index, checkpoints, a -delete dir."""
    root = tmp_path / "logs"
    aborted = make_batches(30, 1, 3, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    marker = hand_control_batch(ABORT, offset=33, timestamp=TS0 + 330, producer_id=7, producer_epoch=0, coordinator_epoch=2)
    seg0 = make_batches(0, 6, codecs=(0, 1, 2, 3, 4)) + aborted + [marker]
    write_partition(root / "orders-0", [(0, seg0), (34, make_batches(34, 6, codecs=(4, 0))), (64, make_batches(64, 3))],
                    txns={0: TXN_ENTRY.pack(0, 7, 30, 33, 30)})
    part = write_partition(root / "page.views-v2-3", [(0, make_batches(0, 4))])
    index = seg_path(part, 0, "index")
    index.write_bytes(index.read_bytes() + bytes(8 * 64))  # an active segment's preallocation
    (root / "orders-2-delete").mkdir()
    (root / "orders-2-delete" / "junk.log").write_bytes(b"garbage")
    (root / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("orders", 0, 34), ("page.views-v2", 3, 0)]))
    (root / "recovery-point-offset-checkpoint").write_bytes(checkpoint_text([("orders", 0, 67)]))
    return root


def problems_of(root: Path) -> list[str]:
    return [str(p) for p in verify_log_dir(str(root))]


# -- clean dirs -----------------------------------------------------------------------------
def test_kafka_written_fixture_is_clean(tmp_path):
    root = tmp_path / "input"
    shutil.copytree(FIXTURE_INPUT, root)
    assert verify_log_dir(str(root)) == []
    assert cli.main(["verify", str(root)]) == 0


def test_built_dir_is_clean(clean_dir):
    assert seg_path(clean_dir / "orders-0", 0, "index").stat().st_size >= 2 * OFFSET_ENTRY.size
    assert problems_of(clean_dir) == []


def test_problem_str_names_file_and_byte():
    assert str(Problem("/a/b.log", 17, "bad")) == "/a/b.log: byte 17: bad"
    assert str(Problem("/a/b.log", None, "bad")) == "/a/b.log: bad"


# -- offsets -------------------------------------------------------------------------------
def test_offsets_going_back_across_segments(tmp_path):
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 4)), (20, make_batches(15, 2))])
    log1 = seg_path(part, 20, "log")
    found = problems_of(tmp_path)
    assert f"{log1}: byte 0: batch at offset 15: offsets 15..19 do not follow the previous last offset 19" in found
    assert f"{log1}: byte 0: batch at offset 15: offset 15 is below the segment's base offset 20 (from its name)" in found


def test_segment_running_into_the_next_one(tmp_path):
    first = make_batches(0, 5)
    part = write_partition(tmp_path / "t-0", [(0, first), (20, make_batches(25, 2))])
    last_pos = sum(len(b) for b in first[:-1])
    assert (f"{seg_path(part, 0, 'log')}: byte {last_pos}: batch at offset 20: last offset 24 reaches the next "
            f"segment's base offset 20") in problems_of(tmp_path)


def test_offsets_going_back_inside_a_segment(tmp_path):
    batches = make_batches(0, 2) + make_batches(3, 1)
    part = write_partition(tmp_path / "t-0", [(0, batches)])
    pos = len(batches[0]) + len(batches[1])
    assert (f"{seg_path(part, 0, 'log')}: byte {pos}: batch at offset 3: offsets 3..7 do not follow the previous "
            f"last offset 9") in problems_of(tmp_path)


def test_every_crc_error_is_listed(tmp_path):
    """CRC errors do not stop the reading: framing is intact, later batches are still checked."""
    batches = [bytearray(b) for b in make_batches(0, 3)]
    for b in (batches[0], batches[2]):
        b[40] ^= 0xFF  # inside maxTimestamp: covered by the CRC, not by record framing
    part = write_partition(tmp_path / "t-0", [(0, [bytes(b) for b in batches])])
    found = [p for p in verify_log_dir(str(tmp_path)) if "CRC mismatch" in p.what]
    assert [(p.path, p.position) for p in found] == [(str(seg_path(part, 0, "log")), 0),
                                                      (str(seg_path(part, 0, "log")), len(batches[0]) + len(batches[1]))]


def test_record_offset_outside_its_batch(tmp_path):
    """A valid-CRC batch whose record's offset delta (3) exceeds its lastOffsetDelta (0)."""
    body = b"\x00" + hand_varint(0) + hand_varint(3) + hand_varint(1) + b"k" + hand_varint(1) + b"v" + hand_varint(0)
    bad = hand_v2_batch(hand_varint(len(body)) + body, base_offset=5, count=1, last_offset_delta=0,
                        first_timestamp=TS0, max_timestamp=TS0)
    first = make_batches(0, 1)
    part = write_partition(tmp_path / "t-0", [(0, first + [bad])])
    assert problems_of(tmp_path) == [f"{seg_path(part, 0, 'log')}: byte {len(first[0])}: batch at offset 5: record "
                                     f"offset 8 breaks the batch's increasing range 5..5 (previous 4)"]


# -- offset index ----------------------------------------------------------------------------
def test_index_entry_pointing_mid_batch(clean_dir):
    index = seg_path(clean_dir / "orders-0", 0, "index")
    data = bytearray(index.read_bytes())
    rel, pos = OFFSET_ENTRY.unpack_from(data, OFFSET_ENTRY.size)
    OFFSET_ENTRY.pack_into(data, OFFSET_ENTRY.size, rel, pos + 3)
    index.write_bytes(bytes(data))
    assert problems_of(clean_dir) == [f"{index}: byte 8: position {pos + 3} (offset {rel}) is not the start of a batch"]


def test_index_entry_after_its_batch(tmp_path):
    batches = make_batches(0, 4)
    part = write_partition(tmp_path / "t-0", [(0, batches)])
    index = seg_path(part, 0, "index")
    # offset 9 (batch 1, at len(batches[0])) claimed to start at batch 2's position
    index.write_bytes(OFFSET_ENTRY.pack(9, len(batches[0]) + len(batches[1])))
    assert problems_of(tmp_path) == [f"{index}: byte 0: offset 9 is in the batch at position {len(batches[0])}, "
                                     f"before the entry's position {len(batches[0]) + len(batches[1])}"]


def test_index_entries_not_increasing_and_outside(tmp_path):
    batches = make_batches(0, 4)
    part = write_partition(tmp_path / "t-0", [(0, batches)])
    index = seg_path(part, 0, "index")
    p1, p2 = len(batches[0]), len(batches[0]) + len(batches[1])
    index.write_bytes(OFFSET_ENTRY.pack(14, p2) + OFFSET_ENTRY.pack(9, p1) + OFFSET_ENTRY.pack(99, p2 + len(batches[2])))
    found = problems_of(tmp_path)
    assert f"{index}: byte 8: entry (offset 9, position {p1}) does not strictly follow (offset 14, position {p2})" in found
    assert f"{index}: byte 16: offset 99 lies outside the segment's offsets 0..19" in found


def test_index_with_a_partial_entry(tmp_path):
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 2))])
    index = seg_path(part, 0, "index")
    index.write_bytes(b"\x00\x00\x00\x04\x00\x00")
    assert problems_of(tmp_path) == [f"{index}: byte 0: file size 6 is not a multiple of the 8-byte entry size"]


def test_missing_indexes_of_a_closed_segment(clean_dir):
    part = clean_dir / "orders-0"
    seg_path(part, 34, "index").unlink()
    seg_path(part, 34, "timeindex").unlink()
    seg_path(part, 64, "index").unlink()  # the active segment's: a broker just creates it
    assert problems_of(clean_dir) == [
        f"{seg_path(part, 34, kind)}: missing for a closed segment (Kafka rebuilds it, but it should be there)"
        for kind in ("index", "timeindex")
    ]


# -- time index ------------------------------------------------------------------------------
def test_time_index_last_entry_not_the_max_timestamp(clean_dir):
    timeindex = seg_path(clean_dir / "orders-0", 34, "timeindex")
    data = bytearray(timeindex.read_bytes())
    n = len(data) // TIME_ENTRY.size
    assert n >= 2
    ts, rel = TIME_ENTRY.unpack_from(data, (n - 1) * TIME_ENTRY.size)
    TIME_ENTRY.pack_into(data, (n - 1) * TIME_ENTRY.size, ts - 1, rel)
    timeindex.write_bytes(bytes(data))
    assert problems_of(clean_dir) == [f"{timeindex}: byte {(n - 1) * 12}: last entry's timestamp {ts - 1} is not the "
                                      f"segment's largest timestamp {ts}"]


def test_time_index_out_of_order(tmp_path):
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 4)), (20, make_batches(20, 1))])
    timeindex = seg_path(part, 0, "timeindex")
    timeindex.write_bytes(TIME_ENTRY.pack(TS0 + 190, 19) + TIME_ENTRY.pack(TS0 + 90, 9) + TIME_ENTRY.pack(TS0 + 190, 25))
    found = problems_of(tmp_path)
    assert f"{timeindex}: byte 12: timestamp {TS0 + 90} does not increase on {TS0 + 190}" in found
    assert f"{timeindex}: byte 12: offset 9 decreases from 19" in found
    assert f"{timeindex}: byte 24: offset 25 lies outside the segment's offsets 0..19" in found


def test_closed_segment_without_time_index_entries(tmp_path):
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 2)), (10, make_batches(10, 1))])
    timeindex = seg_path(part, 0, "timeindex")
    timeindex.write_bytes(b"")
    assert problems_of(tmp_path) == [f"{timeindex}: no entry for the segment's largest timestamp {TS0 + 90}"]


# -- txn index, leftovers, names, empty segments -----------------------------------------------
def test_txn_index_defects(clean_dir):
    txnindex = seg_path(clean_dir / "orders-0", 0, "txnindex")
    txnindex.write_bytes(TXN_ENTRY.pack(0, 7, 33, 30, 30) + TXN_ENTRY.pack(0, 8, 30, 40, 30))
    assert problems_of(clean_dir) == [
        f"{txnindex}: byte 0: producer 7: first offset 33 is after last offset 30",
        f"{txnindex}: byte 34: producer 8: last offset 40 is after the segment's last offset 33",
    ]


def test_txn_index_unknown_version(clean_dir):
    txnindex = seg_path(clean_dir / "orders-0", 0, "txnindex")
    txnindex.write_bytes(TXN_ENTRY.pack(0, 7, 30, 33, 30) + TXN_ENTRY.pack(1, 7, 30, 33, 30))
    assert problems_of(clean_dir) == [f"{txnindex}: byte 34: unknown aborted-transaction entry version 1"]


@pytest.mark.parametrize("suffix", [".swap", ".cleaned", ".deleted"])
def test_leftover_files(clean_dir, suffix):
    leftover = clean_dir / "orders-0" / f"{34:020d}.log{suffix}"
    leftover.write_bytes(b"")
    (found,) = verify_log_dir(str(clean_dir))
    assert (found.path, found.position) == (str(leftover), None)
    assert f"({suffix})" in found.what


def test_misnamed_files_and_dirs(clean_dir):
    part = clean_dir / "orders-0"
    (part / "123.log").write_bytes(b"")
    (part / "foo.log").write_bytes(b"")
    (clean_dir / "no_partition_number").mkdir()
    assert sorted(problems_of(clean_dir)) == sorted([
        f"{part / '123.log'}: not a Kafka segment file name",
        f"{part / 'foo.log'}: not a Kafka segment file name",
        f"{clean_dir / 'no_partition_number'}: directory name is not <topic>-<partition>",
    ])


def test_index_without_its_log(clean_dir):
    part = clean_dir / "orders-0"
    seg_path(part, 50, "index").write_bytes(b"")
    assert problems_of(clean_dir) == [f"{part}: index files for base offset 50 but no {50:020d}.log"]


def test_empty_segment_that_is_not_active_is_accepted(tmp_path):
    """Kafka's cleaner swaps in an empty segment when a whole group loses every batch."""
    write_partition(tmp_path / "t-0", [(0, make_batches(0, 2)), (10, []), (10 + 1, make_batches(11, 1))])
    assert problems_of(tmp_path) == []


def test_empty_active_segment_is_fine(tmp_path):
    write_partition(tmp_path / "t-0", [(0, make_batches(0, 2)), (10, [])])
    assert problems_of(tmp_path) == []


# -- checkpoints -------------------------------------------------------------------------------
def test_cleaner_checkpoint_naming_a_missing_partition(clean_dir):
    text = checkpoint_text([("orders", 0, 34), ("gone", 5, 10)])
    (clean_dir / "cleaner-offset-checkpoint").write_bytes(text)
    line = text.index(b"gone")
    assert problems_of(clean_dir) == [
        f"{clean_dir / 'cleaner-offset-checkpoint'}: byte {line}: entry for gone-5, which has no partition directory"
    ]


def test_every_checkpoint_must_parse(clean_dir):
    (clean_dir / "log-start-offset-checkpoint").write_bytes(b"1\n0\n")
    assert problems_of(clean_dir) == [
        f"{clean_dir / 'log-start-offset-checkpoint'}: byte 0: unsupported checkpoint version '1' (expected 0)"
    ]


# -- S3 --------------------------------------------------------------------------------------
def test_verify_on_s3(s3_endpoint, clean_dir):
    fs, _ = storage.resolve("s3://verify-bucket")
    fs.call_s3("create_bucket", Bucket="verify-bucket")  # mkdir would send us-east-1 as a location constraint
    fs.put(str(clean_dir) + "/", "verify-bucket/logs", recursive=True)
    assert verify_log_dir("s3://verify-bucket/logs") == []
    seg = seg_path(clean_dir / "orders-0", 34, "log")
    data = bytearray(seg.read_bytes())
    data[40] ^= 1
    fs.pipe_file("verify-bucket/logs/orders-0/" + seg.name, bytes(data))
    (found,) = verify_log_dir("s3://verify-bucket/logs")
    assert (found.path, found.position) == (f"s3://verify-bucket/logs/orders-0/{seg.name}", 0)
    assert "CRC mismatch" in found.what
