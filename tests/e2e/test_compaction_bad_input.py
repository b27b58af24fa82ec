"""``kcompact compact`` on bad or unusual input: a corrupt batch marks its partition uncleanable
(with the file and byte position) while the others are cleaned; every partition corrupt fails the
run; oversized batches, int32 offset spans, a checkpoint past the log end and a crashed run's
leftover ``.cleaned`` file are handled as Kafka's cleaner handles them.

Expected positions, CRCs and kept offsets are worked out here from the bytes built with
kafka-python, struct and crc32c, never from the code under test.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from types import SimpleNamespace

import crc32c
import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact.jobs.cli import main
from kcompact.readers import codecs
from kcompact.readers.records import Record
from kcompact.tools.verify import verify_log_dir
from tests.support import TIME_ENTRY, checkpoint_text, kp_keyed, seg_path, write_partition
from tests.unit.test_legacy import legacy_message_set

NOW = 1_720_300_000_000
TS = NOW - 3_600_000
WIDE = 2**31  # base offset of a segment more than an int32 away from offset 0
TOPIC_ARGS = ["*:cleanup.policy=compact", "huge:max.message.bytes=1000"]


def recs(first: int, kv: list, ts: int = TS) -> bytes:
    return kp_keyed(first, kv, ts)


def empty_producer_snapshot() -> bytes:
    """Kafka's producer-state snapshot with no producer: version int16 1, CRC-32C of the rest, count 0.
    At the active segment's base it lets the planner replay only the active segment (as Kafka does)."""
    body = struct.pack(">i", 0)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def corrupt(batch: bytes) -> bytes:
    """Flip a byte of the last record's value: framing intact, CRC-32C no longer matches."""
    bad = bytearray(batch)
    bad[-2] ^= 0x01
    return bytes(bad)


def crc_reason(log: Path, position: int, batch: bytes, offset: int) -> str:
    stored, computed = struct.unpack_from(">I", batch, 17)[0], crc32c.crc32c(batch[21:])
    return (f"{log}: byte {position}: batch at offset {offset}: CRC mismatch: stored {stored:#010x}, "
            f"computed {computed:#010x}")


def corrupt_partition(part: Path, snapshot: bool = True) -> tuple[str, int]:
    """0..2 a a b | 3..5 c c d (CRC broken) | active 6 e. Returns the file and byte position of the
    corrupt batch. The first batch of segment 0 is sound: the planner reads only that one (its
    max.compaction.lag.ms check) when a snapshot sits at the active segment."""
    good = recs(0, [b"a", b"a", b"b"])
    write_partition(part, [(0, [good, corrupt(recs(3, [b"c", b"c", b"d"]))]), (6, [recs(6, [b"e"])])])
    if snapshot:
        seg_path(part, 6, "snapshot").write_bytes(empty_producer_snapshot())
    return str(seg_path(part, 0, "log")), len(good)


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def offsets(part: Path) -> dict[int, list[int]]:
    """Data record offsets per segment, read by kafka-python (CRC checked)."""
    out = {}
    for log in sorted(part.glob("*.log")):
        found = []
        for batch in MemoryRecords(log.read_bytes()):
            assert batch.validate_crc()
            found += [r.offset for r in batch]
        out[int(log.stem)] = found
    return out


def cleaner_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    return {(t, int(p)): int(o) for t, p, o in (line.split(" ") for line in lines[2:])}


def run(*args: str) -> int:
    return main([*args, "--now", str(NOW), "--allow-unknown-topics"]  # one list of overrides for every log dir
                + [a for t in TOPIC_ARGS for a in ("--topic-config", t)])


pytestmark = pytest.mark.slow  # every test here waits for the module fixture below: more than 20 s


@pytest.fixture(scope="module")
def bad(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    b = root / "b"
    crc_log, crc_pos = corrupt_partition(b / "crc-0")
    crc_batch = (b / "crc-0" / f"{0:020d}.log").read_bytes()[crc_pos:]
    plan_log, plan_pos = corrupt_partition(b / "crcplan-0", snapshot=False)
    write_partition(b / "good-0", [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c"])])])
    write_partition(b / "huge-0", [(0, [recs(0, [(b"k1", b"x" * 2000), (b"k2", b"y" * 2000)]), recs(2, [b"k1"])]),
                                   (3, [recs(3, [b"k3"])])])
    write_partition(b / "wide-0", [(0, [recs(0, [b"a", b"b"])]), (WIDE, [recs(WIDE, [b"a", b"c"])]),
                                   (WIDE + 10, [recs(WIDE + 10, [b"d"])])])
    write_partition(b / "past-0", [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"b", b"c"])]),
                                   (5, [recs(5, [b"d"])])])
    write_partition(b / "left-0", [(0, [recs(0, [b"a", b"a", b"b"])]), (3, [recs(3, [b"c"])])])
    torn_good = recs(0, [b"a", b"a"])  # then a batch cut off half way, in a segment that is not active
    write_partition(b / "torn-0", [(0, [torn_good]), (4, [recs(4, [b"d"])])])
    with open(seg_path(b / "torn-0", 0, "log"), "ab") as f:
        f.write(recs(2, [b"b", b"c"])[:30])
    (b / "left-0" / f"{0:020d}.log.cleaned").write_bytes(recs(1, [b"a"]))  # a crashed run's partial output
    (b / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("past", 0, 1000)]))
    before = {d.name: tree(d) for d in b.iterdir() if d.is_dir()}
    first_plan = root / "first-plan.json"
    # what the planner sees before any job; partial (4): bad input keeps partitions from being cleaned
    assert run("plan", str(b), "--output", str(first_plan)) == 4
    report = root / "report.json"
    code = run("compact", str(b), "--report", str(report))
    after = {d.name: tree(d) for d in b.iterdir() if d.is_dir()}
    plan_file = root / "plan.json"
    plan_code = run("plan", str(b), "--output", str(plan_file))
    # every partition of log dir C corrupt
    c = root / "c"
    for name in ("all-0", "all-1"):
        corrupt_partition(c / name)
    c_code = run("compact", str(c))
    # a v1 gzip wrapper that loses one of its two inner records
    lw = root / "l" / "lw-0"
    lw.mkdir(parents=True)
    wrapper = legacy_message_set(1, codecs.GZIP, [Record(0, TS, b"a", b"x" * 100), Record(1, TS, b"b", b"y" * 100)])
    seg_path(lw, 0, "log").write_bytes(wrapper)
    seg_path(lw, 0, "index").write_bytes(b"")
    seg_path(lw, 0, "timeindex").write_bytes(TIME_ENTRY.pack(TS, 1))  # closing entry: max ts at offset 1
    write_partition(lw, [(2, [recs(2, [b"a"])]), (3, [recs(3, [b"c"])])])
    # 3.9's cleaner keeps a legacy entry's magic; 4.0 on rewrites it as v2 (tests/unit/test_legacy_conversion.py)
    lw_code = run("compact", str(root / "l"), "--kafka-version", "3.9.2")
    return SimpleNamespace(
        b=b,
        c=c,
        code=code,
        report=json.loads(report.read_text()),
        before=before,
        after=after,
        crc_reason=crc_reason(Path(crc_log), crc_pos, crc_batch, 3),
        crcplan=(plan_log, plan_pos),
        plan_code=plan_code,
        plan={r["path"].rstrip("/").rsplit("/", 1)[1]: r for r in json.loads(plan_file.read_text())},
        first_plan={r["path"].rstrip("/").rsplit("/", 1)[1]: r for r in json.loads(first_plan.read_text())},
        c_code=c_code,
        verify=verify_log_dir(str(b)),
        l=root / "l",
        lw_code=lw_code,
    )


def test_corrupt_batch_fails_only_its_partition(bad):
    assert bad.code == 4  # partial: one partition failed, the others were cleaned
    failed = {p["topic"]: p["error"] for p in bad.report["partitions"] if p["error"]}
    # crc-0 is found by the job; crcplan-0 (no producer snapshot) already by the planner's replay
    assert set(failed) == {"crc", "crcplan", "torn"} and failed["crc"] == bad.crc_reason
    assert "crcplan-0/00000000000000000000.log: byte " in failed["crcplan"]
    assert bad.after["crc-0"] == bad.before["crc-0"]  # every byte and mtime
    # Kafka's doneCleaning runs in a finally block: a failed cleaning still records its first dirty offset
    assert cleaner_checkpoint(bad.b)[("crc", 0)] == 0


def test_corrupt_partition_marked_uncleanable_with_file_and_position(bad):
    state = json.loads((bad.b / "kcompact-state.crc-0.json").read_text())
    assert state["state"] == "uncleanable"
    assert state["reason"] == bad.crc_reason
    assert f"{0:020d}.log: byte " in state["reason"]


def test_next_plan_skips_the_uncleanable_partition(bad):
    assert bad.plan_code == 4  # partial until someone resets it: every run says so
    row = bad.plan["crc-0"]
    assert (row["selected"], row["state"]) == (False, "uncleanable")
    assert row["skip_reason"] == f"uncleanable: {bad.crc_reason} (reset-uncleanable after fixing)"


def test_other_partitions_cleaned(bad):
    # good-0: 0 a, 1 a, 2 b | active 3: 0 superseded; checkpoint 3
    assert offsets(bad.b / "good-0") == {0: [1, 2], 3: [3]}
    assert cleaner_checkpoint(bad.b)[("good", 0)] == 3
    # verify finds the two corrupt batches and the torn one, nothing else
    assert [p for p in bad.verify if not any(f"/{n}/" in p.path for n in ("crc-0", "crcplan-0", "torn-0"))] == []


def test_batch_larger_than_max_message_bytes_is_cleaned(bad):
    # 0..1 k1, k2 (2000-byte values: a ~4 KB batch > max.message.bytes 1000) | 2 k1 | active 3:
    # k1 -> 2: 0 goes, 1 and 2 stay (Kafka grows its read buffer for such a batch)
    assert offsets(bad.b / "huge-0") == {0: [1, 2], 3: [3]}
    assert cleaner_checkpoint(bad.b)[("huge", 0)] == 3
    first = next(iter(MemoryRecords((bad.b / "huge-0" / f"{0:020d}.log").read_bytes())))
    assert [(r.offset, r.key, r.value) for r in first] == [(1, b"k2", b"y" * 2000)]


def test_segment_group_split_at_int32_offsets(bad):
    # segments 0 (0 a, 1 b) and 2^31 (2^31 a, 2^31+1 c), active 2^31+10. Segment 2^31 is the last one
    # cleaned: its last offset counts as first uncleanable - 1 = 2^31 + 9, and 2^31 + 9 - 0 > 2^31 - 1:
    # it may not join segment 0's group. Map a -> 2^31: offset 0 goes.
    assert offsets(bad.b / "wide-0") == {0: [1], WIDE: [WIDE, WIDE + 1], WIDE + 10: [WIDE + 10]}
    assert cleaner_checkpoint(bad.b)[("wide", 0)] == WIDE + 10
    assert not [p for p in bad.verify if "wide-0" in str(p)]


def test_checkpoint_past_log_end_resets_to_log_start(bad):
    # checkpoint 1000 > log end 6: first dirty = log start 0, the whole log is cleaned:
    # 0 a, 1 a, 2 b | 3 b, 4 c | active 5: map a->1, b->3, c->4: 0 and 2 go; checkpoint 5
    assert bad.plan["past-0"]["checkpoint_reset"] is None  # the next plan sees the rewritten checkpoint 5
    assert offsets(bad.b / "past-0") == {0: [1, 3, 4], 5: [5]}
    assert cleaner_checkpoint(bad.b)[("past", 0)] == 5


def test_torn_batch_in_a_closed_segment_marks_only_its_partition(bad):
    """A batch cut short inside a segment that is not the active one: corruption (a broker only
    truncates a torn tail of the active segment on recovery). Untouched, reported by file and byte."""
    assert bad.after["torn-0"] == bad.before["torn-0"]
    failed = {p["topic"]: p["error"] for p in bad.report["partitions"] if p["error"]}
    log = bad.b / "torn-0" / f"{0:020d}.log"
    assert failed["torn"].startswith(f"{log}: byte {len(recs(0, [b'a', b'a']))}:")
    state = json.loads((bad.b / "kcompact-state.torn-0.json").read_text())
    assert state["state"] == "uncleanable" and state["reason"] == failed["torn"]


def test_leftover_cleaned_file_is_bad_input_to_the_planner(bad):
    row = bad.first_plan["left-0"]  # planned before the compaction: the leftover is still there
    assert not row["selected"]
    leftover = bad.b / "left-0" / f"{0:020d}.log.cleaned"
    assert row["skip_reason"] == f"bad input: {leftover}: leftover of an interrupted swap (run kcompact recover)"


def test_compact_recovers_a_leftover_cleaned_file_first_then_cleans(bad):
    # the broker's load rule: a .cleaned file is an unfinished swap's output, deleted; the old
    # segments stay and the partition is cleaned as usual
    assert f"{0:020d}.log.cleaned" not in bad.after["left-0"]
    assert "left" in {p["topic"] for p in bad.report["partitions"] if p["committed"]}
    assert cleaner_checkpoint(bad.b)[("left", 0)] == 3


def test_corrupt_batch_the_planner_reads_is_skipped_as_bad_input(bad):
    # without a producer snapshot the planner replays every batch header, meets the CRC error itself
    # and skips the partition; nothing is written to it
    assert bad.after["crcplan-0"] == bad.before["crcplan-0"]
    log, pos = bad.crcplan
    assert bad.plan["crcplan-0"]["skip_reason"].startswith(
        f"bad input: {log}: byte {pos}: batch at offset 3: CRC mismatch"
    )


def test_corrupt_batch_the_planner_reads_fails_the_run_too(bad):
    """A corrupt batch in a compacted partition's cleanable range is a partial failure whoever finds it:
    the run's exit code and report should say so, and the partition be marked uncleanable."""
    assert "crcplan" in {p["topic"] for p in bad.report["partitions"] if p["error"]}
    assert (bad.b / "kcompact-state.crcplan-0.json").exists()


def test_all_partitions_corrupt_fail_the_run(bad):
    assert bad.c_code == 5
    for name in ("all-0", "all-1"):
        state = json.loads((bad.c / f"kcompact-state.{name}.json").read_text())
        assert state["state"] == "uncleanable" and "CRC mismatch" in state["reason"]
    # each failed cleaning still records its first dirty offset (Kafka's doneCleaning runs in a finally block)
    assert cleaner_checkpoint(bad.c) == {("all", 0): 0, ("all", 1): 0}


def test_legacy_compressed_wrapper_rebuilt_without_superseded_records(bad):
    # v1 gzip wrapper [0 a, 1 b] | 2 a (v2) | active 3: a -> 2, so inner record 0 goes. Kafka's filterTo
    # rebuilds the wrapper with the same magic and codec (MemoryRecordsBuilder(magic 1, gzip)) around 1.
    assert bad.lw_code == 0
    assert offsets(bad.l / "lw-0") == {0: [1, 2], 3: [3]}
    first = next(iter(MemoryRecords((bad.l / "lw-0" / f"{0:020d}.log").read_bytes())))
    assert (first.magic, first.compression_type) == (1, codecs.GZIP)
    assert first.validate_crc() and first.base_offset == 1  # the wrapper's offset: its last inner offset
    assert [(r.offset, r.timestamp, r.key, r.value) for r in first] == [(1, TS, b"b", b"y" * 100)]
