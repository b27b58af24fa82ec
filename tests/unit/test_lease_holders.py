"""Whose lease is dead without waiting for it to expire (issue 27, "A dead job's leases on object
storage"): a lease of this host whose process is gone, or whose pid a later process now has, is a
dead job's; a lease of another host, or of a live process of this one, stands until it expires.
Processes are real ones started here; what a held partition does to a run's report, to recovery's
report and to the exit status, without Spark.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pyarrow as pa

from kcompact.compaction.reports.report import PartitionReport, Report
from kcompact.contracts.plan_row import LeaseHolder, PlanRow
from kcompact.errors import EXIT_OK, EXIT_PARTIAL
from kcompact.errors.failure import Failure
from kcompact.jobs.cli import _exit_status
from kcompact.operations import states
from kcompact.operations.recover import RecoveryReport
from kcompact.planner.build import PLAN_SCHEMA
from kcompact.results import CompactionResult

HOUR = 3_600_000


def dead_pid() -> int:
    """The pid of a process that ran and was reaped."""
    proc = subprocess.Popen(["sleep", "0"])
    proc.wait()
    return proc.pid


def lease(pid: int, host: str | None = None, started_ms: int | None = None, owner: str = "job-x",
          **fields) -> states.CleaningState:
    now = states.wall_ms()
    return states.CleaningState(states.IN_PROGRESS, owner=owner, host=host or socket.gethostname(), pid=pid,
                                started_ms=now - 5_000 if started_ms is None else started_ms, heartbeat_ms=now,
                                lease_ms=states.LEASE_MS, **fields)


# -- the rule -----------------------------------------------------------------------------------------
def test_a_pid_that_is_not_alive_is_gone():
    assert states.process_gone(dead_pid(), states.wall_ms() - HOUR)


def test_a_live_process_that_started_before_the_lease_is_its_holder(live_child):
    time.sleep(0.05)
    assert not states.process_gone(live_child.pid, states.wall_ms())
    assert not states.process_gone(os.getpid(), states.wall_ms())
    assert not states.process_gone(live_child.pid, None)  # no start of the lease known: alive is alive


def test_a_reused_pid_is_not_the_holder(live_child):
    """The pid is alive, but its process started after the lease was taken (an hour ago)."""
    assert states.process_gone(live_child.pid, states.wall_ms() - HOUR)
    # within the slack for /proc's second-rounded start time and clock steps: still taken for the holder
    assert not states.process_gone(live_child.pid, states.wall_ms() - states.PID_START_SLACK_MS // 2)


def test_a_zombie_holds_nothing():
    proc = subprocess.Popen(["sleep", "0"])
    try:
        deadline = time.monotonic() + 10
        while open(f"/proc/{proc.pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[0] != b"Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert states.process_gone(proc.pid, states.wall_ms())
    finally:
        proc.wait()


def test_holder_gone_only_for_a_dead_process_of_this_host(live_child):
    dead = dead_pid()
    assert lease(dead).holder_gone() and lease(dead).lapsed() and lease(dead).skip_reason is None
    assert lease(live_child.pid, started_ms=states.wall_ms() - HOUR).holder_gone()  # pid reused
    assert not lease(live_child.pid, started_ms=states.wall_ms()).holder_gone()  # the live holder
    assert not lease(os.getpid()).holder_gone()
    assert not lease(dead, host="another-host").holder_gone()  # cannot be judged from here
    assert lease(dead, host="another-host").skip_reason.startswith("in progress (owner job-x on another-host pid ")
    assert not lease(dead, pid_ns="pid:[1]").holder_gone()  # another pid namespace: its pids are not ours
    assert lease(dead, pid_ns=states.pid_namespace()).holder_gone()
    assert states.replace(lease(dead), state=states.ABORTED).holder_gone()
    assert not states.replace(lease(dead), state=states.PAUSED).holder_gone()
    assert not states.CleaningState(states.IN_PROGRESS, owner="job-7").holder_gone()  # no host, no pid
    assert not states.replace(lease(dead), pid="12").holder_gone()  # not a pid


def test_a_lease_written_by_acquire_names_its_namespace(tmp_path):
    (tmp_path / "t-0").mkdir()
    got = states.acquire(str(tmp_path / "t-0"), "job-a")
    assert got.state.pid == os.getpid() and got.state.pid_ns == states.pid_namespace()
    read = states.read(str(tmp_path / "t-0"))[0]  # its heartbeat: the later of heartbeat_ms and its write's time
    assert read == states.replace(got.state, heartbeat_ms=read.heartbeat_ms)
    assert got.state.heartbeat_ms <= read.heartbeat_ms <= states.wall_ms()
    assert not got.state.holder_gone()


def test_acquire_takes_over_a_dead_holders_lease_and_respects_a_live_one(tmp_path, live_child):
    for name, state in {"dead-0": lease(dead_pid()), "live-0": lease(live_child.pid, started_ms=states.wall_ms()),
                        "other-0": lease(dead_pid(), host="another-host")}.items():
        (tmp_path / name).mkdir()
        (tmp_path / states.file_name(*name.split("-"))).write_bytes(state.to_json())
    got = states.acquire(str(tmp_path / "dead-0"), "job-b")
    assert isinstance(got, states.Lease) and states.read(str(tmp_path / "dead-0"))[0].owner == "job-b"
    for name in ("live-0", "other-0"):
        refused = states.acquire(str(tmp_path / name), "job-b")
        assert isinstance(refused, str) and refused.startswith("in progress (owner job-x on "), name
    assert states.abort(str(tmp_path / "dead-0")).state == states.ABORTED  # job-b is alive: asked to stop
    (tmp_path / states.file_name("dead", 0)).write_bytes(lease(dead_pid()).to_json())
    assert states.abort(str(tmp_path / "dead-0")).state == states.IDLE  # nobody left to acknowledge it


def test_a_refusal_for_a_live_lease_carries_its_holder():
    state = lease(2928, host="h")
    assert state.skip_reason.kind is Failure.LEASE_HELD and state.skip_reason.holder == LeaseHolder(
        owner="job-x", host="h", pid=2928, until=states.utc(state.heartbeat_ms + states.LEASE_MS))
    aborted = states.replace(state, state=states.ABORTED).skip_reason
    assert aborted.kind is Failure.LEASE_HELD and aborted.holder.owner == "job-x"
    assert states.CleaningState(states.IN_PROGRESS, owner="job-7").skip_reason.holder == LeaseHolder(owner="job-7")
    paused = states.CleaningState(states.PAUSED, pause_count=1).skip_reason
    uncleanable = states.CleaningState(states.UNCLEANABLE, reason="x").skip_reason
    assert (paused.kind, paused.holder) == (Failure.PAUSED, None)
    assert (uncleanable.kind, uncleanable.holder) == (Failure.UNCLEANABLE, None)


# -- what a held partition does to the reports and the exit status --------------------------------------
def row(path: str, state: str = "idle", skip: str | None = None, policy: str = "compact") -> dict:
    log_dir, _, name = path.rpartition("/")
    topic, _, number = name.rpartition("-")
    return {"topic": topic, "partition": int(number), "log_dir": log_dir, "path": path, "cleanup_policy": policy,
            "state": state, "skip_reason": skip, "selected": False, "skip_kind": states.kind_of(skip),
            "lease_holder": skip.holder.row() if isinstance(skip, states.Refusal) and skip.holder else None}


def test_a_run_lists_held_partitions_by_holder_and_is_partial():
    held = lease(2928, host="h", owner="kcompact-a")
    other = lease(77, host="g", owner="kcompact-b")
    rows = [row(f"s3://b/logs/orders-{i}", "in_progress", held.skip_reason) for i in (0, 10, 2)]
    rows += [row("s3://b/logs/orders-3", "in_progress", other.skip_reason),
             row("s3://b/logs/clicks-0", "in_progress", other.skip_reason, policy="delete"),  # no compaction held
             row("s3://b/logs/orders-4")]
    r = Report(1, False, [], seconds=0.5)
    r.observe_plan(PlanRow.read(pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)))
    until = states.utc(held.heartbeat_ms + states.LEASE_MS)
    assert [(h["partition"], h["owner"], h["host"], h["pid"]) for h in r.held] == [
        ("orders-0", "kcompact-a", "h", 2928), ("orders-2", "kcompact-a", "h", 2928),
        ("orders-3", "kcompact-b", "g", 77), ("orders-10", "kcompact-a", "h", 2928)]
    lines = r.text().split("\n")
    at = lines.index(f"held by another job: 3 partitions (owner kcompact-a, host h, pid 2928, lease until {until}) "
                     "-> they are cleaned once that job ends or its lease lapses")
    assert lines[at + 1] == "  s3://b/logs: orders-0, orders-2, orders-10"
    assert lines[at + 2].startswith("held by another job: 1 partition (owner kcompact-b, host g, pid 77, lease until ")
    assert lines[at + 2].endswith("-> it is cleaned once that job ends or its lease lapses")
    assert lines[-1] == ("nothing cleaned: 4 partitions held by another job (above), 1 other not due "
                         "('kcompact plan' says why)")
    assert not [line for line in lines if line.startswith("0 partitions")]
    assert [h["partition"] for h in r.to_json()["held"]] == ["orders-0", "orders-2", "orders-3", "orders-10"]
    result = CompactionResult(r, plan=None)  # what kcompact.compact returns; its counts read no plan
    assert (result.failed, result.attempted, result.incomplete) == (0, 0, 4)
    # what jobs.cli's compact gives _exit_status: held partitions make it partial, never 0
    assert _exit_status(result.failed, result.attempted, incomplete=result.incomplete) == EXIT_PARTIAL


def test_a_partition_another_job_took_after_planning_is_held_too():
    refusal = lease(2928, host="h").skip_reason
    r = Report(1, False, [PartitionReport.skipped_for(
        PlanRow(topic="orders", partition=5, path="s3://b/logs/orders-5", first_dirty_offset=0), refusal)])
    r.observe_plan(PlanRow.read(pa.Table.from_pylist([row("s3://b/logs/orders-5")], schema=PLAN_SCHEMA)))
    assert [(h["partition"], h["log_dir"]) for h in r.held] == [("orders-5", "s3://b/logs")]
    assert "  s3://b/logs: orders-5" in r.text().split("\n")


def test_recovery_notes_a_live_foreign_lease_without_failing():
    report = RecoveryReport(held={"s3://b/logs/orders-0": lease(2928, host="h").skip_reason})
    assert report.failed == 0
    lines = report.text().split("\n")
    assert lines[0].startswith(
        "note: s3://b/logs/orders-0: held by another job: in progress (owner job-x on h pid 2928;"
    )
    assert lines[-1] == "recovery: 0 partitions checked, 0 recovered, 0 skipped, 0 with problems, 1 held by another job"
    assert report.to_json()["held"] == report.held
    assert _exit_status(report.failed, 1) == EXIT_OK


def test_asking_whether_a_lease_is_held_does_not_wait_for_a_renewal_round(tmp_path, monkeypatch):
    """A round renews (and makes durable) every lease of the job, seconds at thousands of
    partitions: the commit's question, asked meanwhile, is answered at once, and a lease given
    back during the round is not put back by it."""
    from kcompact.compaction.pipeline.leases import LeaseKeeper

    real_renew_many, renewing = states.renew_many, []

    def slow_renew_many(leases):
        renewing.extend(lease.partition_dir for lease in leases)
        time.sleep(0.75)
        return real_renew_many(leases)

    monkeypatch.setattr(states, "renew_many", slow_renew_many)
    paths = [str(tmp_path / f"t-{p}") for p in range(4)]
    with LeaseKeeper(lease_ms=400) as keeper:  # a round every 100 ms, here 0.75 s long
        assert keeper.acquire_many(paths) == dict.fromkeys(paths)
        while not renewing:
            time.sleep(0.01)
        started = time.monotonic()
        assert keeper.held(paths[0])
        keeper.release(paths[3])
        assert time.monotonic() - started < 0.5, "held() or release() waited for the renewal round"
        time.sleep(1.0)  # the round that had the released lease in it ends
        assert not keeper.held(paths[3]) and states.read(paths[3])[0].state == states.IDLE
        assert keeper.held(paths[0])
    assert all(states.read(path)[0].state == states.IDLE for path in paths)
