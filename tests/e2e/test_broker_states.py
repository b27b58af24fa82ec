"""States real brokers leave on disk (issue 40), each read as Kafka reads it when it loads the log.

Inputs are hand-made where they pin a rule of Kafka's (kafka-python batches, index bytes by
LogSegment.append's rule in ``tests.support``), and otherwise left by the generator on request
(``tools.generator.broker_states``, its own writer). Expected answers come from Kafka's sources:
CheckpointFile reads an empty file, or one of the version line alone, as no entries; LogCleaner
fails on a log whose offsets go back (its offset index refuses the append) and marks the partition
uncleanable; the cleaner keeps the last record of each key below the active segment. Where a
partition or log dir is refused, every file of it is compared (sha256) before and after.

For the tier's time, one plan and one compact run over every log dir at once (``ran``), and the
tests read what each said of its partitions.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import struct
from pathlib import Path

import crc32c
import pytest

from kcompact import errors
from kcompact.jobs.cli import main
from kcompact.tools import generator
from tests.support import kp_batches, kp_keyed, write_partition

NOW = 1_720_300_000_000
TS = 1_720_000_000_000
COMPACT = ["--topic-config", "*:cleanup.policy=compact"]
ROOT_CHECKPOINTS = ("cleaner-offset-checkpoint", "recovery-point-offset-checkpoint",
                    "log-start-offset-checkpoint", "replication-offset-checkpoint")
OFFLINE = ("a broker that reads it marks this log dir offline (CheckpointFileWithFailureHandler) and stops serving "
           "and cleaning it; fix or remove the file")
EMPTY_META = "empty: a KRaft broker fails to start with it (it finds no node.id in it"


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def offsets_and_keys(path: Path) -> list[tuple[int, bytes]]:
    """What kafka-python reads in a .log: (offset, key) of every record."""
    return [(r.offset, r.key) for b in kp_batches(path.read_bytes()) for r in b]


def dirty(part: Path) -> Path:
    """0..2 a a b | active 3 c: Kafka's cleaner keeps 1 (a) and 2 (b) of the closed segment."""
    return write_partition(part, [(0, [kp_keyed(0, [b"a", b"a", b"b"], TS)]), (3, [kp_keyed(3, [b"c"], TS)])])


# -- the log dirs ---------------------------------------------------------------------------------
ACCEPTED_SPEC = {
    "broker_state": {"empty_checkpoints": list(ROOT_CHECKPOINTS), "quorum_state": True, "metadata_snapshot": True},
    "topics": [
        {"name": name, "records": 40, "keys": 8, "batch_records": [2, 4], "value_size": [10, 30],
         "config": {"cleanup.policy": "compact", "segment.bytes": 1000, "index.interval.bytes": 0},
         "broker_state": state}
        for name, state in [
            ("plain", {}),
            ("rebuilt", {"missing_index": [0], "missing_timeindex": [0, 1],
                         "empty_files": ["leader-epoch-checkpoint"]}),
            ("orphans", {"orphan_indexes": [500]}),
            ("prealloc", {"preallocated_indexes": True}),
        ]
    ],
}


def accepted_dir(root: Path) -> tuple[Path, generator.GenResult]:
    """What Kafka loads as it is or repairs, as the generator leaves it: every root checkpoint empty
    (a broker at start-up), quorum-state and a metadata snapshot, closed segments without their
    indexes, orphan index files, the active segment's indexes preallocated to 10 MiB."""
    log_dir = root / "accepted"
    result = generator.generate(str(log_dir), ACCEPTED_SPEC, seed=3)
    (log_dir / "orphans-0" / "notes.txt").write_text("left by an operator\n")  # a broker passes over it
    return log_dir, result


def overlapping(part: Path) -> Path:
    """A cleaned 0.log holding 0..9 (keys k0..k9), a stale 5.log beside it holding 5..9 again,
    the active 10.log: offsets go back from 9 to 5 at byte 0 of 5.log."""
    return write_partition(part, [(0, [kp_keyed(0, [b"k%d" % i for i in range(10)], TS)]),
                                  (5, [kp_keyed(5, [b"k%d" % i for i in range(5, 10)], TS)]),
                                  (10, [kp_keyed(10, [b"k1"], TS)])])


def preallocated(part: Path) -> tuple[Path, dict[str, int]]:
    """After an unclean shutdown the active segment's .index/.timeindex stay preallocated to
    segment.index.bytes (10 MiB of zeros after the entries, AbstractIndex): the entries end at the
    first zero entry. Returns the entry count of each."""
    write_partition(part, [(0, [kp_keyed(0, [b"a", b"a", b"b"], TS)]),
                           (3, [kp_keyed(3 + i, [b"c%d" % i], TS + i) for i in range(40)])])
    count = {}
    for kind, entry in (("index", 8), ("timeindex", 12)):
        path = part / f"{3:020d}.{kind}"
        entries = path.read_bytes()
        count[kind] = len(entries) // entry
        assert count[kind]  # the hand-made index has entries before the zeros
        size = (10 << 20) // entry * entry  # AbstractIndex rounds segment.index.bytes down to whole entries
        path.write_bytes(entries + bytes(size - len(entries)))
    return part, count


def handmade_dir(root: Path) -> Path:
    """Hand-made partitions, the root checkpoints empty: orders-0 dirty; orders-1 a stale segment
    overlapping its cleaned one; orders-2 the same behind a producer snapshot; orders-3 an empty
    partition.metadata; orders-4 preallocated active indexes; a foreign folder 'context'."""
    log_dir = root / "handmade"
    dirty(log_dir / "orders-0")
    overlapping(log_dir / "orders-1")
    part = overlapping(log_dir / "orders-2")
    body = struct.pack(">i", 0)  # ProducerStateManager snapshot: version 1, CRC-32C of the rest, no entries
    (part / f"{10:020d}.snapshot").write_bytes(struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
    part = dirty(log_dir / "orders-3")
    (part / "partition.metadata").write_bytes(b"")
    (part / "leader-epoch-checkpoint").write_bytes(b"")  # no entries (CheckpointFile), not a fault
    preallocated(log_dir / "orders-4")
    (log_dir / "context").mkdir()
    (log_dir / "context" / "notes.md").write_text("an operator's\n")
    (log_dir / "remote-log-index-cache").mkdir()  # the tiered-storage cache: a broker passes over it
    for name in ROOT_CHECKPOINTS:
        (log_dir / name).write_bytes(b"")
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    return log_dir


def one_dirty_dir(root: Path, name: str, files_: dict[str, bytes]) -> Path:
    """A log dir of one dirty partition (topic ``name``) and the root files given."""
    log_dir = root / name
    dirty(log_dir / f"{name}-0")
    for file, data in files_.items():
        (log_dir / file).write_bytes(data)
    return log_dir


def refused_dirs(root: Path) -> dict[str, Path]:
    """Log dirs a broker does not start with or takes offline, and one it loads without a file."""
    return {
        "meta": one_dirty_dir(root, "meta", {"meta.properties": b""}),  # KafkaRaftServer: no node.id
        # a bad version: CheckpointFile's IOException, the log dir goes offline
        "offline": one_dirty_dir(root, "offline", {"log-start-offset-checkpoint": b"1\n0\n"}),
        # a non-numeric offset: a NumberFormatException, which LogManager.loadLogs loads without the file
        "reset": one_dirty_dir(root, "reset", {"log-start-offset-checkpoint": b"0\n1\nreset 0 x5\n"}),
    }


def kafkas(found: dict[str, str]) -> dict[str, str]:
    """The broker's files of ``files``: without the job's lock and its last-run record."""
    return {k: v for k, v in found.items() if k != ".lock" and not k.startswith("kcompact-")}


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def about(out: str, path: Path) -> list[str]:
    """The lines naming ``path``, or its partition (``<topic>-<n>: ...``)."""
    return [line for line in out.splitlines() if str(path) in line or line.lstrip().startswith(f"{path.name}: ")
            or f" {path.name}: " in line]


@pytest.fixture(scope="module")
def ran(spark, tmp_path_factory) -> dict:
    """One plan, then one compact, over every log dir; each one's files before and after."""
    root = tmp_path_factory.mktemp("broker-states")
    accepted, truth = accepted_dir(root)
    dirs = {"accepted": accepted, "handmade": handmade_dir(root), **refused_dirs(root)}
    before = {name: files(path) for name, path in dirs.items()}
    paths = [str(p) for p in dirs.values()]
    plan = run("plan", *paths, "--now", str(NOW), *COMPACT)
    compact = run("compact", *paths, "--now", str(NOW), *COMPACT)
    return {"dirs": dirs, "truth": truth, "before": before, "plan": plan, "compact": compact}


def kept_by_kafka(truth: generator.PartitionTruth) -> list[tuple[int, bytes]]:
    """What Kafka's cleaner leaves of a whole dirty log: below the active segment the last record of
    each key, the active segment as it is."""
    active = truth.segments[-1].base_offset
    last = {r.key: r.offset for r in truth.records if r.offset < active}
    return [(r.offset, r.key) for r in truth.records if r.offset >= active or last[r.key] == r.offset]


# -- 1. empty checkpoint files, and what a broker's load repairs or deletes ------------------------
@pytest.mark.parametrize("text", [b"", b"0\n"], ids=["empty", "version-only"])
def test_checkpoint_without_entries_reads_as_none(tmp_path: Path, text: bytes, capsys):
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    for name in ROOT_CHECKPOINTS:
        (log_dir / name).write_bytes(text)
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK, capsys.readouterr()


def test_accepted_states_verify_and_dump(tmp_path: Path, capsys):
    log_dir, _ = accepted_dir(tmp_path)
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK
    out = capsys.readouterr().out
    rebuilt = log_dir / "rebuilt-0" / f"{0:020d}.index"
    orphan = f"{log_dir / 'orphans-0'}: index files for base offset 500 but no {500:020d}.log: a broker deletes them"
    assert f"note: {rebuilt}: missing for a closed segment: a broker rebuilds it" in out, out
    assert f"note: {orphan}" in out and "problem" not in out.replace("0 problem(s)", ""), out
    assert main(["dump", str(log_dir / "orphans-0")]) == errors.EXIT_OK
    out = capsys.readouterr().out
    assert f"Note: {orphan}" in out and f"Dumping {log_dir / 'orphans-0' / f'{0:020d}.log'}" in out, out
    prealloc = log_dir / "prealloc-0"
    active = sorted(prealloc.glob("*.index"))[-1]
    assert active.stat().st_size == 10 << 20
    assert main(["dump", str(active)]) == errors.EXIT_OK
    lines = capsys.readouterr().out.splitlines()  # the entries end at the first zero entry
    assert lines[0] == f"Dumping {active}" and all(line.startswith("offset: ") for line in lines[1:]), lines[:5]
    assert 2 <= len(lines) < 50
    mdir = log_dir / "__cluster_metadata-0"
    assert main(["dump", str(mdir)]) == errors.EXIT_OK
    out = capsys.readouterr().out
    (snapshot,) = mdir.glob("*.checkpoint")
    assert f"Dumping {mdir / 'quorum-state'}" in out and '"leaderId": 1' in out, out
    assert f"Dumping {snapshot}" in out and "controlType: SNAPSHOT_HEADER" in out and "SNAPSHOT_FOOTER" in out
    assert main(["dump", str(log_dir / "cleaner-offset-checkpoint")]) == errors.EXIT_OK  # empty: no entries
    assert capsys.readouterr().out.splitlines()[1] == f"{log_dir / 'cleaner-offset-checkpoint'} has no entries."


def test_accepted_states_are_planned_compacted_and_retained(ran, capsys):
    log_dir, truth = ran["dirs"]["accepted"], ran["truth"]
    plan_out, compact_out = ran["plan"][1], ran["compact"][1]
    for name in ("plain", "rebuilt", "orphans", "prealloc"):
        part = log_dir / f"{name}-0"
        assert not [line for line in about(plan_out + compact_out, part) if "bad input" in line], name
        got = [o for p in sorted(part.glob("*.log")) for o in offsets_and_keys(p)]
        assert got == kept_by_kafka(truth.partitions[name, 0]), name
    assert (log_dir / "rebuilt-0" / f"{0:020d}.index").exists()  # the cleaner wrote new ones
    prealloc = log_dir / "prealloc-0"
    active = sorted(prealloc.glob("*.log"))[-1].name.removesuffix(".log")
    for kind in ("index", "timeindex"):  # the active segment's files are left as they are
        name = f"{active}.{kind}"
        assert files(prealloc)[name] == ran["before"]["accepted"][f"prealloc-0/{name}"], kind
    assert main(["retain", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    assert main(["run", str(log_dir), "--now", str(NOW), *COMPACT]) == errors.EXIT_OK, capsys.readouterr()
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK, capsys.readouterr()


def test_handmade_states_are_cleaned_as_kafka_cleans_them(ran):
    log_dir = ran["dirs"]["handmade"]
    assert ran["compact"][0] == errors.EXIT_PARTIAL
    for name in ("orders-0", "orders-4"):
        assert offsets_and_keys(log_dir / name / f"{0:020d}.log") == [(1, b"a"), (2, b"b")], name
    # an empty cleaner-offset-checkpoint is no entries: the cleaned partitions' first dirty offsets are written
    lines = (log_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    assert lines[0] == "0" and {"orders 0 3", "orders 4 3"} <= set(lines[2:]), lines
    part = log_dir / "orders-4"
    for kind in ("log", "index", "timeindex"):  # the active segment's files are left as they are
        name = f"{3:020d}.{kind}"
        assert files(part)[name] == ran["before"]["handmade"][f"orders-4/{name}"], kind


def test_preallocated_active_indexes_dump_and_data_source(tmp_path: Path, capsys):
    """The entries end at the first zero entry: dump shows them alone; the data source splits the
    active segment at them (small maxSplitBytes) and reads every record once (its splits planned and
    read in-process, as its executors read them)."""
    log_dir = tmp_path / "logs"
    part, count = preallocated(log_dir / "orders-0")
    assert main(["verify", str(log_dir)]) == errors.EXIT_OK, capsys.readouterr()
    capsys.readouterr()
    assert main(["dump", str(part / f"{3:020d}.index")]) == errors.EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Dumping {part / f'{3:020d}.index'}" and len(lines) == 1 + count["index"], lines[:5]
    from kcompact.datasource.kafka_log import KafkaLogDataSource, plan_splits, read_split

    splits = plan_splits(KafkaLogDataSource({"path": str(log_dir), "maxSplitBytes": "300"}).reader(None).settings)
    assert sum(s.path.endswith(f"{3:020d}.log") for s in splits) > 1  # the active segment cut at its index
    offsets = sorted(o for s in splits for b in read_split(s, "records") for o in b.column("offset").to_pylist())
    assert offsets == list(range(43))  # kafka-python: 0..2 in 0.log, 3..42 in 3.log (offsets_and_keys)
    assert [o for o, _ in offsets_and_keys(part / f"{3:020d}.log")] == list(range(3, 43))


# -- 2. overlapping segments ---------------------------------------------------------------------
def test_overlapping_segments_are_refused_and_nothing_is_written(ran):
    log_dir = ran["dirs"]["handmade"]
    part = log_dir / "orders-1"
    stale, cleaned = part / f"{5:020d}.log", part / f"{0:020d}.log"
    said = f"{stale}: byte 0: batch at offsets 5..9 does not follow the batch at offsets 0..9 (byte 0 of {cleaned})"
    for command in ("plan", "compact"):
        lines = about(ran[command][1], stale)
        assert lines and any(said in line for line in lines), (command, lines)
        assert ran[command][0] == errors.EXIT_PARTIAL
    assert any("bad input" in line for line in about(ran["compact"][1], stale))  # held back by the plan until fixed
    assert files(part) == {k.removeprefix("orders-1/"): v for k, v in ran["before"]["handmade"].items()
                           if k.startswith("orders-1/")}
    assert not (log_dir / "kcompact-state.orders-1.json").exists()


def test_overlap_behind_a_producer_snapshot_marks_the_partition_uncleanable(ran):
    """With a producer snapshot at the active segment, the plan replays only that segment and does
    not meet the overlap; the job reads every batch header and does: the partition is marked
    uncleanable (as Kafka's cleaner marks it), nothing written."""
    log_dir = ran["dirs"]["handmade"]
    part = log_dir / "orders-2"
    assert (f"{part / f'{5:020d}.log'}: byte 0: batch at offsets 5..9 does not follow the batch at offsets 0..9"
            in ran["compact"][1])
    assert files(part) == {k.removeprefix("orders-2/"): v for k, v in ran["before"]["handmade"].items()
                           if k.startswith("orders-2/")}
    state = json.loads((log_dir / "kcompact-state.orders-2.json").read_text())
    assert state["state"] == "uncleanable" and f"{5:020d}.log" in state["reason"]


def test_verify_names_the_overlap(tmp_path: Path, capsys):
    log_dir = tmp_path / "logs"
    part = overlapping(log_dir / "orders-0")
    assert main(["verify", str(log_dir)]) == errors.EXIT_PROBLEMS
    assert str(part / f"{5:020d}.log") in capsys.readouterr().out


def test_stale_segment_left_by_the_generator_is_refused(tmp_path: Path, capsys):
    """The generator's stale copy of a segment's second half, beside it: verify names where the
    offsets go back (no Spark: the plan's rule is the one test_overlapping_segments_are_refused_and_nothing_is_written
    runs)."""
    spec = {"topics": [{"name": "stale", "records": 40, "batch_records": [2, 4], "config": {
        "cleanup.policy": "compact", "segment.bytes": 1000}, "broker_state": {"stale_segment": 0}}]}
    result = generator.generate(str(tmp_path / "logs"), spec, seed=3)
    first = result.partitions["stale", 0].segments
    assert len(first) >= 2
    part = tmp_path / "logs" / "stale-0"
    stale = sorted(p for p in part.glob("*.log") if first[0].base_offset < int(p.stem) < first[1].base_offset)
    assert len(stale) == 1
    assert main(["verify", str(tmp_path / "logs")]) == errors.EXIT_PROBLEMS
    assert f"{stale[0]}: byte 0: " in capsys.readouterr().out


# -- 3. partition and log dir files a broker does not load -------------------------------------------
def test_empty_partition_metadata_is_refused_as_kafka_fails_to_load_the_log(ran, tmp_path: Path, capsys):
    """PartitionMetadataReadBuffer.read has no first line to split in an empty file: the log does
    not load. An empty leader-epoch-checkpoint is no entries (CheckpointFile)."""
    log_dir = ran["dirs"]["handmade"]
    part = log_dir / "orders-3"
    said = f"{part / 'partition.metadata'}: empty: a broker reads the topic id from it on load"
    assert said in ran["compact"][1]
    assert files(part) == {k.removeprefix("orders-3/"): v for k, v in ran["before"]["handmade"].items()
                           if k.startswith("orders-3/")}
    copy = tmp_path / "logs"
    (copy / "orders-0").mkdir(parents=True)
    for p in part.iterdir():
        (copy / "orders-0" / p.name).write_bytes(p.read_bytes())
    assert main(["verify", str(copy)]) == errors.EXIT_PROBLEMS
    assert said.replace(str(part), str(copy / "orders-0")) in capsys.readouterr().out


def test_empty_meta_properties_refuses_the_log_dir_in_every_command(ran, capsys):
    """KafkaRaftServer.initializeLogDirs: an empty meta.properties has no node.id, the broker does not
    start. plan and compact hold every partition back (nothing written), verify and dump say so."""
    log_dir = ran["dirs"]["meta"]
    said = f"{log_dir / 'meta.properties'}: {EMPTY_META}"
    for command in ("plan", "compact"):
        lines = about(ran[command][1], log_dir / "meta-0")
        assert any("bad input" in line and said in line for line in lines), (command, lines)
    assert kafkas(files(log_dir)) == ran["before"]["meta"]
    assert main(["verify", str(log_dir)]) == errors.EXIT_PROBLEMS
    assert said in capsys.readouterr().out
    assert main(["dump", str(log_dir)]) == errors.EXIT_PROBLEMS
    out = capsys.readouterr().out
    assert f"Error: {said}" in out and f"Dumping {log_dir / 'meta-0' / f'{0:020d}.log'}" in out, out


def test_malformed_log_start_checkpoint_as_kafka_loads_it(ran, capsys):
    """LogManager.loadLogs: a bad version is an IOException of CheckpointFile, and
    CheckpointFileWithFailureHandler marks the log dir offline: every partition held back, the file
    and byte named, nothing written. A non-numeric offset is a NumberFormatException that passes it
    by: the log dir loads with each log's start at its first segment, and is cleaned."""
    offline, reset = ran["dirs"]["offline"], ran["dirs"]["reset"]
    said = (f"{offline / 'log-start-offset-checkpoint'}: byte 0: unsupported checkpoint version '1' (expected 0): "
            + OFFLINE)
    for command in ("plan", "compact"):
        lines = about(ran[command][1], offline / "offline-0")
        assert any("bad input" in line and said in line for line in lines), (command, lines)
        assert not [line for line in about(ran[command][1], reset / "reset-0") if "bad input" in line], command
    assert kafkas(files(offline)) == ran["before"]["offline"]
    assert offsets_and_keys(reset / "reset-0" / f"{0:020d}.log") == [(1, b"a"), (2, b"b")]
    assert main(["verify", str(offline)]) == errors.EXIT_PROBLEMS
    assert said in capsys.readouterr().out
    assert main(["verify", str(reset)]) == errors.EXIT_OK
    assert "takes each log's first segment's base offset as its log start on load" in capsys.readouterr().out


def test_foreign_folder_is_named_with_what_kafka_does(ran, capsys):
    """LogManager.loadLogs parses every directory (remote-log-index-cache aside) as
    <topic>-<partition>; 'context' fails the broker's start."""
    log_dir = ran["dirs"]["handmade"]
    said = (f"{log_dir / 'context'}: directory name is not <topic>-<partition>: a broker fails to start with it in "
            "its log dir (LocalLog.parseTopicPartitionName); move it out of the log dir")
    out = ran["plan"][1]
    assert "None-None" not in out and said in out, out
    assert "remote-log-index-cache" not in out
    # a ZooKeeper-mode log dir: no __cluster_metadata-0, so no metadata.version; said so, and how to name it
    assert (f"{log_dir} holds no KRaft metadata (no __cluster_metadata-0: a ZooKeeper-mode log dir, or not the "
            "broker's metadata log dir), so no metadata.version names the brokers' release" in out), out


def test_verify_names_the_foreign_folder_alone(tmp_path: Path, capsys):
    log_dir = tmp_path / "logs"
    dirty(log_dir / "orders-0")
    (log_dir / "context").mkdir()
    (log_dir / "remote-log-index-cache").mkdir()
    assert main(["verify", str(log_dir)]) == errors.EXIT_PROBLEMS
    assert capsys.readouterr().out.splitlines() == [
        f"{log_dir / 'context'}: directory name is not <topic>-<partition>: a broker fails to start with it in "
        "its log dir (LocalLog.parseTopicPartitionName); move it out of the log dir"]


# -- 4. verify fails only on what Kafka refuses on load -------------------------------------------
def test_verify_notes_what_kafka_loads_summarizes_repeats_and_speaks_json(tmp_path: Path, capsys):
    """A closed segment's .timeindex whose last entry is below its largest timestamp (Kafka loads it:
    sanityCheck skips the time index), a recovery-point checkpoint with a non-numeric offset
    (LogManager loads without it), and 1000 .cleaned leftovers of a killed job (LogLoader deletes
    them): notes, one line for the leftovers; --json holds each of them."""
    log_dir = tmp_path / "logs"
    part = write_partition(log_dir / "orders-0", [
        (0, [kp_keyed(0, [b"a"], TS), kp_keyed(1, [b"b"], TS + 5)]), (2, [kp_keyed(2, [b"c"], TS)])])
    timeindex = part / f"{0:020d}.timeindex"
    timeindex.write_bytes(struct.pack(">qi", TS, 0))  # the largest, TS + 5 at offset 1, has no entry
    (log_dir / "recovery-point-offset-checkpoint").write_bytes(b"0\n1\norders 0 garbage\n")
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


# -- 5. the KRaft metadata partition -------------------------------------------------------------
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
    snap_file = mdir / f"{3:020d}-{1:010d}.checkpoint"  # one snapshot file alone, as kafka-dump-log shows it
    assert main(["dump", "--print-data", str(snap_file)]) == errors.EXIT_OK
    alone = capsys.readouterr().out
    assert alone.startswith(f"Dumping {snap_file}\nSnapshot end offset: 3, epoch: 1\n") and "SNAPSHOT_HEADER" in alone
    assert "FEATURE_LEVEL_RECORD" in alone
    assert "controlType: SNAPSHOT_HEADER" in out
    assert '"apiKey": 3, "version": 0, "data": "not decoded' in out
    assert main(["dump", "--json", str(log_dir)]) == errors.EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["file"] for line in lines} >= {str(mdir / f"{0:020d}.log"), str(mdir / "quorum-state"),
                                                str(log_dir / "orders-0" / f"{0:020d}.log")}
    assert any(line["type"] == "record" and line.get("payload", {}) == {
        "type": "FEATURE_LEVEL_RECORD", "data": {"name": "metadata.version", "feature_level": 21}} for line in lines)
