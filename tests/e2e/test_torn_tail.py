"""What a crashed broker leaves (issue 13, item 3): a torn tail at the end of the active segment.

Kafka's rules (LogLoader.recoverLog, LogSegment.recover): after an unclean shutdown a broker
validates the batches from its recovery point on, which always includes the active segment,
truncates the segment at the first invalid batch, and rebuilds its indexes. So a torn tail is no
corruption: the planner and the job take the log as ending before it (the partition stays
cleanable), and ``kcompact recover`` truncates it as the broker would. A bad batch followed by a
valid one, or one inside a closed segment, is corruption: left alone and reported.

Every batch is built with kafka-python and struct; expected lengths, offsets and index contents
are worked out from those bytes here, and the results are read back with kafka-python.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact.jobs.cli import main
from kcompact.readers.records import Record
from kcompact.tools.verify import Note, verify_log_dir
from tests.support import (
    TIME_ENTRY,
    TXN_ENTRY,
    checkpoint_text,
    hand_control_batch,
    kp_build,
    kp_keyed,
    seg_path,
    write_partition,
)

NOW = 1_720_300_000_000
TS = NOW - 3_600_000
PID = 7
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]

CLOSED_0 = kp_keyed(0, [b"a", b"a", b"b"], TS)  # 0..2
CLOSED_3 = kp_keyed(3, [b"b", b"c"], TS)  # 3..4
TXN_5 = kp_build([Record(5, TS, b"t", b"aborted"), Record(6, TS, b"u", b"aborted")], base_offset=5, producer_id=PID,
                 producer_epoch=0, base_sequence=0, transactional=True)
ABORT_7 = hand_control_batch(0, offset=7, timestamp=TS, producer_id=PID, producer_epoch=0, coordinator_epoch=0)
GOOD_8 = kp_keyed(8, [b"d", b"e"], TS + 10)  # 8..9: the last valid batch; the log ends at 10
TORN_10 = kp_keyed(10, [b"f", b"g", b"h"], TS + 20)[:40]  # a batch cut off by the crash
ACTIVE = [TXN_5, ABORT_7, GOOD_8]
VALID = len(b"".join(ACTIVE))


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def crashed(part: Path, tail: bytes = TORN_10) -> Path:
    """Closed segments 0 and 3, active segment 5 ending in ``tail``; its .txnindex holds the abort
    at 7 and one whose marker (offset 12) was in the lost bytes."""
    write_partition(part, [(0, [CLOSED_0]), (3, [CLOSED_3]), (5, ACTIVE)])
    with open(seg_path(part, 5, "log"), "ab") as f:
        f.write(tail)
    seg_path(part, 5, "txnindex").write_bytes(TXN_ENTRY.pack(0, PID, 5, 7, 8) + TXN_ENTRY.pack(0, PID + 1, 10, 12, 13))
    return part


@pytest.fixture
def log_dir(tmp_path) -> Path:
    crashed(tmp_path / "logs" / "orders-0")
    return tmp_path / "logs"


def test_recover_truncates_the_torn_tail_and_rebuilds_the_indexes(log_dir, capsys):
    part = log_dir / "orders-0"
    closed_before = {k: v for k, v in files(part).items() if not k.startswith(f"{5:020d}")}
    assert main(["recover", str(log_dir)]) == 0
    out = capsys.readouterr().out
    assert (f"{5:020d}.log: {len(TORN_10)} bytes from byte {VALID} (torn batch: entry at offset 10 needs "
            in out) and "the log now ends at offset 10" in out
    log = seg_path(part, 5, "log").read_bytes()
    assert log == b"".join(ACTIVE)  # exactly the valid batches, byte for byte
    assert [b.base_offset for b in MemoryRecords(log)] == [5, 7, 8]
    assert all(b.validate_crc() for b in MemoryRecords(log))
    # LogSegment.recover's index: an entry when more than index.interval.bytes (4096) passed: none here;
    # the time index gets the closing entry (largest timestamp, its offset)
    assert seg_path(part, 5, "index").read_bytes() == b""
    assert seg_path(part, 5, "timeindex").read_bytes() == TIME_ENTRY.pack(TS + 10, 9 - 5)
    # the abort whose marker is at 7 stays; the one whose marker was lost goes
    assert seg_path(part, 5, "txnindex").read_bytes() == TXN_ENTRY.pack(0, PID, 5, 7, 8)
    assert {k: v for k, v in files(part).items() if not k.startswith(f"{5:020d}")} == closed_before
    assert verify_log_dir(str(log_dir)) == []
    again = files(log_dir)
    assert main(["recover", str(log_dir)]) == 0  # nothing left to do
    assert files(log_dir) == again


@pytest.mark.parametrize("tail, what", [
    (bytes(64), "zero-filled bytes start here"),
    (TORN_10[:10], "torn tail: 10 bytes left"),
    (bytearray(kp_keyed(10, [b"f"], TS)), "batch at offset 10: CRC mismatch"),  # the last batch, its CRC broken
])
def test_every_kind_of_torn_tail_is_cut_at_its_start(tmp_path, tail, what, capsys):
    if isinstance(tail, bytearray):
        tail[-1] ^= 0xFF
        tail = bytes(tail)
    crashed(tmp_path / "orders-0", tail)
    assert main(["recover", str(tmp_path)]) == 0
    assert what in capsys.readouterr().out
    assert seg_path(tmp_path / "orders-0", 5, "log").read_bytes() == b"".join(ACTIVE)


def test_a_bad_batch_with_valid_ones_after_it_is_not_cut(tmp_path, capsys):
    bad = bytearray(kp_keyed(10, [b"f"], TS))
    bad[-1] ^= 0xFF
    crashed(tmp_path / "orders-0", bytes(bad) + kp_keyed(11, [b"g"], TS))
    before = files(tmp_path)
    main(["recover", str(tmp_path)])
    assert files(tmp_path) == before  # corruption, not a torn write: nothing may be cut
    problems = verify_log_dir(str(tmp_path))
    assert any("CRC mismatch" in p.what and "torn tail" not in p.what for p in problems)


def test_a_torn_batch_in_a_closed_segment_is_left_alone(tmp_path, capsys):
    part = tmp_path / "orders-0"
    write_partition(part, [(0, [CLOSED_0]), (3, [CLOSED_3]), (5, ACTIVE)])
    with open(seg_path(part, 3, "log"), "ab") as f:
        f.write(TORN_10)
    before = files(tmp_path)
    main(["recover", str(tmp_path)])
    assert files(tmp_path) == before


def test_verify_names_the_torn_tail_and_the_way_out(log_dir):
    # the torn tail is a note (a restarting broker truncates it); the .txnindex entry whose marker was lost with
    # the tail points outside the log: a problem
    problem, txn = verify_log_dir(str(log_dir))
    assert isinstance(problem, Note) and not isinstance(txn, Note)
    assert (txn.path, txn.position) == (str(seg_path(log_dir / "orders-0", 5, "txnindex")), TXN_ENTRY.size)
    assert (problem.path, problem.position) == (str(seg_path(log_dir / "orders-0", 5, "log")), VALID)
    assert problem.what.startswith("torn batch: entry at offset 10 needs ")
    assert problem.what.endswith("(a torn tail of the active segment, what a broker crash leaves: 'kcompact recover' "
                                 "truncates it as a restarting broker would)")


def test_compact_cleans_a_partition_with_a_torn_tail_and_leaves_the_tail_to_recover(spark, log_dir, capsys):
    part = log_dir / "orders-0"
    active = seg_path(part, 5, "log").read_bytes()
    assert main(["plan", str(log_dir), "--now", str(NOW), *COMPACT]) == 0
    plan_out = capsys.readouterr().out
    assert f"note: {seg_path(part, 5, 'log')}: byte {VALID}: torn batch" in plan_out
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == 0  # not uncleanable, not partial
    out = capsys.readouterr().out
    assert "Log cleaner thread 0 cleaned log orders-0 (dirty section = [0, 5])" in out
    assert f"{seg_path(part, 5, 'log')}: byte {VALID}: torn batch" in out and "'kcompact recover'" in out
    assert not (log_dir / "kcompact-state.orders-0.json").exists()
    assert seg_path(part, 5, "log").read_bytes() == active  # only recover changes the active segment
    # 0 a, 1 a, 2 b | 3 b, 4 c: the cleaner keeps 1 (a), 3 (b), 4 (c)
    kept = [r.offset for log in sorted(part.glob("0000000000000000000[0-3].log"))
            for b in MemoryRecords(log.read_bytes()) for r in b]
    assert kept == [1, 3, 4]


# -- verify: cleaner checkpoint entries outside the log ---------------------------------------------
def test_verify_reports_checkpoint_entries_outside_the_log(tmp_path):
    write_partition(tmp_path / "past-0", [(0, [CLOSED_0]), (3, [CLOSED_3])])  # log [0, 5)
    write_partition(tmp_path / "below-0", [(0, [CLOSED_0]), (3, [CLOSED_3])])  # log start 3 by its checkpoint
    write_partition(tmp_path / "fine-0", [(0, [CLOSED_0]), (3, [CLOSED_3])])
    text = checkpoint_text([("below", 0, 1), ("fine", 0, 5), ("past", 0, 1000)])
    (tmp_path / "cleaner-offset-checkpoint").write_bytes(text)
    (tmp_path / "log-start-offset-checkpoint").write_bytes(checkpoint_text([("below", 0, 3)]))
    path = str(tmp_path / "cleaner-offset-checkpoint")
    below_at, past_at = text.index(b"below 0 1\n"), text.index(b"past 0 1000\n")
    assert [(p.path, p.position, p.what) for p in verify_log_dir(str(tmp_path))] == [
        (path, below_at, "entry below 0 1 is below the log start offset 3 (below-0 holds offsets [3, 5)); Kafka's "
                         "cleaner ignores it and cleans the whole log from its start"),
        (path, past_at, "entry past 0 1000 is past the log end offset 5 (past-0 holds offsets [0, 5)); Kafka's "
                        "cleaner ignores it and cleans the whole log from its start"),
    ]
    assert all(isinstance(p, Note) for p in verify_log_dir(str(tmp_path)))  # Kafka's cleaner resets both
    assert main(["verify", str(tmp_path)]) == 0
    assert main(["verify", "--strict", str(tmp_path)]) == 1


def test_compact_says_when_it_resets_a_checkpoint(spark, tmp_path, capsys):
    write_partition(tmp_path / "past-0", [(0, [CLOSED_0]), (3, [CLOSED_3]), (5, [kp_keyed(5, [b"z"], TS)])])
    (tmp_path / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("past", 0, 1000)]))
    assert main(["compact", str(tmp_path), "--now", str(NOW), *COMPACT]) == 0
    assert (f"reset the cleaner checkpoint of past-0 ({tmp_path}): checkpoint 1000 above log end 6, now the log "
            "start 0, as Kafka's cleaner resets it") in capsys.readouterr().out.splitlines()

