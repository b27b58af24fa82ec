"""The nightly job, ``kcompact run``; spark-submit entry point: ``spark-submit jobs/run.py LOGDIR...
[options]`` takes the same options.

Steps, in this order, on one Spark session and one clock (``now``), while the caller holds
each log dir's ``.lock``:
0. recovery: swaps an earlier run left unfinished are completed or undone, as a broker would
   on start (``operations.recover``);
1. retention: each partition's due prefix deleted, log start and cleaner checkpoints moved
   (``operations.retention``);
2. plan: Kafka's cleaning decision, made on the log as retention left it, so a cleaner
   checkpoint retention raised to the new log start is the first dirty offset;
3. compaction of every selected partition (``compaction.job.run``).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

import storage
from compaction.report import Report
from conf.units import UNIT_NOTE
from operations.recover import RecoveryReport
from operations.retention import RetentionReport


@dataclass(slots=True)
class NightlyReport:
    now: int
    dry_run: bool
    recovery: RecoveryReport | None  # None on a dry run: recovery writes
    retention: RetentionReport
    compaction: Report
    plan: pa.Table  # the compaction plan, as retention left the log dirs
    run: dict = field(default_factory=dict)  # where and how the run ran (jobs.cli: clock, host, Spark, arguments)

    @property
    def failed(self) -> int:
        recovery = self.recovery.failed if self.recovery else 0
        return recovery + self.retention.totals()["failed"] + self.compaction.totals()["failed"]

    @property
    def attempted(self) -> int:
        totals = self.compaction.totals()
        return self.retention.attempted + totals["partitions"] - totals["skipped"]

    @property
    def blocked(self) -> int:
        """Partitions bad input or an uncleanable state kept from retention or compaction (once each)."""
        return len({p.path for p in self.retention.blocked} | {b["path"] for b in self.compaction.blocked()})

    def text(self) -> str:
        """The compaction's summary: recovery's and retention's went to the console as each ended."""
        return self.compaction.text()

    def to_json(self) -> dict:
        return {"run": self.run, "now": self.now, "dry_run": self.dry_run, "units": UNIT_NOTE,
                "recovery": self.recovery.to_json() if self.recovery else None,
                "retention": self.retention.to_json(), "compaction": self.compaction.to_json()}


def nightly(spark, paths, conf=None, now: int | None = None, dry_run: bool = False,
            max_partitions: int | None = None, progress=print, lease_ms: int | None = None,
            summary: Callable[[str], None] | None = None, removal=None) -> NightlyReport:
    """The steps in order, each step's summary on ``summary`` (by default ``progress``) as it ends.
    ``removal``: as ``compact``'s."""
    from operations.states import LEASE_MS
    from operations.recover import recover_log_dirs
    from planner.build import build_config

    now = int(time.time() * 1000) if now is None else now
    conf = build_config(paths, conf)  # one configuration and one clock for every step
    # 0. recovery, before anything reads the log dirs
    recovery = None
    if not dry_run:
        recovery = recover_log_dirs(paths, progress=progress)
        (summary or progress)(recovery.text())
    # 1. retention
    retention, _ = retain(spark, paths, conf=conf, now=now, dry_run=dry_run, progress=progress)
    (summary or progress)(retention.text())
    # 2. plan, on the log as retention left it; 3. compaction
    progress("compaction: planning")
    compaction, table = compact(spark, paths, now=now, dry_run=dry_run, progress=progress, ready=time.monotonic(),
                                lease_ms=lease_ms or LEASE_MS, conf=conf, top=max_partitions, removal=removal)
    return NightlyReport(now, dry_run, recovery, retention, compaction, table)


def compact(spark, paths: Sequence[str], *, now: int, dry_run: bool, progress: Callable[[str], None], ready: float,
            lease_ms: int, conf=None, top: int | None = None, table: pa.Table | None = None,
            watch: Callable[..., contextlib.AbstractContextManager] = lambda *_: contextlib.nullcontext(),
            removal=None) -> tuple[Report, pa.Table]:
    """Plan (unless given the ``table``) and clean every selected partition of ``paths``, whose
    locks the caller holds; each log dir's last-run stamp read before and written after (when it
    began choosing: what Kafka's time-since-last-run-ms measures). ``watch(what, total_bytes)``:
    a context around planning and around cleaning (a progress line). ``removal``: an
    ``operations.deleted.Removal`` the caller waits on before it lets the locks go (else the
    replaced files are removed before this returns). Returns the report and the plan."""
    from compaction import job
    from compaction.leases import LeaseKeeper
    from operations import last_run
    from operations.states import wall_ms
    from planner.build import plan
    from planner.output import selected_bytes

    previous = {path: last_run.read(path) for path in paths}
    began = wall_ms()
    if table is None:
        with watch("planning"):
            table = plan(spark, paths, conf=conf, now=now, top=top).toArrow()
    with watch("cleaning", selected_bytes(table)):
        report = job.run(spark, table, now=now, dry_run=dry_run, progress=progress, ready=ready,
                         leases=LeaseKeeper(lease_ms=lease_ms), removal=removal).report
    report.previous_runs, report.began_choosing_ms = previous, began
    if not dry_run:
        for path in paths:
            last_run.write(path, began)
    return report, table


def retain(spark, paths: Sequence[str], conf=None, now: int | None = None, dry_run: bool = False,
           progress: Callable[[str], None] = print) -> tuple[RetentionReport, pa.Table]:
    """Plan retention for every partition under ``paths`` (on Spark), then delete (driver), holding
    each log dir's ``.lock`` throughout (``storage.LogDirBusy`` when another process has one).
    Returns the report and the plan it followed."""
    from operations.retention import execute
    from planner.build import plan

    started = time.monotonic()
    now = int(time.time() * 1000) if now is None else now
    with contextlib.ExitStack() as held:
        for path in paths:  # re-entrant: the command line holds them already
            held.enter_context(storage.LogDirLock(path, create=not dry_run))
        progress("retention: planning")
        table = plan(spark, paths, conf=conf, now=now, retention_only=True).toArrow()
        report = execute(table, now=now, dry_run=dry_run, progress=progress)
    report.seconds = time.monotonic() - started
    return report, table


if __name__ == "__main__":
    from jobs.cli import main

    sys.exit(main(["run", *sys.argv[1:]], own_process=True))
