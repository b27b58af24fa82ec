"""Retention end to end on Spark: the plan's retention columns, ``kcompact retain`` (dry run and
real), and ``kcompact run`` (retention, then plan, then compaction). Expectations are worked out
by hand from Kafka's rules (docs/compaction-semantics.md "Retention"), never from our code.

Log dir R holds one partition per case and is planned once (module fixture), then retained
once with --dry-run and once for real. Log dir Q holds one compact,delete partition for
``kcompact run``. Every closed segment is one kafka-python batch of 10 records of identical
length (S bytes); active segments hold 5 records (A bytes). retention.ms is 1 h where set.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from kcompact import errors
from kcompact.conf import resolve
from kcompact.conf.units import MB
from kcompact.contracts.plan_row import PlanRow
from kcompact.jobs import cli
from kcompact.operations.retention import execute
from kcompact.planner import output
from kcompact.planner.build import PLAN_SCHEMA, plan
from kcompact.readers.records import Record
from kcompact.storage import probe
from tests.support import checkpoint_text, kp_batches, kp_build, seg_path, write_partition

MIN, HOUR = 60_000, 3_600_000
NOW = 1_720_100_000_000  # a whole second: mtimes set from it read back exactly
RECENT = NOW - 10 * MIN  # every file's mtime unless a case sets another


def data(first: int, n: int, ts: int, keys=None) -> bytes:
    keys = range(first, first + n) if keys is None else keys
    return kp_build([Record(o, ts, b"key-%04d" % k, b"v" * 20) for o, k in zip(range(first, first + n), keys)],
                    base_offset=first)


S, A = len(data(0, 10, NOW)), len(data(0, 5, NOW))
assert S == len(data(10, 10, -1)) == len(data(20, 10, NOW - HOUR, keys=[0] * 10))


def closed(bases_ts: list[tuple[int, int]], active: int, active_ts: int = RECENT) -> list[tuple[int, list[bytes]]]:
    return [(b, [data(b, 10, ts)]) for b, ts in bases_ts] + [(active, [data(active, 5, active_ts)])]


TOPIC_ARGS = [
    *(f"{t}:retention.ms={HOUR}" for t in ("del", "paused", "busy", "notime", "nots")),
    f"size:retention.ms=-1,retention.bytes={2 * S + A}",
    "comp:cleanup.policy=compact,retention.ms=0,retention.bytes=0",  # compact only: size and time ignored
    "beyond:retention.ms=0",
]


def cli_args(*paths: Path) -> list[str]:
    args = [str(p) for p in paths] + ["--now", str(NOW), "--allow-unknown-topics"]  # one list for every log dir
    for arg in TOPIC_ARGS + ["both:cleanup.policy=[compact,delete],retention.ms=3600000"]:
        args += ["--topic-config", arg]
    return args


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000,) * 2)


def listing(root: Path) -> dict:
    """Every file (size, mtime, sha256) and directory under ``root``."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            out[rel + "/"] = None
        else:
            out[rel] = (path.stat().st_size, path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def names(part: Path) -> set[str]:
    return {p.name for p in part.iterdir()}


def seg_files(*bases: int, kinds=("log", "index", "timeindex")) -> set[str]:
    return {f"{b:020d}.{k}" for b in bases for k in kinds}


def build_r(r: Path) -> None:
    # retention.ms 1 h: 0 (3 h old) and 10 (2 h) go; 20 (30 min) stops the prefix, so 30 (3 h)
    # stays; the active 40 is 5 h old and stays. Segment 0 has a .txnindex, 10 and 40 a producer
    # snapshot: the files of 0 and 10 go with them, 40's snapshot stays.
    write_partition(r / "del-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 2 * HOUR), (20, NOW - 30 * MIN),
                                         (30, NOW - 3 * HOUR)], 40, NOW - 5 * HOUR),
                    txns={0: b""})
    (r / "del-0" / f"{10:020d}.snapshot").write_bytes(b"snapshot at 10")
    (r / "del-0" / f"{40:020d}.snapshot").write_bytes(b"snapshot at 40")
    # retention.bytes = 2S + A; total 3S + A -> diff S: 0 goes exactly (S - S = 0), 10 stays
    write_partition(r / "size-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 3 * HOUR), (20, NOW - 3 * HOUR)], 30))
    # compact only, log start 15 (checkpoint), in segment 10: 0 goes, 10 stays; time and size ignored
    write_partition(r / "comp-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 3 * HOUR)], 20))
    # like del-0's first two segments, but paused / being cleaned
    for name in ("paused-0", "busy-0"):
        write_partition(r / name, closed([(0, NOW - 3 * HOUR), (10, NOW - 2 * HOUR)], 20))
    (r / "kcompact-state.paused-0.json").write_text(json.dumps({"state": "paused", "pause_count": 1}))
    (r / "kcompact-state.busy-0.json").write_text(json.dumps({"state": "in_progress", "owner": "job-7"}))
    # log-start-offset-checkpoint 1000, log end 25; retention.ms 0 would take 0 and 10
    write_partition(r / "beyond-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 3 * HOUR)], 20))
    # segment 0's .timeindex is missing: its mtime (2 h ago) decides although its records are recent
    write_partition(r / "notime-0", closed([(0, RECENT), (10, RECENT)], 20))
    (r / "notime-0" / f"{0:020d}.timeindex").unlink()
    # records without timestamps (-1): empty .timeindex, mtimes decide: 0 (2 h) goes, 10 (10 min) stays
    write_partition(r / "nots-0", closed([(0, -1), (10, -1)], 20, -1))
    assert (r / "nots-0" / f"{0:020d}.timeindex").read_bytes() == b""
    (r / "log-start-offset-checkpoint").write_bytes(checkpoint_text([("comp", 0, 15), ("beyond", 0, 1000),
                                                                     ("gone", 0, 7)]))
    (r / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("comp", 0, 3), ("gone", 0, 99),
                                                                   ("size", 0, 12)]))
    for path in r.rglob("*"):
        if path.is_file():
            set_mtime(path, RECENT)
    set_mtime(r / "notime-0" / f"{0:020d}.log", NOW - 2 * HOUR)
    set_mtime(r / "nots-0" / f"{0:020d}.log", NOW - 2 * HOUR)


def build_q(q: Path) -> None:
    """compact,delete, retention.ms 1 h: 0 (3 h) and 10 (2 h) go; cleaner checkpoint 5 -> 20. Then
    compaction cleans [20, 40): segment 30 rewrites keys 0..4, so offsets 20..24 are superseded."""
    write_partition(q / "both-0", [
        (0, [data(0, 10, NOW - 3 * HOUR)]), (10, [data(10, 10, NOW - 2 * HOUR)]),
        (20, [data(20, 10, NOW - 30 * MIN, keys=range(10))]),
        (30, [data(30, 10, NOW - 20 * MIN, keys=[0, 1, 2, 3, 4, 20, 21, 22, 23, 24])]),
        (40, [data(40, 5, NOW - MIN, keys=range(30, 35))]),
    ])
    (q / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("both", 0, 5)]))
    for path in q.rglob("*"):
        if path.is_file():
            set_mtime(path, RECENT)


@pytest.fixture(scope="module")
def dirs(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("retention")
    r, q, out = root / "r", root / "q", root / "out"
    out.mkdir()
    build_r(r)
    build_q(q)
    before = listing(r)
    table = plan(spark, [str(r)], conf=resolve.build(topic_args=TOPIC_ARGS), now=NOW).table
    rows = {row["topic"]: row for row in table.to_pylist()}
    assert listing(r) == before  # planning writes nothing
    return SimpleNamespace(r=r, q=q, out=out, table=table, rows=rows, before=before)


# -- the plan ---------------------------------------------------------------------------------------
def deletes(*items) -> list[dict]:
    return [{"base_offset": b, "size": size, "largest_timestamp": ts, "reason": why} for b, size, ts, why in items]


def test_plan_retention_columns(dirs):
    rows = dirs.rows
    expected = {
        "del": (deletes((0, S, NOW - 3 * HOUR, "retention.ms"), (10, S, NOW - 2 * HOUR, "retention.ms")), 20, 2 * S),
        # retention.ms -1: no time index read, so no timestamp to show
        "size": (deletes((0, S, None, "retention.bytes")), 10, S),
        "comp": (deletes((0, S, None, "log start offset")), 15, S),
        "notime": (deletes((0, S, NOW - 2 * HOUR, "retention.ms")), 10, S),  # the .log's mtime
        "nots": (deletes((0, S, NOW - 2 * HOUR, "retention.ms")), 10, S),
        "paused": (deletes((0, S, NOW - 3 * HOUR, "retention.ms"), (10, S, NOW - 2 * HOUR, "retention.ms")), 20, 2 * S),
        "beyond": ([], None, 0),
    }
    for topic, (dels, start, nbytes) in expected.items():
        row = rows[topic]
        assert (row["retention_deletes"], row["retention_log_start"], row["retention_bytes_deleted"]) == (
            dels, start, nbytes), topic
    assert {t: rows[t]["retention_skip_reason"] for t in ("del", "size", "comp", "notime", "nots")} == dict.fromkeys(
        ("del", "size", "comp", "notime", "nots"))
    assert rows["paused"]["retention_skip_reason"] == "paused (1x; resume to clean)"
    assert rows["busy"]["retention_skip_reason"] .startswith("in progress (owner job-7 ")
    beyond = "log start offset 1000 (log-start-offset-checkpoint) is beyond the log end offset 25"
    assert rows["beyond"]["retention_skip_reason"].startswith("bad input: ")
    assert beyond in rows["beyond"]["retention_skip_reason"] and any(beyond in p for p in rows["beyond"]["problems"])
    # a missing time index is a note, and does not stop retention (Kafka reads the mtime too)
    assert any(n.endswith(f"{0:020d}.timeindex: missing for a closed segment: a broker creates it empty on load and "
                          "goes by the .log's modification time for the segment's largest timestamp")
               for n in rows["notime"]["notes"]), rows["notime"]["notes"]


def test_plan_segments_carry_largest_timestamps_of_delete_topics(dirs):
    segs = [(s["base_offset"], s["largest_timestamp"]) for s in dirs.rows["del"]["segments"]]
    # the last time-index entry of every closed segment; the active one is never read
    assert segs == [(0, NOW - 3 * HOUR), (10, NOW - 2 * HOUR), (20, NOW - 30 * MIN), (30, NOW - 3 * HOUR), (40, None)]
    assert [s["largest_timestamp"] for s in dirs.rows["notime"]["segments"]] == [None, RECENT, None]  # no file
    assert [s["largest_timestamp"] for s in dirs.rows["nots"]["segments"]] == [None, None, None]  # empty file
    assert [s["largest_timestamp"] for s in dirs.rows["comp"]["segments"]] == [None, None, None]  # not needed


def test_plan_prints_retention(dirs):
    text = output.describe_retention(PlanRow.read(dirs.table))
    lines = text.splitlines()
    assert lines[0] == "retention:" and lines[1].split() == ["partition", "segments", "MB", "log", "start", "reasons"]
    by_name = {line.split()[0]: line for line in lines[2:-1]}
    assert set(by_name) == {"del-0", "size-0", "comp-0", "notime-0", "nots-0", "paused-0", "busy-0", "beyond-0"}
    assert by_name["del-0"].split()[1:4] == ["2", f"{2 * S / MB:.2f}", "20"]
    assert by_name["del-0"].endswith("retention.ms (2)")
    assert by_name["comp-0"].endswith("log start offset (1)")
    assert "skip: paused (1x; resume to clean) [due: retention.ms (2)]" in by_name["paused-0"]
    assert "skip: bad input:" in by_name["beyond-0"]
    # due: del 2, size 1, comp 1, notime 1, nots 1 = 6 segments in 5 partitions; 3 skipped
    assert lines[-1] == f"5 partitions with 6 segments ({6 * S / MB:.1f} MB) to delete, 3 skipped"


# -- kcompact retain --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def retained(dirs):
    """--dry-run first (nothing may change), then the real run, on log dir R."""
    dry_report = dirs.out / "dry.json"
    dry_code = cli.main(["retain", *cli_args(dirs.r), "--dry-run", "--report", str(dry_report)])
    after_dry = listing(dirs.r)
    report = dirs.out / "retain.json"
    code = cli.main(["retain", *cli_args(dirs.r), "--report", str(report)])
    return SimpleNamespace(dry_code=dry_code, after_dry=after_dry, dry=json.loads(dry_report.read_text()),
                           code=code, report=json.loads(report.read_text()))


def test_dry_run_changes_nothing(dirs, retained):
    assert retained.dry_code == 4  # partial: beyond-0's bad input holds its retention back
    assert retained.after_dry == dirs.before  # byte for byte, mtimes included
    doc = retained.dry
    assert doc["dry_run"] and doc["now"] == NOW
    assert (doc["totals"]["segments"], doc["totals"]["bytes"], doc["totals"]["deleted"]) == (6, 6 * S, 0)
    by = {p["topic"]: p for p in doc["partitions"]}
    assert [s["base_offset"] for s in by["del"]["segments"]] == [0, 10] and not by["del"]["deleted"]


def test_prefix_deleted_with_every_file(dirs, retained):
    assert retained.code == 4  # partial: beyond-0's bad input holds its retention back, every run
    r = dirs.r
    # del-0: 0 and 10 gone with their .txnindex and snapshot; no .deleted file left behind
    assert names(r / "del-0") == seg_files(20, 30, 40) | {f"{40:020d}.snapshot"}
    assert names(r / "size-0") == seg_files(10, 20, 30)
    assert names(r / "comp-0") == seg_files(10, 20)
    assert names(r / "notime-0") == seg_files(10, 20)
    assert names(r / "nots-0") == seg_files(10, 20)
    # what stays is untouched, byte for byte
    after = listing(r)
    for rel, state in after.items():
        if not rel.endswith("checkpoint") and rel != ".lock":  # the broker's lock file, held by the job
            assert dirs.before[rel] == state, rel
    assert not [rel for rel in after if rel.endswith((".deleted", ".tmp"))]


def test_skipped_partitions_untouched(dirs, retained):
    after = listing(dirs.r)
    for name in ("paused-0", "beyond-0"):
        assert {k: v for k, v in after.items() if k.startswith(name)} == {
            k: v for k, v in dirs.before.items() if k.startswith(name)}, name
    by = {p["topic"]: p for p in retained.report["partitions"]}
    assert by["paused"]["skipped"] == "paused (1x; resume to clean)" and not by["paused"]["deleted"]
    # busy-0's in-progress lease has no job behind it: a live job would hold the log dir's .lock,
    # which retain took. Recovery, retain's first step, gives a dead job's lease back.
    assert by["busy"]["skipped"] is None and not (dirs.r / "kcompact-state.busy-0.json").exists()
    assert "beyond the log end offset 25" in by["beyond"]["skipped"]


def test_checkpoints_moved(dirs, retained):
    # one write per file: changed partitions set, the others the log dir holds (beyond) kept; gone (no
    # partition in this log dir) dropped, as Kafka's LogManager writes the log starts of its own logs
    assert (dirs.r / "log-start-offset-checkpoint").read_text().splitlines() == [
        "0", "7", "beyond 0 1000", "busy 0 20", "comp 0 15", "del 0 20", "notime 0 10", "nots 0 10", "size 0 10"]
    # comp 3 < new log start 15 -> 15; size 12 >= 10 stays; gone (no partition in this log dir) is
    # dropped, as Kafka's updateCheckpoints keeps only the dir's own logs on every write
    assert (dirs.r / "cleaner-offset-checkpoint").read_text().splitlines() == [
        "0", "2", "comp 0 15", "size 0 12"]


def test_retain_report(retained):
    doc = retained.report
    assert doc["totals"] == {"partitions": 8, "deleted": 6, "skipped": 2, "failed": 0, "segments": 8,
                             "bytes": 8 * S, "seconds": doc["totals"]["seconds"]}
    by = {p["topic"]: p for p in doc["partitions"]}
    assert (by["del"]["log_start"], by["del"]["new_log_start"], by["del"]["reasons"]) == (0, 20, {"retention.ms": 2})
    assert (by["comp"]["log_start"], by["comp"]["new_log_start"], by["comp"]["reasons"]) == (
        15, 15, {"log start offset": 1})
    assert by["size"]["reasons"] == {"retention.bytes": 1} and by["size"]["bytes_deleted"] == S
    assert by["notime"]["warnings"] == []  # its missing time index is the plan's note (a broker makes it up)
    assert all(by[t]["deleted"] for t in ("del", "size", "comp", "notime", "nots"))
    assert doc["notes"] == []  # local disk: renames are atomic


def test_partition_changed_since_planning_is_left_alone(tmp_path):
    part = write_partition(tmp_path / "x-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 3 * HOUR)], 20))
    before = listing(tmp_path)
    row = {"topic": "x", "partition": 0, "log_dir": str(tmp_path), "path": str(part), "cleanup_policy": "delete",
           "log_start_offset": 0, "retention_log_start": 10, "retention_bytes_deleted": S + 1,
           "retention_deletes": deletes((0, S + 1, NOW - 3 * HOUR, "retention.ms")), "problems": []}
    report = execute(PlanRow.read(pa.Table.from_pylist([row], schema=PLAN_SCHEMA)), now=NOW)
    (entry,) = report.partitions
    assert "changed since planning" in entry.error and not entry.deleted
    assert listing(tmp_path) == before
    assert report.totals["failed"] == 1 and cli._exit_status(1, report.attempted) == errors.EXIT_FAILED
    assert cli._exit_status(1, 2) == errors.EXIT_PARTIAL and cli._exit_status(0, 2) == errors.EXIT_OK


# -- object stores: deletions published by a commit record (operations.s3commit) -----------------------
BUCKET = "ret"
X_ROW = {"topic": "x", "partition": 0, "cleanup_policy": "delete", "log_start_offset": 0, "retention_log_start": 10,
         "retention_bytes_deleted": S, "retention_deletes": deletes((0, S, NOW - 3 * HOUR, "retention.ms")),
         "problems": []}
X_GONE = seg_files(0, kinds=("log", "index", "timeindex", "txnindex", "snapshot"))  # segment 0 and its snapshot


@pytest.fixture(scope="module")
def store(s3_endpoint, tmp_path_factory):
    """The bucket, and a local partition x-0 to upload: segments 0 (3 h old, with a .txnindex and
    a producer snapshot) and 10, active 20; retention.ms 1 h takes segment 0 (row ``X_ROW``)."""
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)
    fs.mkdir(BUCKET)
    src = tmp_path_factory.mktemp("x")
    part = write_partition(src / "x-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 3 * HOUR)], 20), txns={0: b""})
    (part / f"{0:020d}.snapshot").write_bytes(b"snapshot at 0")
    (src / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("x", 0, 3), ("y", 1, 9)]))
    return SimpleNamespace(fs=fs, src=src)


def uploaded(store, prefix: str) -> str:
    store.fs.put(f"{store.src}/", f"{BUCKET}/{prefix}/", recursive=True)
    return f"s3://{BUCKET}/{prefix}"


def objects(store, prefix: str) -> dict[str, bytes]:
    """Every object under the prefix: name relative to it -> bytes."""
    root = f"{BUCKET}/{prefix}/"
    return {p[len(root):]: store.fs.cat(p) for p in store.fs.find(root)}


def x_row(log_dir: str) -> list[PlanRow]:
    return [PlanRow.of(X_ROW | {"log_dir": log_dir, "path": f"{log_dir}/x-0"})]


def seen_bases(log_dir: str) -> list[int]:
    from kcompact.logdir.listing import scan_partition

    return [s.base_offset for s in scan_partition(f"{log_dir}/x-0", "x", 0).segments]


def test_local_and_object_store_retention_write_the_same_checkpoints(store, tmp_path):
    """One rule for both paths, Kafka's: each checkpoint keeps only the entries of the partitions
    the log dir holds (LogManager writes log-start-offset-checkpoint for the logs it holds,
    LogCleanerManager.updateCheckpoints cleaner-offset-checkpoint), so an entry of a partition
    gone from the log dir is dropped, on local disk as on S3, even from a file none of whose other
    entries moves; and the two leave the same bytes."""
    import shutil

    src = tmp_path / "src"
    write_partition(src / "x-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 3 * HOUR)], 20))
    (src / "log-start-offset-checkpoint").write_bytes(checkpoint_text([("gone", 0, 7), ("x", 0, 0)]))
    (src / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("gone", 0, 99), ("x", 0, 15)]))
    local = tmp_path / "local"
    shutil.copytree(src, local)
    store.fs.put(f"{src}/", f"{BUCKET}/same/", recursive=True)
    for log_dir in (str(local), f"s3://{BUCKET}/same"):
        (entry,) = execute(x_row(log_dir), now=NOW).partitions
        assert entry.deleted and entry.error is None, (log_dir, entry.error)
    # x's log start 0 -> 10; its cleaner entry 15 is not below 10 and stays; gone's entries go
    expected = {"log-start-offset-checkpoint": b"0\n1\nx 0 10\n", "cleaner-offset-checkpoint": b"0\n1\nx 0 15\n"}
    assert {name: (local / name).read_bytes() for name in expected} == expected
    on_s3 = objects(store, "same")
    assert {name: on_s3[name] for name in expected} == expected


def test_object_store_deletes_through_a_commit_record(store):
    """On s3:// (moto) the deletion is one commit record: generation 1, no staged files, segment
    0's files and snapshot replaced, log start 10; applied, it left those files gone and both
    checkpoints moved by compare-and-swap (the cleaner entry 3 below the new log start raised, y-1's
    entry dropped: no such partition in the log dir)."""
    from kcompact.logdir import commits

    log_dir = uploaded(store, "plain")
    report = execute(x_row(log_dir), now=NOW)
    (entry,) = report.partitions
    assert entry.deleted and entry.error is None and report.notes == []
    after = objects(store, "plain")
    assert {k[len("x-0/"):] for k in after if k.startswith("x-0/")} == seg_files(10, 20)
    assert after["log-start-offset-checkpoint"] == b"0\n1\nx 0 10\n"
    assert after["cleaner-offset-checkpoint"] == b"0\n1\nx 0 10\n"
    record = json.loads(after[commits.record_name("x", 0, 1)])
    assert (record["staged"], sorted(record["replaced"]), record["log_start"], record["checkpoint"]) == \
        ({}, sorted(X_GONE), 10, None)
    assert record["copied"] and record["applied"]
    assert seen_bases(log_dir) == [10, 20]


def test_object_store_every_write_failure_is_old_or_new(store):
    """The same retention through a filesystem failing its Nth write (EIO), for every N: the
    partition fails (transient), readers see all of it or the new log start, never a mix;
    ``kcompact recover`` then ends where the record decides: untouched byte for byte without
    one, segment 0 gone and both checkpoints moved with one."""
    from kcompact.logdir import commits
    from tests.support import FAULTY, failing_s3

    failing = failing_s3()
    failing.calls, failing.fail_at = 0, 0
    execute(x_row(uploaded(store, "sweep/none").replace("s3://", f"{FAULTY}://")), now=NOW)
    writes = failing.calls
    assert writes == 6  # the record, copied, one batched delete of the 5 files, 2 checkpoints, applied
    committed_at = []
    for n in range(1, writes + 1):
        prefix = f"sweep/{n:02d}"
        log_dir = uploaded(store, prefix)
        before = objects(store, prefix)
        failing.calls, failing.fail_at = 0, n
        (entry,) = execute(x_row(log_dir.replace("s3://", f"{FAULTY}://")), now=NOW).partitions
        assert not entry.deleted and f"injected I/O error at write {n}" in entry.error, n
        committed = commits.record_name("x", 0, 1) in objects(store, prefix)
        assert seen_bases(log_dir) == ([10, 20] if committed else [0, 10, 20]), n
        assert cli.main(["recover", log_dir]) == 0
        assert seen_bases(log_dir) == ([10, 20] if committed else [0, 10, 20]), n
        after = objects(store, prefix)
        after.pop(probe.PROBE, None)  # made by recover's conditional-write probe (kept, by design)
        if not committed:
            assert after == before, n
            continue
        committed_at.append(n)
        assert {k[len("x-0/"):] for k in after if k.startswith("x-0/")} == seg_files(10, 20), n
        assert after["log-start-offset-checkpoint"] == b"0\n1\nx 0 10\n", n
        assert after["cleaner-offset-checkpoint"] == b"0\n1\nx 0 10\n", n
        assert json.loads(after[commits.record_name("x", 0, 1)])["applied"], n
    assert committed_at == list(range(2, writes + 1))  # the record's PUT is the commit point


def test_object_store_waits_for_an_unapplied_commit(store):
    """A commit record not yet applied (a compaction committing, or interrupted) blocks retention
    of its partition: nothing touched. Once ``kcompact recover`` applied it, retention takes the
    next generation."""
    from kcompact.logdir import commits

    log_dir = uploaded(store, "unapplied")
    pending = commits.CommitRecord("x", 0, 1, "kcompact-other", {}, (), 3)
    store.fs.pipe(f"{BUCKET}/unapplied/{commits.record_name('x', 0, 1)}", pending.to_json())
    before = objects(store, "unapplied")
    (entry,) = execute(x_row(log_dir), now=NOW).partitions
    assert not entry.deleted and "generation 1 is not applied yet" in entry.error
    assert objects(store, "unapplied") == before
    assert cli.main(["recover", log_dir]) == 0
    (entry,) = execute(x_row(log_dir), now=NOW).partitions
    assert entry.deleted and entry.error is None
    after = objects(store, "unapplied")
    assert json.loads(after[commits.record_name("x", 0, 2)])["applied"]
    assert commits.record_name("x", 0, 1) in after and seen_bases(log_dir) == [10, 20]


def test_object_store_loses_the_generation_to_a_compaction(store, monkeypatch):
    """A compaction commits the partition between retention's listing and its record: the
    compaction's record has generation 1, retention's PUT of generation 1 fails, the partition is
    reported failed and nothing of retention's is applied."""
    from kcompact.logdir import commits
    from kcompact.operations import retention

    log_dir = uploaded(store, "race")
    winner = commits.CommitRecord("x", 0, 1, "kcompact-other", {}, (), 3, copied=True, applied=True)
    check = retention._state_skip

    def compaction_commits_meanwhile(partition_dir, policy):
        store.fs.pipe(f"{BUCKET}/race/{commits.record_name('x', 0, 1)}", winner.to_json())
        return check(partition_dir, policy)

    monkeypatch.setattr(retention, "_state_skip", compaction_commits_meanwhile)
    before = objects(store, "race")
    (entry,) = execute(x_row(log_dir), now=NOW).partitions
    assert not entry.deleted and "created by another writer first" in entry.error
    assert objects(store, "race") == before | {commits.record_name("x", 0, 1): winner.to_json()}
    assert seen_bases(log_dir) == [0, 10, 20]


def test_run_on_object_store(spark_s3, store, tmp_path):
    """``kcompact run`` on s3://: Q's compact,delete partition retained (generation 1) then
    compacted (generation 2) with the result worked out for the local run above."""
    from kcompact.logdir import commits
    from kcompact.logdir.listing import scan_partition

    build_q(tmp_path / "q")
    store.fs.put(f"{tmp_path / 'q'}/", f"{BUCKET}/q/", recursive=True)
    log_dir, report = f"s3://{BUCKET}/q", tmp_path / "run.json"
    assert cli.main(["run", log_dir, "--now", str(NOW), "--topic-config",
                     "both:cleanup.policy=[compact,delete],retention.ms=3600000", "--report", str(report)]) == 0
    doc = json.loads(report.read_text())
    (ret,) = doc["retention"]["partitions"]
    assert ([s["base_offset"] for s in ret["segments"]], ret["new_log_start"], ret["deleted"]) == ([0, 10], 20, True)
    (comp,) = doc["compaction"]["partitions"]
    assert (comp["dirty_start"], comp["dirty_end"], comp["committed"], comp["records_kept"]) == (20, 40, True, 15)
    after = objects(store, "q")
    assert {k for k in after if k.startswith("both-0/") and k.endswith(".log")} == \
        {f"both-0/{20:020d}.log", f"both-0/{40:020d}.log"}
    assert [r.offset for b in kp_batches(after[f"both-0/{20:020d}.log"]) for r in b] == list(range(25, 40))
    assert after["log-start-offset-checkpoint"] == b"0\n1\nboth 0 20\n"
    assert after["cleaner-offset-checkpoint"] == b"0\n1\nboth 0 40\n"
    records = [json.loads(after[commits.record_name("both", 0, g)]) for g in (1, 2)]
    assert [(r["log_start"], r["checkpoint"], r["applied"]) for r in records] == [(20, None, True), (None, 40, True)]
    assert not [k for k in after if k.endswith(".staged")]
    assert [s.base_offset for s in scan_partition(f"{log_dir}/both-0", "both", 0).segments] == [20, 40]


@pytest.mark.parametrize("arg, key", [
    ("del:retention.ms=-5", "retention.ms"),
    ("del:retention.bytes=ten", "retention.bytes"),
    ("del:retention.ms=1h", "retention.ms"),
])
def test_bad_settings_exit_2_naming_the_key(tmp_path, capsys, arg, key):
    write_partition(tmp_path / "del-0", closed([(0, NOW - 3 * HOUR)], 10))
    before = listing(tmp_path)
    code = cli.main(["retain", str(tmp_path), "--topic-config", arg])
    err = capsys.readouterr().err
    assert code == 2
    assert key in err and "--topic-config" in err and "Traceback" not in err
    assert listing(tmp_path) == before  # not even the .lock


# -- kcompact run: retention, then plan, then compaction ----------------------------------------------
def test_run_retention_then_compaction(dirs):
    q, report = dirs.q, dirs.out / "run.json"
    assert cli.main(["run", *cli_args(q), "--report", str(report)]) == 0
    doc = json.loads(report.read_text())
    assert set(doc) == {"outcome", "run", "now", "dry_run", "units", "recovery", "retention", "compaction"}
    assert doc["recovery"]["skipped"] == {} and doc["recovery"]["partitions"] == []  # nothing was interrupted
    (ret,) = doc["retention"]["partitions"]
    assert (ret["topic"], [s["base_offset"] for s in ret["segments"]], ret["new_log_start"]) == ("both", [0, 10], 20)
    # compaction planned after retention: first dirty = the reset checkpoint 20 = the new log start,
    # cleaned up to the active segment 40; keys 0..4 of offsets 20..24 superseded by 30..34
    (comp,) = doc["compaction"]["partitions"]
    assert (comp["topic"], comp["dirty_start"], comp["dirty_end"], comp["committed"]) == ("both", 20, 40, True)
    assert comp["removed"]["superseded"] == 5 and comp["records_kept"] == 15
    part = q / "both-0"
    assert {p.name for p in part.glob("*.log")} == {f"{20:020d}.log", f"{40:020d}.log"}
    offsets = [r.offset for b in kp_batches(seg_path(part, 20, "log").read_bytes()) for r in b]
    assert offsets == list(range(25, 40))
    assert (q / "log-start-offset-checkpoint").read_text() == "0\n1\nboth 0 20\n"
    assert (q / "cleaner-offset-checkpoint").read_text() == "0\n1\nboth 0 40\n"
    assert not [p for p in part.iterdir() if p.name.endswith((".deleted", ".cleaned", ".swap"))]


# -- the command on a real S3 server (SeaweedFS, tests/seaweedfs.py) --------------------------------------
SEAWEED_BUCKET = "ret-seaweed"
STORE_MUTATIONS = ("PUT", "COPY", "DELETE", "DELETE_BATCH", "MULTIPART")


def test_retain_on_seaweedfs_deletes_only_what_is_due(spark, seaweedfs, tmp_path):
    """``kcompact retain`` (not a dry run) on SeaweedFS, the counts at its proxy. x-0 (retention.ms
    1 h): 0 and 10 (3 h old) go with every file of theirs, 20 (30 min) stops the prefix, the active
    30 stays; keep-0 (all recent) and comp-0 (compact only) are untouched. log-start-offset-checkpoint
    x 0 -> 20, cleaner-offset-checkpoint x 5 -> 20 (below the new log start), comp 3 kept. Nothing
    else is written; one batched delete; a bounded number of requests."""
    from tests.seaweedfs import ACCESS_KEY, SECRET_KEY
    from tests.stores import Store

    src = tmp_path / "logs"
    write_partition(src / "x-0", closed([(0, NOW - 3 * HOUR), (10, NOW - 3 * HOUR), (20, NOW - 30 * MIN)], 30))
    (src / "x-0" / f"{10:020d}.snapshot").write_bytes(b"snapshot at 10")
    write_partition(src / "keep-0", closed([(0, NOW - 30 * MIN)], 10))
    write_partition(src / "comp-0", closed([(0, NOW - 3 * HOUR)], 10))
    (src / "log-start-offset-checkpoint").write_bytes(checkpoint_text([("x", 0, 0)]))
    (src / "cleaner-offset-checkpoint").write_bytes(checkpoint_text([("comp", 0, 3), ("x", 0, 5)]))
    store = Store("seaweedfs", seaweedfs.proxy, seaweedfs.proxy.endpoint, ACCESS_KEY, SECRET_KEY)
    fs = store.fs()
    fs.mkdir(SEAWEED_BUCKET)
    fs.put(f"{src}/", f"{SEAWEED_BUCKET}/logs/", recursive=True)
    root = f"{SEAWEED_BUCKET}/logs/"
    before = {p[len(root):]: fs.cat(p) for p in fs.find(root)}
    url = f"s3://{SEAWEED_BUCKET}/logs"
    with store.installed(spark):
        store.counter.reset()
        assert cli.main(["retain", url, "--now", str(NOW), "--topic-config", f"x:retention.ms={HOUR}",
                         "--topic-config", "comp:cleanup.policy=compact", "--allow-unknown-topics", "-q"]) == 0
        requests, by_key = store.counter.snapshot()["requests"], dict(store.counter.by_key)
    after = {p[len(root):]: fs.cat(p) for p in fs.find(root)}
    gone = {f"x-0/{n}" for n in seg_files(0, 10) | {f"{10:020d}.snapshot"}}
    assert gone <= set(before) and not gone & set(after), sorted(after)
    assert after["log-start-offset-checkpoint"] == b"0\n1\nx 0 20\n"
    assert after["cleaner-offset-checkpoint"] == b"0\n2\ncomp 0 3\nx 0 20\n"
    moved = {"log-start-offset-checkpoint", "cleaner-offset-checkpoint"}
    kept = {name: data for name, data in before.items() if name not in gone | moved}
    assert {name: after[name] for name in kept} == kept  # every other object as it was
    added = set(after) - set(before)
    assert added <= {".lock", "kcompact-probe", "kcompact-commit.x-0.0000000001.json"}, added
    # one object's writes by its key; the batched delete's by its bucket (its keys are in its body)
    written = {key.removeprefix(f"/{root}") for (op, key) in by_key if op in STORE_MUTATIONS and op != "DELETE_BATCH"}
    assert written <= moved | added, sorted(written)
    assert {key for (op, key) in by_key if op == "DELETE_BATCH"} == {f"/{SEAWEED_BUCKET}"}
    assert requests.get("DELETE_BATCH") == 1 and "COPY" not in requests, requests
    # a plan's 5 a partition (test_s3_requests.py), the probe's 3, the lock, the record's phases and
    # two checkpoints' read and compare-and-swap: 33 measured
    assert sum(requests.values()) <= 40, requests
