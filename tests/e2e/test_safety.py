"""Cleaning states, leases, the broker's ``.lock``, two jobs at once, operator abort, I/O errors and
a full disk. Expectations come from Kafka's documented rules (LogCleanerManager's states, the
broker's log-dir lock, the swap protocol) and from listings read with kafka-python, not from the
code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact import errors
from kcompact.compaction.pipeline.leases import LeaseKeeper
from kcompact.jobs.cli import main
from kcompact.operations import deleted, states
from kcompact.readers.records import Record
from tests.support import kp_build, patch_storage, write_partition

NOW = 1_720_300_000_000
TS = NOW - 3_600_000
ROOT = Path(__file__).resolve().parents[2]
KCOMPACT = [sys.executable, "-m", "kcompact.jobs.cli"]
TOPIC_ARGS = ["--topic-config", "*:cleanup.policy=compact"]


def recs(first: int, keys: list[bytes], value_size: int = 8) -> bytes:
    return kp_build([Record(first + i, TS, k, b"v%d-" % (first + i) + b"x" * value_size) for i, k in enumerate(keys)],
                    base_offset=first)


def dirty_partition(part: Path, value_size: int = 8) -> Path:
    """0..3 a a b a | 4..5 b c | active 6 d: Kafka keeps 3 (a), 4 (b), 5 (c) of the cleaned range."""
    return write_partition(part, [(0, [recs(0, [b"a", b"a", b"b", b"a"], value_size)]),
                                  (4, [recs(4, [b"b", b"c"], value_size)]), (6, [recs(6, [b"d"], value_size)])])


def kept_offsets(part: Path) -> list[int]:
    out = []
    for log in sorted(part.glob("*.log")):
        out += [r.offset for batch in MemoryRecords(log.read_bytes()) for r in batch]
    return out


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def state_file(log_dir: Path, name: str) -> dict | None:
    path = log_dir / f"kcompact-state.{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


# -- states and leases, without Spark ---------------------------------------------------------------

def test_lease_is_exclusive_and_returned_idle(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    lease = states.acquire(part, "job-a")
    assert isinstance(lease, states.Lease)
    doc = state_file(tmp_path, "t-0")
    assert doc["state"] == "in_progress" and doc["owner"] == "job-a" and doc["pid"] == os.getpid()
    assert {"host", "started_ms", "heartbeat_ms", "lease_ms"} <= set(doc)
    other = states.acquire(part, "job-b")
    assert isinstance(other, str) and other.startswith("in progress (owner job-a ")
    assert states.renew(lease) is not None
    states.release(lease)
    assert state_file(tmp_path, "t-0") is None  # idle: no file


def test_racing_acquirers_exactly_one_wins(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    results = []
    barrier = threading.Barrier(8)

    def take(i):
        barrier.wait()
        results.append(states.acquire(part, f"job-{i}"))

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if isinstance(r, states.Lease)]
    assert len(winners) == 1
    assert state_file(tmp_path, "t-0")["owner"] == winners[0].state.owner


def test_expired_lease_is_taken_over_and_the_old_owner_cannot_renew(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    old = states.acquire(part, "dead-job", lease_ms=50)
    time.sleep(0.12)
    new = states.acquire(part, "next-job")
    assert isinstance(new, states.Lease)
    assert states.renew(old) is None and not states.still_held(old)
    assert states.release(old).owner == "next-job"  # a late release leaves the new owner's lease alone


def test_pause_is_nested_and_resume_undoes_one(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    assert states.pause(part).pause_count == 1
    assert states.pause(part).pause_count == 2
    assert isinstance(states.acquire(part, "job"), str)  # paused partitions are not cleaned
    assert states.resume(part).pause_count == 1
    assert states.resume(part).state == "idle"
    with pytest.raises(errors.StateError, match="not paused"):
        states.resume(part)


def test_abort_of_a_live_job_is_acknowledged_by_its_release(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    lease = states.acquire(part, "job")
    assert states.abort(part).state == "aborted"
    assert not states.still_held(lease)
    assert states.renew(lease) is None  # a heartbeat cannot overwrite the abort
    assert states.release(lease).state == "idle"


def test_pause_during_a_job_aborts_it_and_stays_paused_after(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    lease = states.acquire(part, "job")
    assert (states.pause(part).state, states.pause(part).pause_count) == ("aborted", 2)
    assert states.release(lease) == states.CleaningState("paused", pause_count=2)


def test_a_dead_owners_pending_pause_is_kept_not_taken_over(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    states.acquire(part, "dead", lease_ms=20)
    states.pause(part)
    time.sleep(0.06)
    assert states.acquire(part, "next").startswith("paused (1x")
    assert state_file(tmp_path, "t-0") == {"state": "paused", "pause_count": 1}


def test_abort_of_a_dead_owner_clears_at_once(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    states.acquire(part, "dead", lease_ms=20)
    time.sleep(0.06)
    assert states.abort(part).state == "idle"


def test_reset_uncleanable(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    states.mark_uncleanable(part, "x.log: byte 7: CRC mismatch")
    with pytest.raises(errors.StateError, match="uncleanable"):
        states.pause(part)
    assert states.reset_uncleanable(part).state == "idle"
    with pytest.raises(errors.StateError, match="not uncleanable"):
        states.reset_uncleanable(part)


def test_keeper_renews_leases_while_the_job_runs(tmp_path):
    part = str(dirty_partition(tmp_path / "t-0"))
    with LeaseKeeper(lease_ms=200) as keeper:
        assert keeper.acquire(part) is None
        first = states.read(part)[0].heartbeat_ms
        time.sleep(0.35)  # longer than the lease: only renewal keeps it
        assert states.read(part)[0].heartbeat_ms > first and not states.read(part)[0].expired()
        assert keeper.held(part)
        assert isinstance(states.acquire(part, "other"), str)
    assert state_file(tmp_path, "t-0") is None


# -- the command line: status, pause, resume, abort, reset-uncleanable ------------------------------

def test_status_names_the_state_and_the_way_out(tmp_path, capsys):
    for name in ("p-0", "u-0", "l-0", "e-0", "i-0", "s-0"):
        dirty_partition(tmp_path / name)
    assert main(["pause", str(tmp_path), "p-0", "p-0"]) == 0
    states.mark_uncleanable(str(tmp_path / "u-0"), "u-0/00000000000000000000.log: byte 9: CRC mismatch")
    states.acquire(str(tmp_path / "l-0"), "live-job")
    states.acquire(str(tmp_path / "e-0"), "dead-job", lease_ms=1)
    (tmp_path / "s-0" / f"{0:020d}.log.swap").write_bytes(b"")
    time.sleep(0.01)
    capsys.readouterr()
    assert main(["status", str(tmp_path), "--json"]) == 0
    rows = {r["partition"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"p-0", "u-0", "l-0", "e-0", "s-0"}  # idle i-0 only with --all
    assert rows["p-0"]["state"] == "paused" and "resume" in rows["p-0"]["way_out"] and "2x" in rows["p-0"]["way_out"]
    assert "CRC mismatch" in rows["u-0"]["detail"] and "reset-uncleanable" in rows["u-0"]["way_out"]
    assert rows["l-0"]["state"] == "in_progress" and "live-job" in rows["l-0"]["detail"]
    assert rows["e-0"]["state"] == "in_progress (lease expired)" and "takes it over" in rows["e-0"]["way_out"]
    assert rows["s-0"]["state"] == "interrupted" and "recover" in rows["s-0"]["way_out"]
    assert main(["status", str(tmp_path), "--all"]) == 0
    assert "i-0" in capsys.readouterr().out


def test_state_commands_exit_codes(tmp_path, capsys):
    dirty_partition(tmp_path / "t-0")
    assert main(["resume", str(tmp_path), "t-0"]) == 5  # the only partition named: refused
    assert "not paused" in capsys.readouterr().err
    assert main(["pause", str(tmp_path), "nonsense"]) == 2
    assert main(["abort", str(tmp_path), "t-0"]) == 5
    assert main(["reset-uncleanable", str(tmp_path), "t-0"]) == 5


# -- the broker's .lock -----------------------------------------------------------------------------

JAVA_LOCKER = """
import java.io.RandomAccessFile;
public class Locker {
    public static void main(String[] args) throws Exception {
        // what a Kafka broker does to each log dir on start (FileLock.tryLock on <dir>/.lock)
        var lock = new RandomAccessFile(args[0] + "/.lock", "rw").getChannel().tryLock();
        System.out.println(lock != null ? "locked" : "busy");
        System.out.flush();
        Thread.sleep(120_000);
    }
}
"""


@pytest.fixture
def java_holding_lock(tmp_path):
    """A second process, a JVM, holding the log dir's .lock exactly as a broker does."""
    log_dir = tmp_path / "logs"
    dirty_partition(log_dir / "t-0")
    source = tmp_path / "Locker.java"
    source.write_text(JAVA_LOCKER)
    proc = subprocess.Popen(["java", str(source), str(log_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield log_dir, proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_log_dir_locked_by_a_broker_is_refused_untouched(spark, java_holding_lock, capsys):
    log_dir, pid = java_holding_lock
    before = tree(log_dir)
    for command in (["compact", str(log_dir), *TOPIC_ARGS], ["retain", str(log_dir)], ["run", str(log_dir)],
                    ["recover", str(log_dir)]):
        assert main(command + (["--now", str(NOW)] if command[0] != "recover" else [])) == 5, command
        err = capsys.readouterr().err
        assert f"{log_dir}/.lock is locked by process {pid} (command line: java" in err and "Kafka broker" in err
        assert "Traceback" not in err
    assert tree(log_dir) == before


@pytest.mark.parametrize("command", ["compact", "retain", "run", "recover"])
def test_a_command_takes_each_log_dirs_lock_once(spark, tmp_path, monkeypatch, command):
    """One owner of the ``.lock`` (issue 44, item 5): the function that opens the command takes it,
    once per log dir, and no layer below enters it again (was: four entries per log dir for one
    ``compact``: the command line, the API, recovery, the job's taking of partitions)."""
    from kcompact.storage.lock import LogDirLock

    log_dirs = [tmp_path / "a", tmp_path / "b"]
    for i, log_dir in enumerate(log_dirs):
        dirty_partition(log_dir / f"t-{i}")
    entered, real_enter = [], LogDirLock.__enter__

    def enter(self):
        entered.append(os.path.realpath(self.log_dir))
        return real_enter(self)

    monkeypatch.setattr(LogDirLock, "__enter__", enter)
    clock = [] if command == "recover" else ["--now", str(NOW), *TOPIC_ARGS]
    assert main([command, *map(str, log_dirs), *clock]) == 0
    assert Counter(entered) == {str(d): 1 for d in log_dirs}
    if command in ("compact", "run"):
        assert all(kept_offsets(d / f"t-{i}") == [3, 4, 5, 6] for i, d in enumerate(log_dirs))  # cleaned under it


def test_lock_is_free_again_once_the_broker_is_gone(java_holding_lock):
    from kcompact import storage
    log_dir, pid = java_holding_lock
    with pytest.raises(errors.LogDirBusy, match=f"process {pid}"), storage.LogDirLock(str(log_dir)):
        pass
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    with storage.LogDirLock(str(log_dir)):  # the OS released it with the process
        pass


# -- two jobs at once -------------------------------------------------------------------------------

@pytest.mark.slow  # more than 20 s (make test-fast leaves it out)
def test_two_concurrent_jobs_never_clean_the_same_partition(tmp_path):
    log_dir = tmp_path / "logs"
    for p in range(4):
        dirty_partition(log_dir / f"t-{p}", value_size=2000)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([*KCOMPACT, "compact", str(log_dir), "--now", str(NOW), *TOPIC_ARGS,
                               "--report", str(tmp_path / f"r{i}.json")],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    cleaned = []
    for i in range(2):
        report = tmp_path / f"r{i}.json"
        if report.exists():
            cleaned += [(p["topic"], p["partition"]) for p in json.loads(report.read_text())["partitions"]
                        if p["committed"]]
    assert len(cleaned) == len(set(cleaned)) == 4, (codes, outs)  # each partition by exactly one job
    if codes == [0, 5]:  # the second found the log dir locked and said so
        assert any("is locked by process" in err for _, err in outs)
    else:  # or it came after the first finished and found nothing left to clean
        assert codes == [0, 0]
    for p in range(4):
        assert kept_offsets(log_dir / f"t-{p}") == [3, 4, 5, 6]


# -- operator abort, I/O errors, a full disk (in-process jobs on the session's Spark) -----------------

def _plan(spark, log_dir: Path):
    from kcompact.conf import resolve
    from kcompact.planner.build import plan

    config = resolve.build(topic_args=["*:cleanup.policy=compact"])
    return plan(spark, [str(log_dir)], conf=config, now=NOW)


def test_abort_stops_the_job_at_the_next_group_and_keeps_old_segments(spark, tmp_path):
    from kcompact.compaction.pipeline import job

    log_dir = tmp_path / "logs"
    for name in ("a-0", "b-0"):
        dirty_partition(log_dir / name)
    before = tree(log_dir / "a-0")

    def progress(line: str) -> None:
        if line.startswith("stages 2-4"):  # leases taken, batch plans made, groups not yet rewritten
            assert main(["abort", str(log_dir), "a-0"]) == 0

    result = job.run(spark, _plan(spark, log_dir), now=NOW, progress=progress)
    by = {p.topic: p for p in result.report.partitions}
    assert by["a"].skipped == "aborted by an operator; old segments kept" and not by["a"].committed
    assert by["b"].committed
    assert tree(log_dir / "a-0") == before  # untouched, no .cleaned left
    assert state_file(log_dir, "a-0") is None and state_file(log_dir, "b-0") is None  # abort acknowledged
    assert kept_offsets(log_dir / "b-0") == [3, 4, 5, 6]


def _locked_elsewhere(lock: Path) -> bool:
    """Another process cannot take the broker lock (a POSIX record lock, so it takes a process to
    ask: this one's own locks never conflict with it)."""
    probe = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)")
    return subprocess.run([sys.executable, "-c", probe, str(lock)]).returncode == 3


def test_replaced_files_go_once_every_partition_is_committed_under_the_lock(spark, tmp_path, monkeypatch):
    """The swap protocol ends with removing the replaced segments' ``.deleted`` files. The job
    removes them on threads of their own once every partition is committed (both checkpoint entries written,
    in one write for the wave), and the command waits for it (in the API, which holds the locks)
    before the broker ``.lock`` goes; none is left."""
    from kcompact import storage
    log_dir = tmp_path / "logs"
    for name in ("a-0", "a-1"):
        dirty_partition(log_dir / name)
    replaced = list(log_dir.rglob("0000000000000000000[04].*"))  # segments 0 and 4 of each partition
    real_rename, real_remove, events = storage.rename, storage.remove, []

    def rename(src, dst):
        real_rename(src, dst)
        if dst.endswith("/cleaner-offset-checkpoint"):
            events.append(("checkpoint",))

    def remove(path):
        if path.endswith(".deleted"):
            events.append(("remove", threading.current_thread().name, _locked_elsewhere(log_dir / ".lock")))
        real_remove(path)

    patch_storage(monkeypatch, "rename", rename)
    patch_storage(monkeypatch, "remove", remove)
    report = tmp_path / "r.json"
    assert main(["compact", str(log_dir), "--now", str(NOW), "--report", str(report), *TOPIC_ARGS]) == 0
    removed = [i for i, e in enumerate(events) if e[0] == "remove"]
    checkpoints = [i for i, e in enumerate(events) if e[0] == "checkpoint"]
    assert len(checkpoints) == 1 and len(removed) == len(replaced)
    assert min(removed) > max(checkpoints)
    assert {(events[i][1].startswith(deleted.NAME), events[i][2]) for i in removed} == {(True, True)}
    assert not list(log_dir.rglob("*.deleted")) and report.exists()
    assert kept_offsets(log_dir / "a-0") == kept_offsets(log_dir / "a-1") == [3, 4, 5, 6]


def test_a_job_returns_before_its_removal_ends_when_the_caller_takes_it(spark, tmp_path, monkeypatch):
    """Given a ``Removal``, ``job.run`` returns with the replaced files still being removed (the
    API writes the last-run stamps meanwhile); ``wait`` ends it."""
    from kcompact import storage
    from kcompact.compaction.pipeline import job
    from kcompact.operations.deleted import Removal

    part = dirty_partition(tmp_path / "logs" / "a-0")
    replaced = sorted(
        p.name for p in part.iterdir() if p.name.startswith(("00000000000000000000.", "00000000000000000004."))
    )
    release, real_remove = threading.Event(), storage.remove

    def held_back(path):
        release.wait(60)
        real_remove(path)

    patch_storage(monkeypatch, "remove", held_back)
    removal = Removal()
    result = job.run(spark, _plan(spark, tmp_path / "logs"), now=NOW, progress=lambda line: None, removal=removal)
    assert [p.committed for p in result.report.partitions] == [True]
    assert sorted(p.name for p in part.glob("*.deleted")) == [f"{name}.deleted" for name in replaced]
    release.set()
    assert removal.wait() == [] and not list(part.glob("*.deleted"))
    assert kept_offsets(part) == [3, 4, 5, 6]


def test_a_job_stopped_mid_commit_still_removes_what_it_committed(spark, tmp_path, monkeypatch):
    """An error (or a Ctrl-C) between two waves' commits (a wave of one partition here): the first
    partition is committed, its replaced files go all the same; the second keeps its segments
    (and its ``.cleaned`` files, for recovery to remove, as after any interrupted job)."""
    from kcompact.compaction.pipeline import committing, job
    from kcompact.operations import commit
    from kcompact.operations.deleted import Removal

    log_dir = tmp_path / "logs"
    parts = [dirty_partition(log_dir / name) for name in ("a-0", "a-1")]
    before = tree(parts[1])
    real_changed, seen = committing._changed_since_plan, []

    def stop_at_the_second(row, now):
        seen.append(row.path)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real_changed(row, now)

    monkeypatch.setattr(committing, "_changed_since_plan", stop_at_the_second)
    monkeypatch.setattr(commit, "WAVE", 1)
    removal = Removal()
    with pytest.raises(KeyboardInterrupt):
        job.run(spark, _plan(spark, log_dir), now=NOW, progress=lambda line: None, removal=removal)
    assert removal.wait() == []
    first, second = (Path(p) for p in seen)
    assert kept_offsets(first) == [3, 4, 5, 6] and not list(first.glob("*.deleted"))
    assert {k: v for k, v in tree(second).items() if not k.endswith(".cleaned")} == before  # recovery removes those
    assert not list(second.glob("*.deleted"))


def test_a_log_dirs_waves_list_its_root_once_for_their_checkpoints(spark, tmp_path, monkeypatch):
    """Three waves of one partition each: one listing of the log dir's root gives every wave's
    checkpoint write the partitions whose entries it keeps (not a listing a wave: quadratic in
    partitions), and every cleaned partition's entry is written."""
    from kcompact.compaction.pipeline import committing, job
    from kcompact.logdir import listing
    from kcompact.operations import checkpoints, commit

    log_dir = tmp_path / "logs"
    for name in ("a-0", "a-1", "a-2"):
        dirty_partition(log_dir / name)
    (log_dir / "cleaner-offset-checkpoint").write_text("0\n1\ngone 0 5\n")  # a partition the dir no longer holds
    listed = []

    def counted(path):
        listed.append(path)
        return listing.held_partitions(path)
    monkeypatch.setattr(committing, "held_partitions", counted)
    monkeypatch.setattr(checkpoints, "held_partitions", counted)
    monkeypatch.setattr(commit, "WAVE", 1)
    result = job.run(spark, _plan(spark, log_dir), now=NOW, progress=lambda line: None)
    assert [p.committed for p in result.report.partitions] == [True] * 3
    assert listed == [str(log_dir)]
    lines = (log_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    assert lines[:2] == ["0", "3"] and sorted(lines[2:]) == ["a 0 6", "a 1 6", "a 2 6"]


def test_a_full_disk_at_the_checkpoint_frees_the_replaced_files_first(spark, tmp_path, monkeypatch):
    """The replaced files wait for the end of the commit; when the disk has no room left for the
    checkpoint (ENOSPC), the wave's replaced files go at once and the checkpoint is written."""
    import errno

    from kcompact.compaction.pipeline import job
    from kcompact.operations import commit

    part = dirty_partition(tmp_path / "logs" / "a-0")
    real_update, calls = commit.update_cleaner_offsets, []

    def full_once(log_dir, change, held=None):
        calls.append(sorted(p.name for p in part.glob("*.deleted")))
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        real_update(log_dir, change, held)

    monkeypatch.setattr(commit, "update_cleaner_offsets", full_once)
    result = job.run(spark, _plan(spark, tmp_path / "logs"), now=NOW, progress=lambda line: None)
    assert [p.committed for p in result.report.partitions] == [True]
    assert calls[0] and calls[1] == []  # the replaced files were there, then gone before the second try
    assert "a 0 6" in (tmp_path / "logs" / "cleaner-offset-checkpoint").read_text().splitlines()  # dirty [0, 6)
    assert kept_offsets(part) == [3, 4, 5, 6] and not list(part.glob("*.deleted"))


def test_removal_says_what_it_could_not_remove():
    """A file someone removed first is as good as removed; one that cannot go is named, with the
    way out (recovery removes ``.deleted`` files)."""
    import tempfile

    from kcompact.operations.deleted import Removal

    with tempfile.TemporaryDirectory() as tmp:
        there, gone, stuck = Path(tmp, "1.log.deleted"), Path(tmp, "2.log.deleted"), Path(tmp, "3.log.deleted")
        there.write_bytes(b"x")
        stuck.mkdir()
        removal = Removal()
        assert removal.wait() == []  # never started: nothing to wait for
        removal.start([str(there), str(gone), str(stuck)])
        (problem,) = removal.wait()
        assert not there.exists() and stuck.exists()
        assert problem.startswith(f"{stuck}: not removed (") and "'kcompact recover' removes it" in problem


def test_io_error_during_commit_leaves_old_or_new_and_is_retried_next_run(spark, tmp_path, monkeypatch):
    """A rename fails part way through a swap (EIO): the job finishes or undoes the swap as a broker
    would, reports the partition, does not mark it uncleanable; the next run cleans it."""
    import errno

    from kcompact import storage
    from kcompact.compaction.pipeline import job

    log_dir = tmp_path / "logs"
    dirty_partition(log_dir / "a-0")
    old_offsets = kept_offsets(log_dir / "a-0")
    real_rename, calls = storage.rename, []

    def failing_rename(src, dst):
        calls.append(dst)
        if dst.endswith(".deleted") and len([c for c in calls if c.endswith(".deleted")]) == 2:
            raise OSError(errno.EIO, "Input/output error (injected)", dst)
        real_rename(src, dst)

    patch_storage(monkeypatch, "rename", failing_rename)
    result = job.run(spark, _plan(spark, log_dir), now=NOW, progress=lambda line: None)
    patch_storage(monkeypatch, "rename", real_rename)
    (report,) = result.report.partitions
    assert not report.committed and "I/O error" in report.error and "Input/output error (injected)" in report.error
    assert kept_offsets(log_dir / "a-0") in (old_offsets, [3, 4, 5, 6])  # old or new, never a mix
    assert not [p for p in (log_dir / "a-0").iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert state_file(log_dir, "a-0") is None  # transient: not uncleanable
    again = job.run(spark, _plan(spark, log_dir), now=NOW, progress=lambda line: None)
    assert [p.committed for p in again.report.partitions] in ([True], [])
    assert kept_offsets(log_dir / "a-0") == [3, 4, 5, 6]


@pytest.fixture
def tiny_disk(tmp_path):
    """A size-limited directory: a tmpfs mount of 160 KiB."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_while_writing_cleaned_segments(spark, tiny_disk):
    """Executors run out of space writing .cleaned files: the partition is reported and left as it
    was (no partial file), not marked uncleanable; once there is room, the next run cleans it."""
    from kcompact.compaction.pipeline import job

    log_dir = tiny_disk / "logs"
    write_partition(log_dir / "big-0", [(0, [recs(0, [b"k%d" % i for i in range(30)], 1500)]),
                                        (30, [recs(30, [b"k0"], 1500)]), (31, [recs(31, [b"z"], 10)])])
    dirty_partition(log_dir / "small-0")
    filler = tiny_disk / "filler"
    free = os.statvfs(tiny_disk).f_bavail * os.statvfs(tiny_disk).f_frsize
    filler.write_bytes(b"\0" * max(0, free - 20_000))  # room for small-0's output, not big-0's ~45 KB
    before = {name: tree(log_dir / name) for name in ("big-0", "small-0")}
    result = job.run(spark, _plan(spark, log_dir), now=NOW, progress=lambda line: None)
    by = {p.topic: p for p in result.report.partitions}
    assert (
        by["big"].error.startswith("I/O error") and f"no space left on {tiny_disk} (writing big-0/" in by["big"].error
    )
    for name, report in (("big-0", by["big"]), ("small-0", by["small"])):  # small-0 may have lost the race for space
        if not report.committed:
            assert tree(log_dir / name) == before[name] and "no space left on" in report.error
        assert state_file(log_dir, name) is None
    filler.unlink()
    again = job.run(spark, _plan(spark, log_dir), now=NOW, progress=lambda line: None)
    assert all(p.committed for p in again.report.partitions), again.report.text()
    assert kept_offsets(log_dir / "small-0") == [3, 4, 5, 6]
    assert kept_offsets(log_dir / "big-0") == list(range(1, 32))


def test_lease_length_is_a_job_option(spark, tmp_path):
    """``--lease-ms`` on compact and run; the lease a job writes says how long it stands unrenewed."""
    from kcompact.compaction.pipeline import job
    from kcompact.jobs.cli import build_parser

    for command in ("compact", "run"):
        assert build_parser().parse_args([command, "x", "--lease-ms", "60000"]).lease_ms == 60000
        assert build_parser().parse_args([command, "x"]).lease_ms == states.LEASE_MS
    log_dir = tmp_path / "logs"
    dirty_partition(log_dir / "b-0")
    seen = {}

    def progress(line: str) -> None:
        if line.startswith("stages 2-4"):
            seen.update(state_file(log_dir, "b-0"))

    job.run(spark, _plan(spark, log_dir), now=NOW, progress=progress, leases=LeaseKeeper(lease_ms=45_000))
    assert seen["state"] == "in_progress" and seen["lease_ms"] == 45_000
    assert state_file(log_dir, "b-0") is None
