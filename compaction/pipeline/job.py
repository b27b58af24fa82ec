"""The compaction job: every selected partition of a plan cleaned as Kafka's cleaner would.

This module orchestrates, under the log dirs' locks its caller holds (``kcompact.steps``): it takes the
partitions (leases, recovery: ``compaction.pipeline.taking``), resets checkpoints, runs the stages (Spark
jobs named by job groups), reports, and gives the leases back. Stages:
1. batch plans: what Kafka's cleaner decides per batch from its header (``compaction.pipeline.batch_plans``);
2. offset map, 3. keep flags, 4. rewrite, one Spark job (nothing cached, no row per record or key
   shuffled): each partition by the path ``compaction.pipeline.routing`` chooses, read whole by one task
   (``compaction.pipeline.whole``) or, too big for one worker's memory, shared by many (``compaction.pipeline.shared``);
   each group's ``.cleaned`` files by ``compaction.cleaning.rewrite``; tasks cut by ``compaction.pipeline.tasks``;
5. commit, on the driver alone (``compaction.pipeline.committing``): per partition, every group swapped in or
   none (``operations.commit``).
A dry run counts and writes nothing.
"""

from __future__ import annotations

import contextlib
import posixpath
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kcompact import storage
from kcompact.compaction.cleaning.map_pass import Planned
from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.cleaning.results import GroupResult, fate_counts
from kcompact.compaction.cleaning.rewrite import GroupJob, GroupPlans
from kcompact.compaction.pipeline import shared, whole
from kcompact.compaction.pipeline.batch_plans import BATCH_PLAN, batch_plans
from kcompact.compaction.pipeline.checkpoint_resets import reset_checkpoints
from kcompact.compaction.pipeline.committing import Outcome, commit_partitions
from kcompact.compaction.pipeline.job_result import JobResult
from kcompact.compaction.pipeline.leases import LeaseKeeper
from kcompact.compaction.pipeline.routing import route
from kcompact.compaction.pipeline.settings import JobSettings
from kcompact.compaction.pipeline.taking import take_partitions
from kcompact.compaction.pipeline.tasks import JOB_CONF, sql_conf
from kcompact.compaction.pipeline.to_clean import PartitionToClean, to_clean
from kcompact.compaction.reports.report import PartitionReport, Report
from kcompact.compaction.rules.decisions import DISCARD, PLAN_FLAGS
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors import FormatError
from kcompact.operations import critical, states
from kcompact.operations.checkpoints import update_cleaner_offsets
from kcompact.operations.cleaned import remove_unfinished
from kcompact.operations.deleted import Removal
from kcompact.planner.plan import Plan
from kcompact.session import kinds
from kcompact.writers.chunks import BufferSizes

STOP_GRACE_S = 10.0  # how long a stop waits for Spark's cancelled tasks, within a scheduler's grace time


class Stopwatch:
    """Wall seconds per stage, laps back to back: their sum is the time since ``since``."""

    def __init__(self, since: float):
        self.last = since
        self.laps: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        at = time.monotonic()
        self.laps[stage] = at - self.last
        self.last = at


@dataclass(frozen=True)
class Batches:
    """Every batch plan of the partitions being cleaned, as columns in plan order (partition ``pid``,
    then file order), with ``gid`` the global index of the batch's output segment group. Shipped
    to executors with the tasks (a few bytes per batch), so that records meet their batch plan
    in the task that reads them instead of in a join."""

    starts: np.ndarray  # partition pid's rows are [starts[pid], starts[pid + 1])
    sizes: np.ndarray
    records: np.ndarray  # records per batch, by its header
    first_dirty: np.ndarray  # per partition
    latest_offset: np.ndarray  # per partition
    segment: np.ndarray
    position: np.ndarray
    gid: np.ndarray
    feeds_map: np.ndarray
    flags: np.ndarray  # (batches, len(PLAN_FLAGS)) bool
    pid_of_gid: np.ndarray  # the partition (row) of each group, batches or none

    @classmethod
    def of(cls, ok: pa.Table) -> Batches:
        blobs = ok.column("batches").to_pylist()
        plans = np.frombuffer(b"".join(blobs), BATCH_PLAN)
        counts = np.array([len(b) // BATCH_PLAN.itemsize for b in blobs], np.int64)
        groups = pa.compute.list_value_length(ok.column("groups")).to_numpy(zero_copy_only=False)
        group_starts = np.concatenate(([0], np.cumsum(groups)[:-1])).astype(np.int64)
        pid = np.repeat(np.arange(ok.num_rows), counts)
        return cls(
            starts=np.concatenate(([0], np.cumsum(counts))), sizes=plans["size"],
            records=plans["records"].astype(np.int64),
            first_dirty=ok.column("first_dirty_offset").to_numpy(), latest_offset=ok.column("latest_offset").to_numpy(),
            segment=plans["segment"].copy(), position=plans["position"].copy(),
            gid=(group_starts[pid] + plans["group"]).astype(np.int32), feeds_map=plans["feeds_map"].copy(),
            flags=np.stack([plans[name] for name in PLAN_FLAGS], axis=1).reshape(len(plans), len(PLAN_FLAGS)),
            pid_of_gid=np.repeat(np.arange(ok.num_rows), groups),
        )

    def bytes_read(self, pid: int) -> int:
        """The bytes of partition ``pid``'s batches."""
        return int(self.sizes[self.starts[pid]:self.starts[pid + 1]].sum())

    def group_plans(self, gid: int) -> GroupPlans:
        # as the column's own type: against a Python int numpy converts the whole column first, a
        # copy of every batch for each group, which made the driver quadratic in partitions
        at = self.gid.dtype.type(gid)
        lo, hi = np.searchsorted(self.gid, at, "left"), np.searchsorted(self.gid, at, "right")
        return GroupPlans(self.segment[lo:hi], self.position[lo:hi], self.sizes[lo:hi], self.flags[lo:hi],
                          self.feeds_map[lo:hi])

    def map_keys(self, pid: int) -> int:
        """At most how many keys partition ``pid``'s offset map holds: the records of the batches
        that feed it."""
        lo, hi = self.starts[pid], self.starts[pid + 1]
        return int(self.records[lo:hi][self.feeds_map[lo:hi]].sum())

    def planned(self, pid: int) -> dict[int, Planned]:
        """The batch plans of partition ``pid`` as the map pass reads them, per segment base offset."""
        lo, hi = self.starts[pid], self.starts[pid + 1]
        order = lo + np.argsort(self.segment[lo:hi], kind="stable")  # by segment, file order within each
        bases, firsts = np.unique(self.segment[order], return_index=True)
        bounds = np.append(firsts, hi - lo).tolist()
        out = {}
        for k, base in enumerate(bases.tolist()):
            at = order[bounds[k]:bounds[k + 1]]
            out[base] = Planned(
                self.position[at],
                self.feeds_map[at],
                self.flags[at, DISCARD],
                self.gid[at].astype(np.int64),
                self.records[at],
            )
        return out


def run(spark, plan: Plan, now: int, dry_run: bool = False, progress=print,
        ready: float | None = None, leases: LeaseKeeper | None = None, removal: Removal | None = None) -> JobResult:
    """Clean every selected partition of ``plan``.
    ``ready``: ``time.monotonic()`` when the session was ready, so the report's stages start with planning.
    ``leases``: the keeper of this job's leases (default: a new one with the default lease).
    ``removal``: started on the replaced segments' files once every partition is committed, for
    the caller to wait on before it lets the log dirs' locks go (it writes the last-run stamps
    meanwhile); by default they are removed before this returns."""
    settings = JobSettings.of(spark)
    started = time.monotonic()
    watch = Stopwatch(started if ready is None else ready)
    if ready is not None:
        watch.lap("plan")
    report = Report(now=now, dry_run=dry_run, stages=watch.laps)
    result = JobResult(report)
    waits = removal is None
    removal = removal or Removal()
    with leases or LeaseKeeper() as keeper:
        selected = plan.selected
        if not dry_run:
            selected = take_partitions(selected, keeper, result, progress)
            result.report.checkpoint_resets += reset_checkpoints(plan.rows, selected, progress)
        for row in corrupt_in_plan(plan.rows):
            result.fail(row, row.fault, row.fault_kind, cleaning=False)
        partitions = to_clean(selected, result.listed)
        if partitions:
            try:
                _clean(spark, settings, partitions, now, dry_run, progress, watch, result, keeper)
            finally:  # what was committed before a failure or a Ctrl-C goes too
                if result.deleted:
                    removal.start(result.deleted, settings.commit_threads)
            if not dry_run:
                _done_cleaning(result, progress)
        _give_back(result, keeper, dry_run)
        if waits:
            for problem in removal.wait():
                progress(f"  {problem}")
    report.observe_plan(plan.rows, marked=result.uncleanable, paused=[] if dry_run else _paused_now(report))
    report.seconds = time.monotonic() - started
    return result


def _paused_now(report: Report) -> list[str]:
    """The partitions this run passed over that are paused now, their leases given back: an
    operator paused them while it ran (aborted, or found paused when the job came to take them)."""
    paused = []
    for p in report.partitions:
        if p.skipped:
            with contextlib.suppress(FormatError, OSError):
                if states.read(p.path)[0].state == states.PAUSED:
                    paused.append(p.path)
    return paused


def _done_cleaning(result: JobResult, progress) -> None:
    """The checkpoint entry of each partition whose cleaning failed: its first dirty offset, as
    Kafka's cleanLog writes it in its ``finally`` (so a partition without an entry gets one)."""
    for log_dir, entries in result.done_cleaning.items():
        try:
            update_cleaner_offsets(log_dir, lambda current, entries=entries: current | entries)
        except (FormatError, OSError) as exc:
            progress(f"  cleaner checkpoint of {log_dir} not written after failed cleanings: {exc}")


def _clean(spark, settings: JobSettings, taken: list[PartitionToClean], now: int, dry_run: bool, progress,
           watch: Stopwatch, result: JobResult, keeper: LeaseKeeper) -> None:
    progress(f"stage 1/5: batch plans of {len(taken)} partition{'s' * (len(taken) != 1)}")
    kinds.name_jobs(spark, "kcompact-batch-plans", f"batch-level decisions for {len(taken)} partitions")
    partitions = batch_plans(spark, taken, now, settings)
    watch.lap("1 batch plans")
    ok = partitions.filter(pa.compute.is_null(partitions.column("error")))
    for row in PartitionBatches.read(partitions.filter(pa.compute.is_valid(partitions.column("error")))):
        result.fail(row, row.error, row.failure, seconds=row.seconds)
    if ok.num_rows == 0:
        return

    rows = PartitionBatches.read(ok, [name for name in ok.column_names if name != "batches"])  # Batches has them
    batches = Batches.of(ok)
    try:
        _rewrite_and_commit(spark, settings, rows, batches, now, dry_run, progress, watch, result, keeper)
    except BaseException as stop:  # Ctrl-C, SIGTERM (or the error of a Spark job they cancelled)
        if not dry_run and (isinstance(stop, KeyboardInterrupt) or critical.stop_asked()):
            _remove_unfinished(spark, rows, result, stop)  # what this job wrote and did not commit goes first
        raise


def _rewrite_and_commit(spark, settings: JobSettings, rows: list[PartitionBatches], batches: Batches, now: int,
                        dry_run: bool, progress, watch: Stopwatch, result: JobResult, keeper: LeaseKeeper) -> None:
    report = result.report
    jobs = _group_jobs(rows, batches, now, keeper.owner, settings.direct_writes)
    stage = "2-3 offset map, keep flags" if dry_run else "2-4 offset map, keep flags, rewrite"
    progress(f"stages {stage} ({len(jobs)} segment group{'s' * (len(jobs) != 1)})")
    kinds.name_jobs(spark, "kcompact-clean", f"offset map, keep flags, .cleaned segments for {len(jobs)} groups")
    with sql_conf(spark, JOB_CONF):
        written = _clean_groups(spark, settings, rows, batches, jobs, dry_run, keeper.owner)
    watch.lap(stage)
    counts = fate_counts(written)
    if dry_run:
        for pid, row in enumerate(rows):
            report.partitions.append(PartitionReport.of(row, batches.bytes_read(pid), counts, [], committed=False))
        return
    failing = {w.path for w in written if w.error}
    ready = sum(row.path not in failing for row in rows)
    progress(f"stage 5/5: committing {ready} of {len(rows)} partitions (swap, checkpoint)" if ready else
             "stage 5/5: nothing to commit: every partition failed")
    outcomes: list[Outcome] = []
    try:
        commit_partitions(rows, written, keeper.held, keeper.owner, result.generations, progress, outcomes,
                          settings.commit_threads)
    finally:  # what was committed before a signal stopped the command is reported (and its files removed)
        result.record(outcomes, batches.bytes_read, counts)
    watch.lap("5 commit")


def _remove_unfinished(spark, rows: list[PartitionBatches], result: JobResult, stop: BaseException) -> None:
    """A stop's clean-up, within the grace time a scheduler gives: once Spark's cancelled tasks
    have ended (none writes after), the ``.cleaned`` files of the partitions this job took and did
    not commit are removed (local disk: an object store's staged files are invisible to readers,
    and recovery sorts them by their commit records); what was removed and what could not be is
    told in the stop's notes (``add_note``), which the command line prints."""
    kinds.wait_for_jobs(spark, STOP_GRACE_S)
    committed = {p.path for p in result.report.partitions if p.committed}
    removed, left = [], []
    for row in rows:
        if row.path in committed or not storage.is_local_path(row.path):
            continue
        try:
            gone, why = remove_unfinished(row.path)
        except OSError as exc:
            gone, why = [], f"not listed: {storage.describe_error(exc, row.path)}"
        removed += gone
        if why:
            left.append(why)
    if removed:
        touched = len({posixpath.dirname(path) for path in removed})
        stop.add_note(f"removed {len(removed)} unfinished .cleaned file{'s' * (len(removed) != 1)} of {touched} "
                      f"partition{'s' * (touched != 1)}")
    for why in left:
        stop.add_note(f"left: {why}")


def corrupt_in_plan(plan: Iterable[PlanRow]) -> list[PlanRow]:
    """Idle compacted partitions the planner could not read because a segment is corrupt or a
    file cannot be read (the plan's ``fault``, of kind ``Failure.CORRUPT`` or ``UNREADABLE``):
    failures of this run, whoever found them first. Leftovers of an interrupted swap are not
    among them: ``recover`` is their way out."""
    return [row for row in plan if row.compacted and row.state == states.IDLE and row.fault is not None]


def _group_jobs(rows: list[PartitionBatches], batches: Batches, now: int, owner: str,
                direct: bool) -> dict[int, tuple[GroupJob, GroupPlans]]:
    jobs, gid = {}, 0
    for row in rows:
        config = row.config
        buffers = BufferSizes.of(config.io_buffer_size, config.cleaner_threads, config.max_message_bytes,
                                 config.message_max_bytes)
        for g in row.groups:
            job = GroupJob(
                path=row.path, group=g.group, base_offset=g.base_offset, segments=g.segments, sizes=g.sizes,
                mtime_ms=g.mtime_ms, aborted=tuple(t.txn() for t in g.aborted),
                index_interval_bytes=config.index_interval_bytes, max_index_bytes=config.segment_index_bytes,
                buffers=buffers, delete_retention_ms=config.delete_retention_ms, now=now,
                latest_offset=row.latest_offset, first_dirty=row.first_dirty_offset, owner=owner, direct=direct,
                index_per_batch=bool(config.index_per_batch), legacy_to_v2=bool(config.legacy_to_v2),
                gzip_os=int(config.gzip_os))
            jobs[gid] = (job, batches.group_plans(gid))
            gid += 1
    return jobs


def _clean_groups(spark, settings: JobSettings, rows: list[PartitionBatches], batches: Batches,
                  jobs: dict[int, tuple[GroupJob, GroupPlans]], dry_run: bool, owner: str) -> list[GroupResult]:
    """Stages 2-4, one Spark job: a result per segment group (``GroupResult``), each partition
    by the path ``compaction.pipeline.routing`` chooses: read whole by one task that makes its map and
    rewrites its groups, or its map made by many tasks and a shuffle of blobs, and its groups
    rewritten by tasks of their own."""
    sizes = [int(batches.sizes[batches.starts[pid]:batches.starts[pid + 1]].sum()) for pid in range(len(rows))]
    groups_of: dict[int, list[int]] = {}
    pid_of_gid = batches.pid_of_gid
    for gid in jobs:
        groups_of.setdefault(int(pid_of_gid[gid]), []).append(gid)
    keys = [batches.map_keys(pid) for pid in range(len(rows))]
    largest = {pid: max(int(jobs[gid][1].size.sum()) for gid in gids) for pid, gids in groups_of.items()}
    routes = route(settings.limits, list(groups_of), sizes, keys, largest)
    frames = []
    if routes.whole:
        frames.append(whole.clean(spark, routes.whole, sizes, keys, jobs, groups_of, dry_run, owner, settings))
    if routes.shared:
        theirs = {gid: jobs[gid] for pid in routes.shared for gid in groups_of[pid]}  # its functions hold these
        frames.append(shared.clean(spark, routes.shared, rows, batches, theirs, groups_of, dry_run, owner,
                                   routes.shared_map_bytes, routes.budget, settings.step_bytes))
    if not frames:
        return []
    union = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    return GroupResult.read(union.toArrow())


def _give_back(result: JobResult, keeper: LeaseKeeper, dry_run: bool) -> None:
    """Leases back: failed partitions uncleanable (with file and byte), transient failures and
    the rest idle; a partition failed without a lease (the planner found it corrupt) is
    marked uncleanable unless it is in some other state."""
    if dry_run:
        return
    for path, reason in result.uncleanable.items():
        if keeper.held(path):
            keeper.release(path, uncleanable=reason)
        else:
            states.mark_uncleanable(path, reason)
