"""States real brokers leave on disk (issue 40), each read as Kafka reads it when it loads the log.

Inputs are hand-made (kafka-python batches, index bytes by LogSegment.append's rule in
``tests.support``); expected answers come from Kafka's sources: CheckpointFile reads an empty
file, or one of the version line alone, as no entries; LogCleaner fails on a log whose offsets
go back (its offset index refuses the append) and marks the partition uncleanable. Where a
partition is refused, every file of its dir is compared (sha256) before and after.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import crc32c
import pytest

from kcompact import errors
from kcompact.jobs.cli import main
from tests.support import checkpoint_text, kp_batches, kp_keyed, write_partition

NOW = 1_720_300_000_000
TS = 1_720_000_000_000
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]
ROOT_CHECKPOINTS = ("cleaner-offset-checkpoint", "recovery-point-offset-checkpoint",
                    "log-start-offset-checkpoint", "replication-offset-checkpoint")


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def offsets_and_keys(path: Path) -> list[tuple[int, bytes]]:
    """What kafka-python reads in a .log: (offset, key) of every record."""
    return [(r.offset, r.key) for b in kp_batches(path.read_bytes()) for r in b]


def dirty(part: Path) -> Path:
    """0..2 a a b | active 3 c: Kafka's cleaner keeps 1 (a) and 2 (b) of the closed segment."""
    return write_partition(part, [(0, [kp_keyed(0, [b"a", b"a", b"b"], TS)]), (3, [kp_keyed(3, [b"c"], TS)])])


# -- 1. empty checkpoint files -------------------------------------------------------------------
@pytest.fixture
def empty_checkpoints(tmp_path: Path) -> Path:
    """A log dir as a broker leaves it at start-up: every checkpoint file created empty."""
    log_dir = tmp_path / "logs"
    part = dirty(log_dir / "orders-0")
    (part / "leader-epoch-checkpoint").write_bytes(b"")
    for name in ROOT_CHECKPOINTS:
        (log_dir / name).write_bytes(b"")
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    return log_dir


@pytest.mark.parametrize("text", [b"", b"0\n"], ids=["empty", "version-only"])
def test_checkpoint_without_entries_reads_as_none(spark, tmp_path: Path, text: bytes, capsys):
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    for name in ROOT_CHECKPOINTS:
        (log_dir / name).write_bytes(text)
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK, capsys.readouterr()
    assert main(["plan", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()


def test_empty_checkpoints_verify_plan_compact_retain_run(spark, empty_checkpoints: Path, capsys):
    log_dir = empty_checkpoints
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK, capsys.readouterr()
    assert f"{log_dir}: OK" in capsys.readouterr().out
    assert main(["plan", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    assert "bad input" not in capsys.readouterr().out
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    assert offsets_and_keys(log_dir / "orders-0" / f"{0:020d}.log") == [(1, b"a"), (2, b"b")]
    assert (log_dir / "cleaner-offset-checkpoint").read_bytes() == checkpoint_text([("orders", 0, 3)])
    assert main(["retain", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    assert main(["run", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    assert offsets_and_keys(log_dir / "orders-0" / f"{0:020d}.log") == [(1, b"a"), (2, b"b")]
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK, capsys.readouterr()


# -- 2. overlapping segments ---------------------------------------------------------------------
def overlapping(part: Path) -> Path:
    """A cleaned 0.log holding 0..9 (keys k0..k9), a stale 5.log beside it holding 5..9 again,
    the active 10.log: offsets go back from 9 to 5 at byte 0 of 5.log."""
    return write_partition(part, [(0, [kp_keyed(0, [b"k%d" % i for i in range(10)], TS)]),
                                  (5, [kp_keyed(5, [b"k%d" % i for i in range(5, 10)], TS)]),
                                  (10, [kp_keyed(10, [b"k1"], TS)])])


def test_overlapping_segments_are_refused_and_nothing_is_written(spark, tmp_path: Path, capsys):
    """compact (run plans the same way: one case of the two is enough for the tier's time)."""
    log_dir = tmp_path / "logs"
    part = overlapping(log_dir / "orders-0")
    dirty(log_dir / "orders-1")
    before = files(part)
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_PARTIAL
    out = capsys.readouterr().out
    stale, cleaned = part / f"{5:020d}.log", part / f"{0:020d}.log"
    said = [line for line in out.splitlines() if str(stale) in line]
    assert said, out
    assert (f"{stale}: byte 0: batch at offsets 5..9 does not follow the batch at offsets 0..9 (byte 0 of {cleaned})"
            in said[0]), said
    assert files(part) == before
    assert "bad input" in said[0], said  # held back by the plan until fixed
    assert not (log_dir / "kcompact-state.orders-0.json").exists()
    assert offsets_and_keys(log_dir / "orders-1" / f"{0:020d}.log") == [(1, b"a"), (2, b"b")]  # the other is cleaned


def test_overlap_behind_a_producer_snapshot_marks_the_partition_uncleanable(spark, tmp_path: Path, capsys):
    """With a producer snapshot at the active segment, the plan replays only that segment and does
    not meet the overlap; the job reads every batch header and does: the partition is marked
    uncleanable (as Kafka's cleaner marks it), nothing written."""
    log_dir = tmp_path / "logs"
    part = overlapping(log_dir / "orders-0")
    body = struct.pack(">i", 0)  # ProducerStateManager snapshot: version 1, CRC-32C of the rest, no entries
    (part / f"{10:020d}.snapshot").write_bytes(struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
    dirty(log_dir / "orders-1")  # cleaned beside it: the run is partial (4), not failed (5)
    before = files(part)
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_PARTIAL
    out = capsys.readouterr().out
    assert f"{part / f'{5:020d}.log'}: byte 0: batch at offsets 5..9 does not follow the batch at offsets 0..9" in out
    assert files(part) == before
    state = json.loads((log_dir / "kcompact-state.orders-0.json").read_text())
    assert state["state"] == "uncleanable" and f"{5:020d}.log" in state["reason"]


def test_verify_and_plan_name_the_overlap(spark, tmp_path: Path, capsys):
    log_dir = tmp_path / "logs"
    part = overlapping(log_dir / "orders-0")
    stale, cleaned = part / f"{5:020d}.log", part / f"{0:020d}.log"
    assert main(["verify", str(log_dir)]) == errors.EXIT_PROBLEMS
    assert str(stale) in capsys.readouterr().out
    assert main(["plan", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_PARTIAL
    err = capsys.readouterr().err
    assert (f"{stale}: byte 0: batch at offsets 5..9 does not follow the batch at offsets 0..9 (byte 0 of {cleaned})"
            in err), err


# -- 3. what a broker's load repairs or deletes: one rule for every command ---------------------
@pytest.fixture
def repaired(tmp_path: Path) -> Path:
    """orders-0: its closed segment without .index/.timeindex (LogLoader rebuilds them);
    orders-1: index files of base offset 50 whose .log is gone (LogLoader deletes them), and a
    notes.txt (passed over)."""
    log_dir = tmp_path / "logs"
    part = dirty(log_dir / "orders-0")
    (part / f"{0:020d}.index").unlink()
    (part / f"{0:020d}.timeindex").unlink()
    other = dirty(log_dir / "orders-1")
    (other / f"{50:020d}.index").write_bytes(b"")
    (other / f"{50:020d}.timeindex").write_bytes(b"")
    (other / "notes.txt").write_text("left by an operator\n")
    return log_dir


def test_missing_and_orphan_indexes_are_what_kafka_makes_of_them(spark, repaired: Path, capsys):
    log_dir = repaired
    rebuilt = f"{log_dir / 'orders-0' / f'{0:020d}.index'}: missing for a closed segment: a broker rebuilds it"
    orphan = f"{log_dir / 'orders-1'}: index files for base offset 50 but no {50:020d}.log: a broker deletes them"
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK
    out = capsys.readouterr().out
    assert f"note: {rebuilt}" in out and f"note: {orphan}" in out, out
    assert main(["dump", str(log_dir / "orders-1")]) == errors.EXIT_OK
    out = capsys.readouterr().out
    assert f"Note: {orphan}" in out and f"Dumping {log_dir / 'orders-1' / f'{0:020d}.log'}" in out, out
    assert main(["plan", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK
    assert "bad input" not in capsys.readouterr().out
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    for name in ("orders-0", "orders-1"):
        assert offsets_and_keys(log_dir / name / f"{0:020d}.log") == [(1, b"a"), (2, b"b")], name
    assert (log_dir / "orders-0" / f"{0:020d}.index").exists()  # the cleaner wrote new ones


def test_empty_partition_metadata_is_refused_as_kafka_fails_to_load_the_log(spark, tmp_path: Path, capsys):
    """PartitionMetadataReadBuffer.read has no first line to split in an empty file: the log does
    not load. An empty leader-epoch-checkpoint is no entries (CheckpointFile)."""
    log_dir = tmp_path / "logs"
    part = dirty(log_dir / "orders-0")
    (part / "partition.metadata").write_bytes(b"")
    (part / "leader-epoch-checkpoint").write_bytes(b"")
    dirty(log_dir / "orders-1")
    before = files(part)
    said = f"{part / 'partition.metadata'}: empty: a broker reads the topic id from it on load"
    assert main(["verify", str(log_dir)]) == errors.EXIT_PROBLEMS
    assert said in capsys.readouterr().out
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_PARTIAL
    assert said in capsys.readouterr().out
    assert files(part) == before
    assert offsets_and_keys(log_dir / "orders-1" / f"{0:020d}.log") == [(1, b"a"), (2, b"b")]


def test_empty_meta_properties_is_a_problem(tmp_path: Path, capsys):
    """MetaPropertiesEnsemble: no 'version' in meta.properties, the log dir is not loaded."""
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    (log_dir / "meta.properties").write_bytes(b"")
    assert main(["verify", str(log_dir)]) == errors.EXIT_PROBLEMS
    assert f"{log_dir / 'meta.properties'}: empty: a broker finds no 'version'" in capsys.readouterr().out


# -- 4. preallocated active-segment indexes ------------------------------------------------------
def test_preallocated_active_indexes(spark, tmp_path: Path, capsys):
    """After an unclean shutdown the active segment's .index/.timeindex stay preallocated to
    segment.index.bytes (10 MiB of zeros after the entries, AbstractIndex): the entries end at the
    first zero entry; the active segment's files are left as they are."""
    log_dir = tmp_path / "logs"
    part = write_partition(log_dir / "orders-0", [
        (0, [kp_keyed(0, [b"a", b"a", b"b"], TS)]),
        (3, [kp_keyed(3 + i, [b"c%d" % i], TS + i) for i in range(40)])])
    count = {}
    for kind, entry in (("index", 8), ("timeindex", 12)):
        path = part / f"{3:020d}.{kind}"
        entries = path.read_bytes()
        count[kind] = len(entries) // entry
        assert count[kind]  # the hand-made index has entries before the zeros
        size = (10 << 20) // entry * entry  # AbstractIndex rounds segment.index.bytes down to whole entries
        path.write_bytes(entries + bytes(size - len(entries)))
    active = {k: files(part)[f"{3:020d}.{k}"] for k in ("log", "index", "timeindex")}
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK, capsys.readouterr()
    capsys.readouterr()
    assert main(["dump", str(part / f"{3:020d}.index")]) == errors.EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Dumping {part / f'{3:020d}.index'}" and len(lines) == 1 + count["index"], lines[:5]
    assert main(["plan", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    # the data source splits the active segment at its index entries (small maxSplitBytes): every
    # record once (its splits planned and read in-process, as its executors read them)
    from kcompact.datasource.kafka_log import KafkaLogDataSource, plan_splits, read_split

    splits = plan_splits(KafkaLogDataSource({"path": str(log_dir), "maxSplitBytes": "300"}).reader(None).settings)
    assert sum(s.path.endswith(f"{3:020d}.log") for s in splits) > 1  # the active segment cut at its index
    offsets = sorted(o for s in splits for b in read_split(s, "records") for o in b.column("offset").to_pylist())
    assert offsets == list(range(43))  # kafka-python: 0..2 in 0.log, 3..42 in 3.log (offsets_and_keys)
    assert [o for o, _ in offsets_and_keys(part / f"{3:020d}.log")] == list(range(3, 43))
    assert main(["compact", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    assert offsets_and_keys(part / f"{0:020d}.log") == [(1, b"a"), (2, b"b")]
    assert {k: files(part)[f"{3:020d}.{k}"] for k in ("log", "index", "timeindex")} == active


# -- 5. verify fails only on what Kafka refuses on load -------------------------------------------
def test_verify_notes_what_kafka_loads_summarizes_repeats_and_speaks_json(tmp_path: Path, capsys):
    """A closed segment's .timeindex whose last entry is below its largest timestamp (Kafka loads it:
    sanityCheck skips the time index), a malformed recovery-point checkpoint (LogManager resets it),
    and 1000 .cleaned leftovers of a killed job (LogLoader deletes them): notes, one line for the
    leftovers; --json holds each of them."""
    log_dir = tmp_path / "logs"
    part = write_partition(log_dir / "orders-0", [
        (0, [kp_keyed(0, [b"a"], TS), kp_keyed(1, [b"b"], TS + 5)]), (2, [kp_keyed(2, [b"c"], TS)])])
    timeindex = part / f"{0:020d}.timeindex"
    timeindex.write_bytes(struct.pack(">qi", TS, 0))  # the largest, TS + 5 at offset 1, has no entry
    (log_dir / "recovery-point-offset-checkpoint").write_bytes(b"0\n1\ngarbage\n")
    for i in range(1000):
        (part / f"{100 + i:020d}.log.cleaned").write_bytes(b"")
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"{log_dir}: OK (0 problem(s), 1002 note(s): what the notes say, Kafka accepts and repairs)"
    assert f"note: {timeindex}: byte 0: last entry's timestamp {TS} is not the segment's largest timestamp " \
           f"{TS + 5}: a broker loads it as it is and goes by the entry for time retention" in out, out
    assert (f"note: {part}: 1000 files ({100:020d}.log.cleaned ... {1099:020d}.log.cleaned): leftover of an "
            "unfinished segment rewrite (.cleaned): a broker deletes it on load") in out, out
    assert any(line.startswith(f"note: {log_dir / 'recovery-point-offset-checkpoint'}: byte 4: ") and
               line.endswith("a broker that cannot read it resets every recovery point to 0 on load "
                             "(and recovers every segment)") for line in out), out
    assert len(out) == 4
    assert main(["verify", "--json", "--strict", str(log_dir)]) == errors.EXIT_PROBLEMS
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["problems"], len(doc["notes"])) == (False, [], 1002)
    assert any(n["path"] == str(timeindex) and n["position"] == 0 for n in doc["notes"]), doc["notes"]


# -- 6. foreign folders; a log dir without KRaft metadata ---------------------------------------------
def test_foreign_folder_is_named_with_what_kafka_does(spark, tmp_path: Path, capsys):
    """LogManager.loadLogs parses every directory (remote-log-index-cache aside) as
    <topic>-<partition>; 'context' fails the broker's start."""
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    (log_dir / "context").mkdir()
    (log_dir / "context" / "notes.md").write_text("an operator's\n")
    (log_dir / "remote-log-index-cache").mkdir()
    said = (f"{log_dir / 'context'}: directory name is not <topic>-<partition>: a broker fails to start with it in "
            "its log dir (LocalLog.parseTopicPartitionName); move it out of the log dir")
    assert main(["verify", str(log_dir)]) == errors.EXIT_PROBLEMS
    out = capsys.readouterr().out.splitlines()
    assert out == [said], out  # the tiered-storage cache is not one
    assert main(["plan", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_PARTIAL
    out, err = capsys.readouterr()
    assert "None-None" not in err and said in err, err
    assert "remote-log-index-cache" not in err
    # a ZooKeeper-mode log dir: no __cluster_metadata-0, so no metadata.version; said so, and how to name it
    assert (f"reproducing Kafka 4.3 (default: {log_dir} holds no KRaft metadata (no __cluster_metadata-0: a "
            "ZooKeeper-mode log dir, or not the broker's metadata log dir), so no metadata.version names the brokers' "
            "release; the newest release, 4.3, taken (--kafka-version or kafka.version names another))"
            in out.splitlines()), out


# -- 7. the KRaft metadata partition -------------------------------------------------------------
def test_dump_of_a_metadata_dir_shows_snapshots_and_quorum_state(tmp_path: Path, capsys):
    """An intact __cluster_metadata-0 (records built by test_kraft_metadata's hand encoder after
    Kafka's schemas): quorum-state printed, the segment's and the snapshot's records with their
    payload decoded, a PartitionRecord (apiKey 3) named as not decoded, the SnapshotHeader named
    by its control type; a dump of the whole log dir includes the metadata partition."""
    from tests.unit.test_kraft_metadata import batch, feature_level_value, frame, snapshot, topic_value, write_log

    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    mdir = write_log(log_dir, {0: [batch(0, feature_level_value(21), topic_value("orders", bytes(range(16))))]},
                     {f"{3:020d}-{1:010d}.checkpoint": snapshot([[feature_level_value(21), frame(3, b"\0" * 8)]])})
    (mdir / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,'
                                       '"currentVoters":null,"data_version":0}')
    (mdir / "leader-epoch-checkpoint").write_bytes(b"")
    assert main(["dump", str(mdir)]) == errors.EXIT_OK, capsys.readouterr()
    out = capsys.readouterr().out
    assert f"Dumping {mdir / 'quorum-state'}" in out and '"leaderId": 1' in out
    assert ('payload: {"type": "FEATURE_LEVEL_RECORD", "data": {"name": "metadata.version", "feature_level": 21}}'
            in out), out
    assert '"type": "TOPIC_RECORD", "data": {"name": "orders", "topic_id": "AAECAwQFBgcICQoLDA0ODw"}' in out
    assert "Snapshot end offset: 3, epoch: 1" in out
    assert "controlType: SNAPSHOT_HEADER" in out
    assert '"apiKey": 3, "version": 0, "data": "not decoded' in out
    assert main(["dump", "--json", str(log_dir)]) == errors.EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["file"] for line in lines} >= {str(mdir / f"{0:020d}.log"), str(mdir / "quorum-state"),
                                                str(log_dir / "orders-0" / f"{0:020d}.log")}
    assert any(line["type"] == "record" and line.get("payload", {}) == {
        "type": "FEATURE_LEVEL_RECORD", "data": {"name": "metadata.version", "feature_level": 21}} for line in lines)
