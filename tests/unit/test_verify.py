"""verify_log_dir on clean log dirs (Kafka's golden fixture, and dirs built from
kafka-python batches with indexes computed here by the broker's append rule) and on
each kind of injected defect: right file, right byte position, right complaint, and the
right kind: a problem (what a broker refuses, truncates or loses data on; ``verify`` exits 1)
or a note (a state a broker accepts and repairs by itself; exit 0, 1 with ``--strict``).
A note prints as ``note: <file>: byte <n>: ...``, so each exact string below pins the kind too."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from kcompact import errors, storage
from kcompact.errors import Problem
from kcompact.jobs import cli
from kcompact.logdir.broker_load import FOREIGN_DIR, MISSING
from kcompact.readers.records import ABORT
from kcompact.tools.verify import TAIL_NOT_TORN, TORN_TAIL, TORN_TAIL_KEPT, Note, split, verify_log_dir
from tests.support import (
    FIXTURE_DIR,
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
    marker = hand_control_batch(
        ABORT, offset=33, timestamp=TS0 + 330, producer_id=7, producer_epoch=0, coordinator_epoch=2
    )
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


def cli_verify(root: Path, capsys, *options: str) -> tuple[int, list[str], list[str]]:
    """``kcompact verify [options] root``: exit code, stdout lines, stderr lines."""
    code = cli.main(["verify", *options, str(root)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


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
    assert (
        f"{log1}: byte 0: batch at offset 15: offset 15 is below the segment's base offset 20 (from its name)" in found
    )


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
    assert [(p.path, p.position) for p in found] == [
        (str(seg_path(part, 0, "log")), 0),
        (str(seg_path(part, 0, "log")), len(batches[0]) + len(batches[1])),
    ]


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
    index.write_bytes(
        OFFSET_ENTRY.pack(14, p2) + OFFSET_ENTRY.pack(9, p1) + OFFSET_ENTRY.pack(99, p2 + len(batches[2]))
    )
    found = problems_of(tmp_path)
    assert (
        f"{index}: byte 8: entry (offset 9, position {p1}) does not strictly follow (offset 14, position {p2})" in found
    )
    assert f"{index}: byte 16: offset 99 lies outside the segment's offsets 0..19" in found


def test_index_with_a_partial_entry(tmp_path):
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 2))])
    index = seg_path(part, 0, "index")
    index.write_bytes(b"\x00\x00\x00\x04\x00\x00")
    assert problems_of(tmp_path) == [f"{index}: byte 0: file size 6 is not a multiple of the 8-byte entry size"]


def test_missing_indexes_of_a_closed_segment_are_notes(clean_dir):
    """No .index: LogLoader's sanityCheck fails with NoSuchFileException and recoverSegment
    rebuilds all three indexes from the .log."""
    part = clean_dir / "orders-0"
    seg_path(part, 34, "index").unlink()
    seg_path(part, 34, "timeindex").unlink()
    seg_path(part, 64, "index").unlink()  # the active segment's: a broker just creates it
    assert problems_of(clean_dir) == [
        f"note: {seg_path(part, 34, 'index')}: missing for a closed segment: "
        "a broker rebuilds it from the .log on load",
        f"note: {seg_path(part, 34, 'timeindex')}: missing for a closed segment: a broker rebuilds it from the .log "
        f"on load, with the missing .index",
    ]
    assert problems_of(clean_dir)[1].endswith(MISSING["both"])


def test_missing_time_index_beside_its_offset_index_is_a_note(clean_dir):
    """LogSegment.sanityCheck creates it empty (no rebuild); the segment's largest timestamp is then
    the .log's modification time. Nothing refused or lost: a note."""
    timeindex = seg_path(clean_dir / "orders-0", 34, "timeindex")
    timeindex.unlink()
    assert problems_of(clean_dir) == [f"note: {timeindex}: {MISSING['timeindex']}"]


# -- time index ------------------------------------------------------------------------------
def test_time_index_last_entry_not_the_max_timestamp(clean_dir):
    timeindex = seg_path(clean_dir / "orders-0", 34, "timeindex")
    data = bytearray(timeindex.read_bytes())
    n = len(data) // TIME_ENTRY.size
    assert n >= 2
    ts, rel = TIME_ENTRY.unpack_from(data, (n - 1) * TIME_ENTRY.size)
    TIME_ENTRY.pack_into(data, (n - 1) * TIME_ENTRY.size, ts - 1, rel)
    timeindex.write_bytes(bytes(data))
    # Kafka loads it as it is (LogSegment.sanityCheck skips the time index): a note
    assert problems_of(clean_dir) == [f"note: {timeindex}: byte {(n - 1) * 12}: last entry's timestamp {ts - 1} is not "
                                      f"the segment's largest timestamp {ts}: a broker loads it as it is and goes by "
                                      "the entry for time retention"]


def test_time_index_out_of_order(tmp_path):
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 4)), (20, make_batches(20, 1))])
    timeindex = seg_path(part, 0, "timeindex")
    timeindex.write_bytes(
        TIME_ENTRY.pack(TS0 + 190, 19) + TIME_ENTRY.pack(TS0 + 90, 9) + TIME_ENTRY.pack(TS0 + 190, 25)
    )
    found = problems_of(tmp_path)
    assert f"{timeindex}: byte 12: timestamp {TS0 + 90} does not increase on {TS0 + 190}" in found
    assert f"{timeindex}: byte 12: offset 9 decreases from 19" in found
    assert f"{timeindex}: byte 24: offset 25 lies outside the segment's offsets 0..19" in found


def test_closed_segment_without_time_index_entries(tmp_path):
    """What a broker leaves when it had to create the file itself: a note."""
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 2)), (10, make_batches(10, 1))])
    timeindex = seg_path(part, 0, "timeindex")
    timeindex.write_bytes(b"")
    assert problems_of(tmp_path) == [f"note: {timeindex}: no entry for the segment's largest timestamp {TS0 + 90}: a "
                                     "broker goes by the .log's modification time instead"]


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
def test_leftover_files_are_notes(clean_dir, suffix, capsys):
    """LogLoader deletes .cleaned and .deleted files and completes or drops .swap ones on load."""
    leftover = clean_dir / "orders-0" / f"{34:020d}.log{suffix}"
    leftover.write_bytes(b"")
    (found,) = verify_log_dir(str(clean_dir))
    assert isinstance(found, Note)
    assert (found.path, found.position) == (str(leftover), None)
    assert f"({suffix})" in found.what
    code, out, _ = cli_verify(clean_dir, capsys)
    assert code == errors.EXIT_OK and out[0] == f"note: {leftover}: {found.what}"
    assert cli_verify(clean_dir, capsys, "--strict")[0] == errors.EXIT_PROBLEMS


def test_misnamed_files_and_dirs(clean_dir):
    """A broker refuses to start on a directory not named <topic>-<partition>, and parses a base
    offset out of every .log, index and .snapshot name (foo.log fails; 123.log loads as another
    segment than the file): problems. A file of a kind it does not know it passes over: a note."""
    part = clean_dir / "orders-0"
    (part / "123.log").write_bytes(b"")
    (part / "foo.log").write_bytes(b"")
    (part / "foo.timeindex").write_bytes(b"")
    (part / "notes.txt").write_bytes(b"")
    (clean_dir / "no_partition_number").mkdir()
    assert sorted(problems_of(clean_dir)) == sorted([
        f"{part / '123.log'}: not a Kafka segment file name",
        f"{part / 'foo.log'}: not a Kafka segment file name",
        f"{part / 'foo.timeindex'}: not a Kafka segment file name",
        f"note: {part / 'notes.txt'}: not a Kafka segment file name: a broker passes over it",
        f"{clean_dir / 'no_partition_number'}: {FOREIGN_DIR}",
    ])


def test_index_without_its_log_is_a_note(clean_dir):
    """LogLoader.loadSegmentFiles deletes an orphaned index file."""
    part = clean_dir / "orders-0"
    seg_path(part, 50, "index").write_bytes(b"")
    assert problems_of(clean_dir) == [f"note: {part}: index files for base offset 50 but no {50:020d}.log: a broker "
                                      "deletes them on load"]


def test_empty_segment_that_is_not_active_is_accepted(tmp_path):
    """Kafka's cleaner swaps in an empty segment when a whole group loses every batch."""
    write_partition(tmp_path / "t-0", [(0, make_batches(0, 2)), (10, []), (10 + 1, make_batches(11, 1))])
    assert problems_of(tmp_path) == []


def test_empty_active_segment_is_fine(tmp_path):
    write_partition(tmp_path / "t-0", [(0, make_batches(0, 2)), (10, [])])
    assert problems_of(tmp_path) == []


# -- checkpoints -------------------------------------------------------------------------------
def test_cleaner_checkpoint_naming_a_missing_partition_is_a_note(clean_dir):
    """LogCleanerManager.updateCheckpoints keeps only the entries of logs the broker holds."""
    text = checkpoint_text([("orders", 0, 34), ("gone", 5, 10)])
    (clean_dir / "cleaner-offset-checkpoint").write_bytes(text)
    line = text.index(b"gone")
    assert problems_of(clean_dir) == [
        f"note: {clean_dir / 'cleaner-offset-checkpoint'}: byte {line}: entry for gone-5, which has no partition "
        "directory: Kafka's cleaner drops it"
    ]


def fixture_log_end(topic: str, partition: int) -> int:
    """The log end offset of a fixture partition, from the fixture's own batch listing."""
    with open(FIXTURE_DIR / "input.batches.tsv", newline="") as f:
        lasts = [int(row[4].removeprefix("last=")) for row in csv.reader(f, delimiter="\t")
                 if (row[0], int(row[1])) == (topic, partition)]
    return max(lasts) + 1


def test_kafka_written_dir_with_a_checkpoint_past_the_log_end_passes_with_a_note(tmp_path, capsys):
    """Issue 26, item 4: what an unclean leader election leaves (the checkpoint kept, the log
    truncated under it). Kafka's cleaner resets the entry to the log start and cleans from there
    (LogCleanerManager.cleanableOffsets): a note, exit 0; exit 1 only with --strict."""
    root = tmp_path / "input"
    shutil.copytree(FIXTURE_INPUT, root)
    end = fixture_log_end("accounts", 1)
    text = checkpoint_text([("accounts", 1, end + 1000)])
    (root / "cleaner-offset-checkpoint").write_bytes(text)
    checkpoint = root / "cleaner-offset-checkpoint"
    note = (f"note: {checkpoint}: byte {text.index(b'accounts')}: entry accounts 1 {end + 1000} is past the log end "
            f"offset {end} (accounts-1 holds offsets [0, {end})); Kafka's cleaner ignores it and cleans the whole log "
            "from its start")
    code, out, err = cli_verify(root, capsys)
    assert (code, out, err) == (errors.EXIT_OK, [note, f"{root}: OK (0 problem(s), 1 note(s): what the notes say, "
                                                       "Kafka accepts and repairs)"], [])
    code, out, err = cli_verify(root, capsys, "--strict")
    assert (code, out, err) == (errors.EXIT_PROBLEMS, [note], [f"0 problem(s), 1 note(s) found in {root} (--strict: "
                                                            "notes count)"])


def test_checkpoint_entries_outside_the_log_are_notes(clean_dir):
    """Below the log start (a log-start-offset-checkpoint moved past it) or past the log end:
    Kafka's cleaner resets both to the log start."""
    text = checkpoint_text([("orders", 0, 10), ("page.views-v2", 3, 21)])
    (clean_dir / "cleaner-offset-checkpoint").write_bytes(text)
    (clean_dir / "log-start-offset-checkpoint").write_bytes(checkpoint_text([("orders", 0, 34)]))
    found = verify_log_dir(str(clean_dir))
    assert all(isinstance(f, Note) for f in found) and len(found) == 2
    below, past = (str(f) for f in found)
    assert below.startswith(f"note: {clean_dir / 'cleaner-offset-checkpoint'}: byte {text.index(b'orders')}: "
                            "entry orders 0 10 is below the log start offset 34 (orders-0 holds offsets [34, 79))")
    assert past.startswith(f"note: {clean_dir / 'cleaner-offset-checkpoint'}: byte {text.index(b'page')}: "
                           "entry page.views-v2 3 21 is past the log end offset 20")


# -- torn tails: a note only where a restarting broker truncates bytes no complete batch was in -----
def active_with_tail(root: Path, tail: bytes) -> tuple[Path, int]:
    """t-0: a closed segment 0 (0..9) and the active segment 10 (10..19) ending in ``tail``;
    the active .log's path and the tail's byte position."""
    active = make_batches(10, 2)
    part = write_partition(root / "t-0", [(0, make_batches(0, 2)), (10, active)])
    log = seg_path(part, 10, "log")
    log.write_bytes(log.read_bytes() + tail)
    return log, sum(map(len, active))


TORN = make_batches(20, 1)[0][:40]  # a batch cut off by the crash


def test_torn_tail_of_the_active_segment_is_a_note(tmp_path, capsys):
    log, at = active_with_tail(tmp_path, TORN)
    (found,) = verify_log_dir(str(tmp_path))
    assert isinstance(found, Note) and (found.path, found.position) == (str(log), at)
    assert found.what == f"torn batch: entry at offset 20 needs {len(make_batches(20, 1)[0])} bytes, the file ends " \
                         f"after 40 ({TORN_TAIL})"
    assert cli_verify(tmp_path, capsys)[0] == errors.EXIT_OK
    assert cli_verify(tmp_path, capsys, "--strict")[0] == errors.EXIT_PROBLEMS


@pytest.mark.parametrize("tail", ["zeros", "last batch's CRC"])
def test_other_interrupted_appends_are_notes(tmp_path, tail):
    """Zeros (preallocated or never written) and a last batch whose bytes did not all reach the
    disk: LogSegment.recover truncates them, nothing valid follows."""
    data = bytes(100) if tail == "zeros" else bytearray(make_batches(20, 1)[0])
    if tail != "zeros":
        data[-1] ^= 0xFF
    log, at = active_with_tail(tmp_path, bytes(data))
    found = verify_log_dir(str(tmp_path))
    assert found and all(isinstance(f, Note) and f.path == str(log) and f.position >= at for f in found)
    assert found[0].position == at and found[0].what.endswith(f"({TORN_TAIL})")


def test_torn_tail_after_a_clean_shutdown_is_a_problem(tmp_path):
    """With .kafka_cleanshutdown a broker skips recovery (LogLoader.recoverLog): it keeps the bytes."""
    log, at = active_with_tail(tmp_path, TORN)
    (tmp_path / ".kafka_cleanshutdown").write_bytes(b'{"version":0,"brokerEpoch":10}')
    (found,) = verify_log_dir(str(tmp_path))
    assert type(found) is Problem and (found.path, found.position) == (str(log), at)
    assert found.what.endswith(f"({TORN_TAIL_KEPT})")


def test_unknown_magic_ending_the_active_segment_is_a_problem(tmp_path):
    """No interrupted append leaves one; the broker's recovery would cut there, losing the
    complete batch after it."""
    bad = bytearray(make_batches(20, 1)[0])
    bad[16] = 7  # magic
    log, at = active_with_tail(tmp_path, bytes(bad) + make_batches(25, 1)[0])
    (found,) = verify_log_dir(str(tmp_path))
    assert type(found) is Problem and (found.path, found.position) == (str(log), at)
    assert found.what.startswith("unknown magic 7") and found.what.endswith(f"({TAIL_NOT_TORN})")


def test_torn_batch_in_a_closed_segment_is_a_problem(tmp_path):
    part = write_partition(tmp_path / "t-0", [(0, make_batches(0, 2)), (10, make_batches(10, 1))])
    log = seg_path(part, 0, "log")
    log.write_bytes(log.read_bytes() + TORN)
    (found,) = verify_log_dir(str(tmp_path))
    assert type(found) is Problem and found.path == str(log)
    assert found.what.startswith("torn batch: entry at offset 20") and "(" not in found.what


# -- the command line: problems, then notes, then both counts ------------------------------------
def test_cli_lists_problems_then_notes_and_counts_both(clean_dir, capsys):
    leftover = clean_dir / "orders-0" / f"{34:020d}.log.deleted"
    leftover.write_bytes(b"")
    seg = seg_path(clean_dir / "orders-0", 34, "log")
    data = bytearray(seg.read_bytes())
    data[40] ^= 1
    seg.write_bytes(bytes(data))
    problems, notes = split(verify_log_dir(str(clean_dir)))
    assert [type(p) for p in problems] == [Problem] and [type(n) for n in notes] == [Note]
    code, out, err = cli_verify(clean_dir, capsys)
    assert code == errors.EXIT_PROBLEMS
    assert out == [str(problems[0]), str(notes[0])] and out[0].startswith(f"{seg}: byte 0: batch at offset 34: CRC")
    assert out[1].startswith(f"note: {leftover}: ")
    assert err == [f"1 problem(s), 1 note(s) found in {clean_dir}"]


def test_cli_on_a_clean_dir(clean_dir, capsys):
    assert cli_verify(clean_dir, capsys) == (errors.EXIT_OK, [f"{clean_dir}: OK (0 problem(s), 0 note(s))"], [])
    assert cli_verify(clean_dir, capsys, "--strict")[0] == errors.EXIT_OK


OFFLINE = ("a broker that reads it marks this log dir offline (CheckpointFileWithFailureHandler) and stops serving "
           "and cleaning it; fix or remove the file")


def test_every_checkpoint_must_parse(clean_dir):
    (clean_dir / "replication-offset-checkpoint").write_bytes(b"1\n0\n")
    assert problems_of(clean_dir) == [
        f"{clean_dir / 'replication-offset-checkpoint'}: byte 0: unsupported checkpoint version '1' (expected 0): "
        + OFFLINE
    ]


@pytest.mark.parametrize("name", ["log-start-offset-checkpoint", "recovery-point-offset-checkpoint"])
def test_checkpoints_a_broker_loads_without(clean_dir, name):
    """LogManager.loadLogs reads the recovery points and log starts and, on any exception, loads the
    logs without them; but CheckpointFileWithFailureHandler has marked the log dir offline first on an
    IOException (a bad version): only a NumberFormatException (a non-numeric offset) passes it by."""
    (clean_dir / name).write_bytes(b"1\n0\n")
    assert problems_of(clean_dir) == [f"{clean_dir / name}: byte 0: unsupported checkpoint version '1' (expected 0): "
                                      + OFFLINE]
    (clean_dir / name).write_bytes(b"0\n1\norders 0 x5\n")
    reset = {"log-start-offset-checkpoint": "takes each log's first segment's base offset as its log start on load",
             "recovery-point-offset-checkpoint": "resets every recovery point to 0 on load (and recovers every "
                                                 "segment)"}[name]
    assert problems_of(clean_dir) == [f"note: {clean_dir / name}: byte 4: line 3 'orders 0 x5' has a non-numeric "
                                      f"partition or offset: a broker that cannot read it {reset}"]


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
