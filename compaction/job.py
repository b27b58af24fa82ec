"""The compaction job: every selected partition of a plan cleaned as Kafka's cleaner would.

This module orchestrates: it takes the partitions (locks, leases, recovery), resets checkpoints,
runs the stages (Spark jobs named by job groups), reports, and gives the leases back. Stages:
1. batch plans: what Kafka's cleaner decides per batch from its header (``compaction.batch_plans``);
2. offset map, 3. keep flags, 4. rewrite, one Spark job (nothing cached, no row per record or key
   shuffled): each partition by the path ``compaction.routing`` chooses, read whole by one task
   (``compaction.whole``) or, too big for one worker's memory, shared by many (``compaction.shared``);
   each group's ``.cleaned`` files by ``compaction.rewrite``; tasks cut by ``compaction.tasks``;
5. commit, on the driver alone: per partition, every group swapped in or none (``operations.commit``).
A dry run counts and writes nothing.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from compaction import shared, whole
from compaction.batch_plans import BATCH_PLAN, batch_plans
from compaction.cleaner_config import CleanerConfig
from compaction.decisions import DISCARD, PLAN_FLAGS
from compaction.leases import LeaseKeeper
from compaction.map_pass import Planned
from compaction.report import PartitionReport, Report, group_outcomes
from compaction.results import ABORTED_BY_OPERATOR, IO_ERROR, OUT_OF_MEMORY, fate_counts
from compaction.rewrite import GroupJob, GroupPlans
from compaction.routing import route
from compaction.settings import DIRECT_WRITES, check_settings
from compaction.tasks import JOB_CONF, sql_conf
from compaction.to_clean import PartitionToClean, to_clean
from operations import commit, s3commit, states
from operations.cleaned import WrittenGroup
from operations.checkpoints import update_cleaner_offsets
from operations.deleted import Removal
from operations.recover import needs_recovery, recover_partition
from readers.errors import FormatError
from readers.indexes import AbortedTxn
from logdir.listing import Listing, Partition, list_log_dir, scan_partition
from planner.plan import Plan
from planner.scan import UNREADABLE
from writers.chunks import BufferSizes



@dataclass(slots=True)
class JobResult:
    report: Report
    uncleanable: dict[str, str] = field(default_factory=dict)  # partition dir -> reason
    # object stores: partition dir -> the latest commit record generation seen under our lease
    generations: dict[str, int] = field(default_factory=dict)
    # object stores: partition dir -> the partition as listed under our lease, for the tasks to read
    listed: dict[str, Partition] = field(default_factory=dict)
    # log dir -> {(topic, partition): first dirty offset} of the partitions whose cleaning failed:
    # Kafka's cleanLog writes that entry (doneCleaning) whether the cleaning succeeded or threw
    done_cleaning: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)  # what the commits renamed to .deleted, to remove

    def fail(self, row: dict, transient: bool = False, groups: list[dict] = (), cleaning: bool = True) -> None:
        """A partition this run could not clean: reported (with what became of each segment group:
        ``groups``), and marked uncleanable at the end unless the cause is transient (an I/O
        error, a log that changed under the job), a file the job may not read (the operator's
        to fix: retried every run until then) or the task's memory, no fault of the log's."""
        if not transient and not row["error"].startswith((IO_ERROR, OUT_OF_MEMORY, UNREADABLE)):
            self.uncleanable[row["path"]] = row["error"]
        if cleaning and not transient:
            self.done_cleaning.setdefault(row["log_dir"], {})[row["topic"], row["partition"]] = row["first_dirty_offset"]
        self.report.partitions.append(PartitionReport.failed(row, groups))


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

    def report_row(self, row: dict, pid: int) -> dict:
        """``row`` with its batches as ``PartitionReport.of`` reads them (their sizes)."""
        sizes = self.sizes[self.starts[pid]:self.starts[pid + 1]].tolist()
        return row | {"batches": [{"size": size} for size in sizes]}

    def group_plans(self, gid: int) -> GroupPlans:
        lo, hi = np.searchsorted(self.gid, gid, "left"), np.searchsorted(self.gid, gid, "right")
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
        segment = self.segment[lo:hi]
        out = {}
        for base in np.unique(segment).tolist():
            at = lo + np.flatnonzero(segment == base)
            out[base] = Planned(self.position[at], self.feeds_map[at], self.flags[at, DISCARD], self.gid[at].astype(np.int64),
                                self.records[at])
        return out


def run(spark, plan: Plan, now: int, dry_run: bool = False, progress=print,
        ready: float | None = None, leases: LeaseKeeper | None = None, removal: Removal | None = None) -> JobResult:
    """Clean every selected partition of ``plan``.
    ``ready``: ``time.monotonic()`` when the session was ready, so the report's stages start with planning.
    ``leases``: the keeper of this job's leases (default: a new one with the default lease).
    ``removal``: started on the replaced segments' files once every partition is committed, for
    the caller to wait on while it still holds the log dirs' locks (the command line writes its
    report meanwhile); by default they are removed before this returns."""
    check_settings(spark)
    started = time.monotonic()
    watch = Stopwatch(started if ready is None else ready)
    if ready is not None:
        watch.lap("plan")
    report = Report(now=now, dry_run=dry_run, stages=watch.laps)
    result = JobResult(report)
    waits = removal is None
    removal = removal or Removal()
    with contextlib.ExitStack() as held, leases or LeaseKeeper() as keeper:
        table = plan.table
        selected = table.filter(pa.compute.equal(table.column("selected"), True))
        if not dry_run:
            selected = _take_partitions(selected, keeper, result, progress, held)
            _reset_checkpoints(table, selected, result, progress)
        for row in corrupt_in_plan(table):
            result.fail(row, cleaning=False)
        partitions = to_clean(selected, result.listed)
        if partitions:
            try:
                _clean(spark, partitions, now, dry_run, progress, watch, result, keeper)
            finally:  # what was committed before a failure or a Ctrl-C goes too
                if result.deleted:
                    removal.start(result.deleted)
            if not dry_run:
                _done_cleaning(result, progress)
        _give_back(result, keeper, dry_run)
        if waits:
            for problem in removal.wait():
                progress(f"  {problem}")
    report.observe_plan(plan.table, marked=result.uncleanable)
    report.seconds = time.monotonic() - started
    return result


def _take_partitions(selected: pa.Table, keeper: LeaseKeeper, result: JobResult, progress,
                     held: contextlib.ExitStack) -> pa.Table:
    """Hold each log dir's ``.lock`` (re-entrant: the command line may hold it already), lease
    each selected partition and finish any swap a crashed run left in it (the broker's recovery).
    A partition in a log dir another process locks, or that another job holds, is skipped; one
    where recovery changed files is skipped too, since the plan no longer describes it (the next
    run plans it afresh). Each log dir is listed once, after its partitions are leased, and its
    cleaner checkpoint read once (an object store is asked nothing per partition that a listing
    tells); on an object store the partitions as listed go to the tasks (``result.listed``)."""
    import storage

    leased, locked = [], {}
    columns = ["path", "log_dir", "topic", "partition", "first_dirty_offset", "checkpoint_offset"]
    rows = selected.select(columns).to_pylist()
    for i, row in enumerate(rows):
        if row["log_dir"] not in locked:
            try:
                held.enter_context(storage.LogDirLock(row["log_dir"]))
                locked[row["log_dir"]] = None
            except storage.LogDirBusy as exc:
                locked[row["log_dir"]] = str(exc)
        busy = locked[row["log_dir"]] or keeper.acquire(row["path"])
        if busy is not None:
            result.report.partitions.append(PartitionReport.skipped_for(row, busy))
            progress(f"  skipped {row['topic']}-{row['partition']}: {busy}")
            continue
        leased.append(i)
    listings = {log_dir: list_log_dir(log_dir) for log_dir in dict.fromkeys(rows[i]["log_dir"] for i in leased)}
    checkpoints: dict[str, dict | str] = {}
    keep = []
    for i in leased:
        row = rows[i]
        listing = listings[row["log_dir"]]
        part = listing.partition(row["path"], row["topic"], row["partition"])
        # swaps only: the command line recovered the whole log dirs before planning
        recovered = recover_partition(row["path"], indexes=False) if needs_recovery(part) else None
        if recovered is not None and recovered.changed:
            keeper.release(row["path"])
            why = f"recovered an interrupted run first ({recovered.summary()}); planned again next run"
            result.report.partitions.append(PartitionReport.skipped_for(row, why))
            progress(f"  skipped {row['topic']}-{row['partition']}: {why}")
            continue
        if row["log_dir"] not in checkpoints:
            checkpoints[row["log_dir"]] = _cleaner_checkpoint(row["log_dir"])
        moved = _cleaned_since_plan(row, checkpoints[row["log_dir"]])
        if moved:
            keeper.release(row["path"])
            result.report.partitions.append(PartitionReport.skipped_for(row, moved))
            progress(f"  skipped {row['topic']}-{row['partition']}: {moved}")
            continue
        if not storage.is_local_path(row["path"]):
            result.generations[row["path"]] = (recovered.generation if recovered is not None
                                               else listing.generation(row["topic"], row["partition"]))
            if recovered is None:
                result.listed[row["path"]] = part
        keep.append(i)
    return selected.take(pa.array(keep, pa.int64()))  # an empty list alone has no type


def _reset_checkpoints(plan: pa.Table, taken: pa.Table, result: JobResult, progress) -> None:
    """Kafka's grabFilthiestCompactedLog writes the log start as the cleaner checkpoint entry of
    every compacted partition it considers (not being cleaned, paused or aborted elsewhere, not
    uncleanable) whose entry lies below the log start or past the log end (forceUpdateCheckpoint),
    before it drops the logs with nothing to clean: so do we, for every such partition of the
    plan, the selected ones this job took included. An entry that changed since planning (another
    job cleaned the partition meanwhile) is left alone: the change is compare-and-swap."""
    mine = set(taken.column("path").to_pylist())
    wanted: dict[str, list[dict]] = {}
    for row in plan.to_pylist():
        considered = (row["state"] == "idle" or row["path"] in mine) and "compact" in (row["cleanup_policy"] or "")
        if (considered and row["checkpoint_offset"] is not None and row["checkpoint_reset"] is not None
                and (not row["selected"] or row["path"] in mine)):
            wanted.setdefault(row["log_dir"], []).append(
                {"log_dir": row["log_dir"], "topic": row["topic"], "partition": row["partition"],
                 "from": row["checkpoint_offset"], "offset": row["first_dirty_offset"], "why": row["checkpoint_reset"]})
    for log_dir, resets in wanted.items():
        done = []

        def change(entries: dict, resets=resets, done=done) -> dict:
            done.clear()
            for r in resets:
                if entries.get((r["topic"], r["partition"])) == r["from"]:
                    entries[(r["topic"], r["partition"])] = r["offset"]
                    done.append(r)
            return entries

        try:
            update_cleaner_offsets(log_dir, change)
        except (FormatError, OSError) as exc:
            progress(f"  cleaner checkpoints of {log_dir} not reset: {exc}")
            continue
        for r in done:
            result.report.checkpoint_resets.append(r)
            progress(f"  reset the cleaner checkpoint of {r['topic']}-{r['partition']}: {r['why']}; "
                     f"now the log start {r['offset']}")


def _done_cleaning(result: JobResult, progress) -> None:
    """The checkpoint entry of each partition whose cleaning failed: its first dirty offset, as
    Kafka's cleanLog writes it in its ``finally`` (so a partition without an entry gets one)."""
    for log_dir, entries in result.done_cleaning.items():
        try:
            update_cleaner_offsets(log_dir, lambda current, entries=entries: current | entries)
        except (FormatError, OSError) as exc:
            progress(f"  cleaner checkpoint of {log_dir} not written after failed cleanings: {exc}")


def _cleaner_checkpoint(log_dir: str) -> dict | str:
    """The entries of ``log_dir``'s cleaner-offset-checkpoint, or what is wrong with the file."""
    import storage
    from readers import checkpoint

    path = storage.join(log_dir, checkpoint.CLEANER_OFFSET)
    found = storage.read_versioned(path)
    try:
        return checkpoint.parse(path, found[0]) if found else {}
    except FormatError as exc:
        return str(exc)


def _cleaned_since_plan(row: dict, entries: dict | str) -> str | None:
    """Another job cleaned the partition between this plan and our lease (its cleaner checkpoint
    entry moved; ``entries``: the checkpoint read after the lease): the plan's dirty range is
    stale, and cleaning it again would redo that work."""
    if isinstance(entries, str):
        return f"{entries}; planned again next run"
    now = entries.get((row["topic"], row["partition"]))
    if now == row["checkpoint_offset"]:
        return None
    return f"cleaned by another job since it was planned (checkpoint {row['checkpoint_offset']} -> {now}); planned again next run"


def _clean(spark, taken: list[PartitionToClean], now: int, dry_run: bool, progress, watch: Stopwatch,
           result: JobResult, keeper: LeaseKeeper) -> None:
    report = result.report
    sc = spark.sparkContext
    progress(f"stage 1/5: batch plans of {len(taken)} partition{'s' * (len(taken) != 1)}")
    sc.setJobGroup("kcompact-batch-plans", f"batch-level decisions for {len(taken)} partitions")
    partitions = batch_plans(spark, taken, now)
    watch.lap("1 batch plans")
    ok = partitions.filter(pa.compute.is_null(partitions.column("error")))
    for row in partitions.filter(pa.compute.is_valid(partitions.column("error"))).to_pylist():
        result.fail(row)
    if ok.num_rows == 0:
        return

    rows = ok.drop_columns(["batches"]).to_pylist()
    batches = Batches.of(ok)
    direct = spark.conf.get(DIRECT_WRITES, "true").strip().lower() == "true"
    jobs = _group_jobs(rows, batches, now, keeper.owner, direct)
    stage = "2-3 offset map, keep flags" if dry_run else "2-4 offset map, keep flags, rewrite"
    progress(f"stages {stage} ({len(jobs)} segment group{'s' * (len(jobs) != 1)})")
    sc.setJobGroup("kcompact-clean", f"offset map, keep flags, .cleaned segments for {len(jobs)} groups")
    with sql_conf(spark, JOB_CONF):
        written = _clean_groups(spark, rows, batches, jobs, dry_run, keeper.owner)
    watch.lap(stage)
    counts = fate_counts(written)
    if dry_run:
        for pid, row in enumerate(rows):
            report.partitions.append(PartitionReport.of(batches.report_row(row, pid), counts, [], committed=False))
        return
    failing = {w["path"] for w in written if w["error"]}
    ready = sum(row["path"] not in failing for row in rows)
    progress(f"stage 5/5: committing {ready} of {len(rows)} partitions (swap, checkpoint)" if ready else
             "stage 5/5: nothing to commit: every partition failed")
    # an object store's log dirs listed once for the stage, after every group was written
    listings = {log_dir: list_log_dir(log_dir) for log_dir in dict.fromkeys(row["log_dir"] for row in rows)
                if commit.by_record(log_dir)}
    wave, in_wave = commit.Wave(), {}
    for pid, row in enumerate(rows):
        groups = [w for w in written if w["path"] == row["path"]]
        errors = [w["error"] for w in groups if w["error"]]
        if errors or len(groups) != len(row["groups"]):
            _discard(groups)
            error = errors[0] if errors else "not every segment group was rewritten"
            if error == ABORTED_BY_OPERATOR:
                _aborted(row, result, progress)
            else:
                result.fail(row | {"error": error}, groups=group_outcomes(row, groups, "written"))
            continue
        changed = _changed_since_plan(row, listings.get(row["log_dir"]))
        if changed:
            _discard(groups)
            result.fail(row | {"error": changed}, transient=True)
            continue
        if not keeper.held(row["path"]):  # the last moment an abort can still stop us
            _discard(groups)
            _aborted(row, result, progress)
            continue
        try:
            result.deleted += _commit(row, groups, keeper.owner, result.generations.get(row["path"]), wave)
        except s3commit.CommitLost as exc:
            result.fail(row | {"error": str(exc)}, transient=True)
            continue
        except OSError as exc:  # the swap stopped part way: finish or undo it as a broker would
            try:
                recover_partition(row["path"], indexes=False)
                error = f"{IO_ERROR}commit failed ({exc}); the interrupted swap was recovered"
            except OSError as again:
                error = f"{IO_ERROR}commit failed ({exc}), recovery too ({again}): run 'kcompact recover'"
            result.fail(row | {"error": error})
            continue
        in_wave.setdefault(row["log_dir"], []).append((row, len(report.partitions)))
        report.partitions.append(PartitionReport.of(batches.report_row(row, pid), counts, groups, committed=True))
        progress(f"  committed {row['topic']}-{row['partition']} ({pid + 1}/{len(rows)}): "
                 f"checkpoint {row['latest_offset'] + 1}")
    for log_dir, exc in wave.finish().items():
        for row, at in in_wave[log_dir]:  # committed (readers see the new segments): the rest is recovery's
            error = f"{IO_ERROR}committed, but the commit record's apply did not finish ({exc}); the next run finishes it"
            report.partitions[at] = PartitionReport.failed(row | {"error": error}, [])
            progress(f"  {row['topic']}-{row['partition']}: {error}")
    watch.lap("5 commit")


def _aborted(row: dict, result: JobResult, progress) -> None:
    result.report.partitions.append(PartitionReport.skipped_for(row, "aborted by an operator; old segments kept"))
    progress(f"  aborted {row['topic']}-{row['partition']}: old segments kept")


def _changed_since_plan(row: dict, listing: Listing | None) -> str | None:
    """The segments the commit would replace are not those the job read (retention, another
    cleaner, a restarted broker got there first): committing would lose records. ``listing``:
    the log dir as listed for the commits (object stores; else the partition dir is listed now)."""
    part = (listing.partition(row["path"], row["topic"], row["partition"]) if listing is not None
            else scan_partition(row["path"], row["topic"], row["partition"]))
    now = [s.base_offset for s in part.segments if s.base_offset <= row["latest_offset"]]
    read = [base for g in row["groups"] for base in g["segments"]]
    if now != read:
        return f"the partition changed while it was being cleaned (segments {read} became {now}); cleaned next run"
    return None


def corrupt_in_plan(plan: pa.Table) -> list[dict]:
    """Idle compacted partitions the planner could not read because a segment is corrupt (a
    problem naming a .log file and byte) or a file cannot be read (``UNREADABLE``, naming it):
    failures of this run, whoever found them first. Leftovers of an interrupted swap are not
    among them: ``recover`` is their way out."""
    found = []
    for row in plan.to_pylist():
        if "compact" not in (row["cleanup_policy"] or "") or row["state"] != "idle":
            continue
        corrupt = [p for p in row["problems"] or [] if ".log: byte " in p or p.startswith(UNREADABLE)]
        if corrupt:
            found.append({"topic": row["topic"], "partition": row["partition"], "path": row["path"],
                          "first_dirty_offset": row["first_dirty_offset"], "seconds": 0.0, "error": corrupt[0]})
    return found


def _group_jobs(rows: list[dict], batches: Batches, now: int, owner: str,
                direct: bool) -> dict[int, tuple[GroupJob, GroupPlans]]:
    jobs, gid = {}, 0
    for row in rows:
        config = CleanerConfig.from_struct(row["config"])
        buffers = BufferSizes.of(config.io_buffer_size, config.cleaner_threads, config.max_message_bytes,
                                 config.message_max_bytes)
        for g in row["groups"]:
            job = GroupJob(
                path=row["path"], group=g["group"], base_offset=g["base_offset"], segments=tuple(g["segments"]),
                sizes=tuple(g["sizes"]),
                mtime_ms=g["mtime_ms"], aborted=tuple(AbortedTxn(**t) for t in g["aborted"]),
                index_interval_bytes=config.index_interval_bytes, max_index_bytes=config.segment_index_bytes,
                buffers=buffers, delete_retention_ms=config.delete_retention_ms, now=now,
                latest_offset=row["latest_offset"], first_dirty=row["first_dirty_offset"], owner=owner, direct=direct)
            jobs[gid] = (job, batches.group_plans(gid))
            gid += 1
    return jobs


def _clean_groups(spark, rows: list[dict], batches: Batches, jobs: dict[int, tuple[GroupJob, GroupPlans]],
                  dry_run: bool, owner: str) -> list[dict]:
    """Stages 2-4, one Spark job: a result row per segment group (``RESULT_SCHEMA``), each partition
    by the path ``compaction.routing`` chooses: read whole by one task that makes its map and
    rewrites its groups, or its map made by many tasks and a shuffle of blobs, and its groups
    rewritten by tasks of their own."""
    sizes = [int(batches.sizes[batches.starts[pid]:batches.starts[pid + 1]].sum()) for pid in range(len(rows))]
    groups_of: dict[int, list[int]] = {}
    pid_of_gid = batches.pid_of_gid
    for gid in jobs:
        groups_of.setdefault(int(pid_of_gid[gid]), []).append(gid)
    keys = [batches.map_keys(pid) for pid in range(len(rows))]
    largest = {pid: max(int(jobs[gid][1].size.sum()) for gid in gids) for pid, gids in groups_of.items()}
    routes = route(spark, list(groups_of), sizes, keys, largest)
    frames = []
    if routes.whole:
        frames.append(whole.clean(spark, routes.whole, sizes, keys, jobs, groups_of, dry_run, owner))
    if routes.shared:
        frames.append(shared.clean(spark, routes.shared, rows, batches, jobs, groups_of, dry_run, owner,
                                   routes.shared_map_bytes, routes.budget))
    if not frames:
        return []
    union = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    return union.toArrow().to_pylist()


def _commit(row: dict, groups: list[dict], owner: str, generation: int | None, wave: commit.Wave) -> list[str]:
    """The commit step (``operations.commit``) for a partition whose groups are all written."""
    written = [WrittenGroup(g["base_offset"], g["size"], g["batches"], g["records"], tuple(g["files"]))
               for g in groups]
    read = [base for g in row["groups"] for base in g["segments"]]
    return commit.commit_cleaned(row["log_dir"], row["path"], row["topic"], row["partition"], written, read,
                                 row["latest_offset"] + 1, owner, generation, wave)


def _discard(groups: list[dict]) -> None:
    commit.discard_cleaned(path for g in groups for path in g["files"])


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
